//! Quorum replication with openraft: several nodes keep one log of commits; an entry counts
//! once a majority has it fsynced, and every node changes its database only by applying
//! committed entries in log order.
//!
//! # Layout
//! - `types`: what openraft runs with (the entry payload, node ids).
//! - `http_writes`: writes on the HTTP face of a node that does not lead, run by the
//!   leader's face.
//! - `ending`: cancels and deletes made on the leader, for any node's clients.
//! - `forwarded`, `produce`: producer sessions a node holds for its clients, run by the
//!   leader (this node's side, the leader's side), failing over to the next leader;
//!   `forwarded_session`: the task that runs this node's side over its call to the leader.
//! - `log/`: this node's Raft log on disk (openraft's log storage), indexed in memory: its
//!   reader, its on-disk formats, its writer thread (group commit, one fdatasync per batch,
//!   before openraft hears an entry is persisted).
//! - `machine`: the state machine, which applies committed entries to the store;
//!   `snapshots`: its snapshots, files beside the log.
//! - `node`: a node started: the log, the state machine, the network; `formation`: the
//!   cluster formed or rejoined; `leadership`: leading, and the channel to the leader;
//!   `proposer`: the store's commits proposed.
//! - `rejoin`: a node that found its log empty votes again only once it has caught up.
//! - `overview`: what a node knows of the cluster (`tapedeck cluster status`, the metrics),
//!   on a follower with the leader's view of each node; `answers`: when each peer last
//!   answered;
//!   `readiness`: whether it is ready for traffic (`/readyz`, gRPC health).
//! - `tls`: TLS between nodes, from the gRPC TLS settings.
//! - `network`, `service`: openraft's RPCs between nodes, client and server side, over
//!   tonic on `--cluster-listen`; `wire`: how they are encoded.
//! - `settings`: `--node-id`, `--cluster-listen`, `--cluster-peers`, checked.
mod answers;
mod applied;
mod ending;
mod formation;
mod forwarded;
mod forwarded_session;
mod http_writes;
mod leadership;
mod log;
mod machine;
mod network;
mod node;
mod overview;
mod produce;
mod proposer;
mod readiness;
mod rejoin;
mod relay;
mod service;
mod settings;
#[cfg(test)]
mod sim;
mod snapshots;
mod tls;
mod types;
mod wire;

pub use forwarded::ForwardedProducer;
pub use http_writes::LocalHttp;
pub use log::LogStore;
pub use node::{Cluster, Served};
pub use overview::{ClusterStatus, NodeProgress};
pub use settings::ClusterConfig;

pub use types::{NodeId, Proposal, Raft, TypeConfig};
