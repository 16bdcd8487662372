//! A real browser resumes a live recording: headless Chromium (Debian's `chromium`, driven by
//! playwright-core from `tests/browser/resume.mjs`) opens a page on another origin that
//! resumes the recording with its own EventSource from a saved offset, three at once (as
//! three tabs would: readers at one place share the events rendered for them), while a gRPC
//! producer writes the rest. Each must receive the rest exactly once, and every control event
//! as the protocol writes it (its offset as its event id, a cursor of digits). `scripts/test.sh`
//! installs Chromium and the driver.
use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_resumes_a_live_recording_with_event_source_and_gets_the_rest_once() {
    let driver = format!("{ROOT}/tests/browser/node_modules/playwright-core");
    assert!(
        std::path::Path::new(&driver).exists(),
        "playwright-core is not installed in tests/browser; run scripts/test.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let url = server.stream_url("browser-chat");
    let recording = Recording::open(&server.recorder().await, b"browser-chat").await;

    // What an earlier page load had seen before the reload: the first three tokens.
    let before = ["Once ", "upon ", "a time, "];
    let during = [
        "there ", "was ", "a ", "stream ", "that ", "never ", "forgot. ", "✓",
    ];
    for token in before {
        recording.send(token).await;
    }
    // Committed once a replay has them all.
    let client = server.recorder().await;
    let mut replay = replay_when_live(&client, b"browser-chat", 0).await.unwrap();
    let mut seen = String::new();
    while seen.len() < before.concat().len() {
        let message = tokio::time::timeout(WAIT, replay.message()).await.unwrap();
        seen.push_str(&message.unwrap().unwrap().content);
    }
    // The page read them over HTTP and kept the offset the protocol gave it.
    let read = reqwest::get(format!("{url}?offset=-1")).await.unwrap();
    let saved = read.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(read.text().await.unwrap(), before.concat());
    recording.send("there ").await;

    let mut page = Command::new("node")
        .arg(format!("{ROOT}/tests/browser/resume.mjs"))
        .arg(&url)
        .arg(&saved)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cannot run node");
    let mut lines = BufReader::new(page.stdout.take().unwrap()).lines();
    let first = tokio::task::block_in_place(|| lines.next())
        .unwrap()
        .unwrap();
    assert_eq!(first, "connected");

    // The rest arrives while the page follows it live.
    for token in &during[1..] {
        recording.send(token).await;
    }
    let answer = recording.complete().await.unwrap();
    assert_eq!(answer.status, tapedeck::pb::RecordStatus::Success as i32);

    let result = tokio::task::block_in_place(|| lines.next())
        .unwrap()
        .unwrap();
    let result: serde_json::Value = serde_json::from_str(&result).unwrap();
    assert!(page.wait().unwrap().success());
    // The CORS headers reached the page's fetch: the offset was exposed to its origin.
    let next_offset = result["nextOffset"].as_str().unwrap_or_default();
    assert!(!next_offset.is_empty(), "not exposed to the page: {result}");
    // A request the browser preflights was allowed, and answered with the same.
    assert_eq!(result["preflightedOffset"], next_offset, "{result}");
    let readers = result["readers"].as_array().expect("the page's readers");
    assert_eq!(readers.len(), 3, "{result}");
    for reader in readers {
        assert_eq!(reader["received"], during.concat(), "{reader}");
        check_controls(reader, next_offset);
    }
    server.stop().await;
}

/// Every control event of `reader`, as the browser parsed it: its offset is its event id (what
/// the browser sends back as Last-Event-ID), in the protocol's fixed width; while the stream is
/// open it carries a cursor of digits that never goes back; the last one is where the closed
/// stream ends, `next_offset`.
fn check_controls(reader: &serde_json::Value, next_offset: &str) {
    let controls = reader["controls"]
        .as_array()
        .expect("the reader's control events");
    let mut last_cursor = 0;
    for control in controls {
        let (id, data) = (&control["id"], &control["data"]);
        assert_eq!(data["streamNextOffset"], *id, "{control}");
        assert_eq!(id.as_str().map(str::len), Some(33), "{control}");
        if data["streamClosed"] == true {
            assert!(data.get("streamCursor").is_none(), "{control}");
            continue;
        }
        let cursor: u64 = data["streamCursor"]
            .as_str()
            .and_then(|cursor| cursor.parse().ok())
            .unwrap_or_else(|| panic!("no cursor of digits: {control}"));
        assert!(cursor >= last_cursor, "the cursor went back: {control}");
        last_cursor = cursor;
    }
    let last = controls.last().expect("at least the closing control event");
    assert_eq!(last["data"]["streamClosed"], true, "{last}");
    assert_eq!(last["data"]["streamNextOffset"], next_offset, "{last}");
}
