//! One test binary: the Durable Streams face over HTTP, its documented behaviours, its limits,
//! the stop and the console. One module per concern; `tests/common` is the harness every binary shares.
#[path = "../common/mod.rs"]
mod common;

mod console;
mod http_documented;
mod http_face;
mod http_limits;
mod http_stop;
mod reader_socket;
mod sse_waits;
