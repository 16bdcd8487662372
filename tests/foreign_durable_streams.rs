//! The HTTP face driven by clients written by others: `tests/foreign/durable_streams.mjs` runs
//! the Durable Streams project's TypeScript client (`@durable-streams/client`) and the
//! browser's own EventSource (headless Chromium) against the real binary, on realistic LLM
//! output (leading and trailing spaces, every kind of line break, text that looks like SSE
//! fields, characters split across appends, empty appends, JSON and binary streams), live and
//! as catch-up, and checks each reader got exactly what was written. `scripts/test.sh`
//! installs Node's packages (`npm ci` in `tests/foreign`) and Chromium.
mod common;

use std::process::Command;

use common::{BinaryServer, free_port};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn the_durable_streams_client_and_event_source_read_back_exactly_what_was_written() {
    let packages = format!("{ROOT}/tests/foreign/node_modules/@durable-streams/client");
    assert!(
        std::path::Path::new(&packages).exists(),
        "the npm packages are not installed in tests/foreign; run scripts/test.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    let http = free_port().to_string();
    let server = BinaryServer::spawn(dir.path(), &["--http-listen", &http]);
    let output = Command::new("node")
        .arg(format!("{ROOT}/tests/foreign/durable_streams.mjs"))
        .arg(format!("http://{http}"))
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
    // Every case ran every check: 6 cases × 6 checks.
    assert_eq!(report.lines().count(), 36, "{report}");
    drop(server);
}
