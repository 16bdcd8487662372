//! One test binary: the object-store tier against SeaweedFS: sealing, reading, expiry and deletion
//! there. One module per concern; `tests/common` is the harness every binary shares.
#[path = "../common/mod.rs"]
mod common;

mod object_store_lifecycle;
mod object_store_tier;
