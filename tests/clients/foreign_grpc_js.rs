//! The gRPC recorder driven by Node's `@grpc/grpc-js` the way Memory Service's TypeScript
//! helpers drive it (`tests/foreign/grpc_js_recorder.mjs`): their recorder, replay, cancel from
//! another app instance and resume check, a producer cancelled without `complete`, an unknown
//! conversation, and 500 recorders on one client. `scripts/test.sh` installs the npm packages.
use crate::common;

use common::BinaryServer;
use common::node_clients::node_checks;

/// Checks the script prints, one line each: 3 (record) + 5 (live replay) + 4 (cancel from
/// another client) + 5 (`call.cancel()`) + 5 (unknown conversation) + 4 (500 recorders).
const CHECKS: usize = 26;

#[test]
fn grpc_js_driven_as_memory_services_typescript_helpers_drive_it() {
    let dir = tempfile::tempdir().unwrap();
    // A short grace, so that the producer cancelled without `complete` ends `interrupted` soon.
    let server = BinaryServer::spawn(dir.path(), &["--producer-grace", "2s"]);
    let address = server.addr.to_string();
    node_checks("grpc_js_recorder.mjs", "@grpc/grpc-js", &[address], CHECKS);
    drop(server);
}
