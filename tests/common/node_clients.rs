//! `tests/foreign/durable_streams.mjs`, run with Node: the Durable Streams project's own client
//! and the browser's EventSource (headless Chromium) write streams through one HTTP face and
//! read them back live and as catch-up through the others, checking every byte.
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs the script with the writes on `bases[0]` and the reads spread over the rest (or on
/// `bases[0]` alone), and fails the test unless every check of every case passed.
pub(crate) fn durable_streams_read_back_what_they_wrote(bases: &[String]) {
    let packages = format!("{ROOT}/tests/foreign/node_modules/@durable-streams/client");
    assert!(
        std::path::Path::new(&packages).exists(),
        "the npm packages are not installed in tests/foreign; run scripts/test.sh"
    );
    let output = Command::new("node")
        .arg(format!("{ROOT}/tests/foreign/durable_streams.mjs"))
        .args(bases)
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
}
