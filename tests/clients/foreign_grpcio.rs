//! The gRPC faces driven by clients written by others, the way their users drive them:
//! Python's grpcio, sync and asyncio (`tests/foreign/grpcio_producers.py`), on both APIs —
//! a producer cancelled, its channel closed, its deadline passed, and many calls on one
//! channel — and Memory Service's own Python client stopping a response from another app
//! instance (`tests/foreign/memory_service_stop.py`). `scripts/test.sh` prepares the venv.
use crate::common;

use std::process::Output;

use common::python::{generate_stubs, script};
use common::*;

/// The checks a script printed that failed, as one line each, or the script's failure.
fn failed_checks(output: &Output) -> Vec<String> {
    let report = String::from_utf8_lossy(&output.stdout);
    let mut failed: Vec<String> = report
        .lines()
        .filter(|line| !line.starts_with("{\"ok\": true"))
        .map(String::from)
        .collect();
    if !output.status.success() && failed.is_empty() {
        failed.push(format!(
            "the script failed: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    failed
}

#[test]
fn grpcio_producers_that_go_away_without_complete_are_not_completed_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &["--producer-grace", "60s"]);
    let stubs = tempfile::tempdir().unwrap();
    generate_stubs(stubs.path());
    let output = output_within(
        script(stubs.path(), "tests/foreign/grpcio_producers.py").arg(server.addr.to_string()),
        DRIVER_LIMIT,
    );
    let failed = failed_checks(&output);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    // Both APIs: three endings × (sync, asyncio) × 3 checks, 2 deadline checks per mode... in
    // all 24 per API.
    let checks = String::from_utf8_lossy(&output.stdout).lines().count();
    assert_eq!(checks, 48, "{}", String::from_utf8_lossy(&output.stdout));
}

#[tokio::test]
async fn memory_services_client_stopped_from_another_instance_cancels_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let output = output_within(
        script(
            std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python")),
            "tests/foreign/memory_service_stop.py",
        )
        .arg("chat-stopped")
        .env("MEMORY_SERVICE_GRPC_TARGET", server.addr.to_string()),
        DRIVER_LIMIT,
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let seen = report["seen"].as_array().unwrap();
    assert!(seen.len() >= 5, "{report}");
    // The script ends only once the producing instance was told and its stream ended (its
    // source is endless).
    let replayed = replay_text(&server.recorder().await, b"chat-stopped")
        .await
        .unwrap();
    assert_eq!(
        replayed.status.as_deref(),
        Some("cancelled"),
        "{replayed:?}"
    );
    assert!(replayed.text.contains("token1"), "{replayed:?}");
}
