//! One test binary: crashes, torn and bad files, a full disk, failing syncs, and the recorder
//! against its model.
//! One module per concern; `tests/common` is the harness every binary shares.
#[path = "../common/mod.rs"]
mod common;

mod bad_files;
mod crash_restart;
mod crash_torture;
mod disk_full;
mod failing_disk;
mod fork_crash;
mod model;
mod wal_crash;
