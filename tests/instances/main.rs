//! One test binary: several instances located through Redis: redirects, forwarded calls, and what
//! happens when Redis dies, an object store they share. One module per concern; `tests/common` is the harness every binary
//! shares.
#[path = "../common/mod.rs"]
mod common;

mod instances;
mod object_store_instances;
