//! The Durable Streams project's AI transports against the real binary, wired as their READMEs
//! wire them (`tests/ai_transports/transports.mjs`): AI SDK `useChat` with `resume: true`
//! (`@durable-streams/aisdk-transport`), and TanStack AI's chat session
//! (`@durable-streams/tanstack-ai-transport`) on streams under `--http-path-prefix /streams`,
//! addressed with an encoded `/` inside one segment, as TanStack's own adapter does. In both a
//! reader comes back mid-response and must see every part exactly once.
use crate::common;

use std::process::Command;

use common::BinaryServer;
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs the driver in `mode` against `stream`; its JSON report.
fn drive(mode: &str, stream: &str) -> Value {
    let installed = format!("{ROOT}/tests/ai_transports/node_modules/@durable-streams");
    assert!(
        std::path::Path::new(&installed).exists(),
        "the npm packages are not installed in tests/ai_transports; run scripts/test.sh"
    );
    let output = common::output_within(
        Command::new("node")
            .arg(format!("{ROOT}/tests/ai_transports/transports.mjs"))
            .args([mode, stream]),
        common::DRIVER_LIMIT,
    );
    assert!(
        output.status.success(),
        "the driver failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_sdk_use_chat_resumes_mid_response_and_sees_every_part_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &["--http-listen", "127.0.0.1:0"]);
    let stream = format!("{}/v1/stream/chat-ai-1", server.http_base());

    let report = tokio::task::block_in_place(|| drive("aisdk", &stream));
    assert_eq!(report["midResponse"], true, "resumed after the end");
    // Every UI-message chunk once, in order, and the read ended with the stream.
    assert_eq!(report["got"], report["written"]);
    assert_eq!(report["text"], report["expected"]);
    let read = reqwest::get(format!("{stream}?offset=-1")).await.unwrap();
    assert_eq!(read.headers()["stream-closed"], "true");
    assert_eq!(read.headers()["tapedeck-ended-as"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tanstack_ai_resumes_a_session_mid_run_under_its_own_prefix_and_sees_every_part_once() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--http-listen",
        "127.0.0.1:0",
        "--http-path-prefix",
        "/streams",
    ];
    let server = BinaryServer::spawn(dir.path(), &args);
    let stream = format!("{}/streams/chat%2Fsession-1", server.http_base());

    let report = tokio::task::block_in_place(|| drive("tanstack", &stream));
    assert_eq!(report["midResponse"], true, "resumed after the end");
    let seen = report["seen"].as_array().unwrap();
    // The catch-up comes as one snapshot: the user's message once, the answer so far.
    assert_eq!(seen[0]["type"], "MESSAGES_SNAPSHOT");
    let messages = seen[0]["messages"].as_array().unwrap();
    let text_of = |message: &Value| -> String {
        (message["parts"].as_array().unwrap().iter())
            .filter_map(|part| part["content"].as_str())
            .collect()
    };
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(text_of(&messages[0]), "tell me");
    // Then the rest, live: the answer whole, each word once.
    let mut answer = text_of(&messages[1]);
    for chunk in &seen[1..] {
        if chunk["type"] == "TEXT_MESSAGE_CONTENT" {
            answer.push_str(chunk["delta"].as_str().unwrap());
        }
    }
    assert_eq!(answer, report["expected"].as_str().unwrap());
    assert_eq!(seen.last().unwrap()["type"], "RUN_FINISHED");
    // The encoded `/` named one stream, `chat/session-1`; the default prefix serves nothing.
    let read = reqwest::get(format!("{stream}?offset=-1")).await.unwrap();
    assert_eq!(read.status(), 200);
    let elsewhere =
        reqwest::get(format!("{}/v1/stream/chat%2Fsession-1", server.http_base())).await;
    assert_eq!(elsewhere.unwrap().status(), 404);
}
