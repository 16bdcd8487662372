//! The gRPC recorder driven by Node's `@grpc/grpc-js` the way Memory Service's TypeScript
//! helpers drive it (`tests/foreign/grpc_js_recorder.mjs`): their recorder, replay, cancel from
//! another app instance and resume check, a producer cancelled without `complete`, an unknown
//! conversation, and 500 recorders on one client. `scripts/test.sh` installs the npm packages.
use crate::common;

use std::path::Path;
use std::process::Command;

use common::BinaryServer;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Checks the script prints, one line each: 3 (record) + 5 (live replay) + 4 (cancel from
/// another client) + 5 (`call.cancel()`) + 5 (unknown conversation) + 4 (500 recorders).
const CHECKS: usize = 26;

#[test]
fn grpc_js_driven_as_memory_services_typescript_helpers_drive_it() {
    assert!(
        Path::new(&format!("{ROOT}/tests/foreign/node_modules/@grpc/grpc-js")).exists(),
        "the npm packages are not installed in tests/foreign; run scripts/test.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    // A short grace, so that the producer cancelled without `complete` ends `interrupted` soon.
    let server = BinaryServer::spawn(dir.path(), &["--producer-grace", "2s"]);
    let output = Command::new("node")
        .arg(format!("{ROOT}/tests/foreign/grpc_js_recorder.mjs"))
        .arg(server.addr.to_string())
        .output()
        .expect("cannot run node");
    let report = String::from_utf8_lossy(&output.stdout);
    let failures: Vec<&str> = report
        .lines()
        .filter(|line| !line.starts_with("{\"ok\":true"))
        .collect();
    assert!(
        output.status.success() && failures.is_empty(),
        "checks failed:\n{}\nstderr:\n{}",
        failures.join("\n"),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(report.lines().count(), CHECKS, "{report}");
    drop(server);
}
