//! The scripts of `tests/foreign/`, run with Node, each printing one line per check:
//! `durable_streams.mjs` (the Durable Streams project's own client and the browser's
//! EventSource, in headless Chromium, write streams through one HTTP face and read them back
//! live and as catch-up through the others, checking every byte) and `grpc_js_recorder.mjs`.
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs the script with the writes on `bases[0]` and the reads spread over the rest (or on
/// `bases[0]` alone), and fails the test unless every check of every case passed.
pub(crate) fn durable_streams_read_back_what_they_wrote(bases: &[String]) {
    // Every case ran every check: 7 cases × 6 checks, the full event's 2 and the long text's 1.
    node_checks("durable_streams.mjs", "@durable-streams/client", bases, 45);
}

/// Runs `tests/foreign/SCRIPT` with Node on `args`, and fails the test unless the script
/// printed exactly `checks` lines, each a check that passed (`{"ok":true,…}`). The npm
/// `package` it imports must be installed (`scripts/test.sh` runs `npm ci`).
pub(crate) fn node_checks(script: &str, package: &str, args: &[String], checks: usize) {
    let packages = format!("{ROOT}/tests/foreign/node_modules/{package}");
    assert!(
        std::path::Path::new(&packages).exists(),
        "the npm packages are not installed in tests/foreign; run scripts/test.sh"
    );
    let output = super::output_within(
        Command::new("node")
            .arg(format!("{ROOT}/tests/foreign/{script}"))
            .args(args),
        super::DRIVER_LIMIT,
    );
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
    assert_eq!(report.lines().count(), checks, "{report}");
}
