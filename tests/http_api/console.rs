//! The console in a real browser: headless Chromium (Debian's `chromium`, driven by
//! playwright-core from `tests/browser/console.mjs`) against the real binary. A recording made
//! over gRPC appears in the list live; its page shows tokens as they come; its Stop button
//! ends the producer's `Record` as CANCELLED; a delete leaves a tombstone; hostile ids and
//! content never run as markup; with access control on, the page sees nothing without a
//! credential and only what a reader grant covers. The test saves the screenshots the docs
//! show (`TAPEDECK_TEST_SHOTS`, else a temporary directory).
use crate::common;

use std::io::{BufRead, BufReader, Lines};
use std::process::{ChildStdout, Command, Stdio};

use common::*;
use tapedeck::access::Role;
use tapedeck::pb::RecordStatus;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SECRET: &str = "console-grant-secret-of-at-least-32-bytes";

/// Starts the console driver in `mode` against `base`; its stdout, line by line.
fn driver(
    mode: &str,
    base: &str,
    arg: &str,
) -> (std::process::Child, Lines<BufReader<ChildStdout>>) {
    let installed = format!("{ROOT}/tests/browser/node_modules/playwright-core");
    assert!(
        std::path::Path::new(&installed).exists(),
        "playwright-core is not installed in tests/browser; run scripts/test.sh"
    );
    let mut child = Command::new("node")
        .arg(format!("{ROOT}/tests/browser/console.mjs"))
        .args([mode, base, arg])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cannot run node");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    tokio::task::block_in_place(|| lines.next())
        .expect("the driver ended early")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_watches_stops_and_deletes_recordings_in_the_console() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &["--http-listen", "127.0.0.1:0"]);
    let recorder = server.recorder().await;
    // Ids and content are whatever a producer sent: markup included.
    let hostile_id = "x<img src=x onerror=window.pwned=1>";
    record_all(
        &recorder,
        hostile_id.as_bytes(),
        &["<script>window.pwned=2</script>"],
    )
    .await;
    record_all(
        &recorder,
        b"doomed",
        &["<img src=x onerror=\"window.pwned=3\">"],
    )
    .await;

    let shots = std::env::var("TAPEDECK_TEST_SHOTS").map_or_else(
        |_| tempfile::tempdir().unwrap().keep(),
        std::path::PathBuf::from,
    );
    let base = server.http_base();
    let (mut page, mut lines) = driver("operate", &base, shots.to_str().unwrap());
    assert_eq!(next_line(&mut lines), "ready");

    // Started while the page is open: the list shows it without a reload.
    let live = Recording::open(&recorder, b"live-2").await;
    live.send("first ").await;
    assert_eq!(next_line(&mut lines), "opened");
    live.send("second ").await;
    live.send("third").await;
    assert_eq!(next_line(&mut lines), "stopped");
    let told = live.answer().await.unwrap();
    assert_eq!(told.status, RecordStatus::Cancelled as i32, "{told:?}");
    assert_eq!(next_line(&mut lines), "tombstone");
    let result: serde_json::Value = serde_json::from_str(&next_line(&mut lines)).unwrap();
    assert!(
        tokio::task::block_in_place(|| page.wait())
            .unwrap()
            .success()
    );
    assert_eq!(
        result["ran"],
        serde_json::Value::Null,
        "hostile markup ran: {result}"
    );
    assert_eq!(result["markup"], 0, "{result}");
    assert_eq!(
        result["pages"], 4,
        "the list, the hostile id's page, doomed's, and after the reload: {result}"
    );
    assert_eq!(result["violations"], serde_json::json!([]), "{result}");
    // Only the console followed live-2: it does not count itself among its readers.
    assert_eq!(result["watchedReaders"], "0", "{result}");
    assert!(shots.join("console-list.png").exists());
    assert!(shots.join("console-recording.png").exists());
    let gone = replay_text(&recorder, b"doomed").await;
    let gone = gone.expect_err("deleted from the console");
    assert_eq!(gone.code(), tonic::Code::NotFound, "{gone:?}");
    assert!(gone.message().starts_with("deleted"), "{gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_access_control_the_console_sees_only_what_the_credential_may() {
    let dir = tempfile::tempdir().unwrap();
    let key = "agent=console-test-api-key";
    let server = BinaryServer::spawn(
        dir.path(),
        &[
            "--http-listen",
            "127.0.0.1:0",
            "--jwt-secret",
            SECRET,
            "--api-key",
            key,
        ],
    );
    // Made by a service with its API key (over HTTP here; the list does not mind the face).
    for (id, text) in [("granted-1", "mine"), ("other-1", "not mine")] {
        let made = reqwest::Client::new()
            .put(format!("{}/v1/stream/{id}", server.http_base()))
            .header("x-api-key", "console-test-api-key")
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body(text)
            .send()
            .await
            .unwrap();
        assert_eq!(made.status(), 201);
    }
    let grant = grant(SECRET, &[("granted-1", Role::Reader)]);

    let (mut page, mut lines) = driver("access", &server.http_base(), &grant);
    let result: serde_json::Value = serde_json::from_str(&next_line(&mut lines)).unwrap();
    assert!(
        tokio::task::block_in_place(|| page.wait())
            .unwrap()
            .success()
    );
    assert_eq!(result["anonymous"], 0, "{result}");
    // The first screen asks for a credential, and shows no error beside it (it once said
    // "live updates stopped: … body stream already read").
    assert_eq!(result["firstError"], "", "{result}");
    assert_eq!(
        result["listed"],
        serde_json::json!(["granted-1"]),
        "{result}"
    );
    let url = result["url"].as_str().unwrap();
    assert!(!url.contains(&grant), "the grant went into the URL: {url}");
}
