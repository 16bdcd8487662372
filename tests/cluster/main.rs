//! One test binary: a Raft cluster of real nodes on loopback: replication, partitions, the log, the
//! object store behind it. One module per concern; `tests/common` is the harness every binary
//! shares.
#[path = "../common/mod.rs"]
mod common;

mod dashboard;
mod raft_log_suite;
mod readiness;
mod replication;
mod replication_failing_disk;
mod replication_http;
mod replication_partition;
mod replication_tier;
mod replication_torture;
mod traces;
