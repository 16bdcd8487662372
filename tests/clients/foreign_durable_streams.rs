//! The HTTP face driven by clients written by others: `tests/foreign/durable_streams.mjs` runs
//! the Durable Streams project's TypeScript client (`@durable-streams/client`) and the
//! browser's own EventSource (headless Chromium) against the real binary, on realistic LLM
//! output (leading and trailing spaces, every kind of line break, text that looks like SSE
//! fields, characters split across appends, empty appends, appends of tens of KiB beside small
//! ones, JSON and binary streams), live and
//! as catch-up, and checks each reader got exactly what was written. `scripts/test.sh`
//! installs Node's packages (`npm ci` in `tests/foreign`) and Chromium.
use crate::common;

use common::{BinaryServer, node_clients};

#[test]
fn the_durable_streams_client_and_event_source_read_back_exactly_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &["--http-listen", "127.0.0.1:0"]);
    node_clients::durable_streams_read_back_what_they_wrote(&[server.http_base()]);
    drop(server);
}
