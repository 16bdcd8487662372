//! Quorum replication with openraft: several nodes keep one log of commits; an entry counts
//! once a majority has it fsynced, and every node changes its database only by applying
//! committed entries in log order.
//!
//! # Layout
//! - `types`: what openraft runs with (the entry payload, node ids).
mod types;

pub use types::{NodeId, Proposal, Raft, TypeConfig};
