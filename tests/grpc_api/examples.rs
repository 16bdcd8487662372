//! The Python examples against a real server: stubs generated from `proto/` with grpcio-tools,
//! `examples/python/agent.py` recording a response token by token, and
//! `examples/python/resumer.py` replaying it from a saved offset while it is still being
//! recorded, following it live to its end.
use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::python::{generate_stubs, python};
use common::{BinaryServer, WAIT, replay_text};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn example(stubs: &Path, script: &str) -> Command {
    let mut command = Command::new(python());
    command
        .arg(format!("{ROOT}/examples/python/{script}"))
        .env("PYTHONPATH", stubs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

#[tokio::test]
async fn the_python_agent_records_and_the_resumer_follows_it_from_a_saved_offset() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let stubs = tempfile::tempdir().unwrap();
    generate_stubs(stubs.path());
    let address = server.addr.to_string();

    let tokens = ["Once ", "upon ", "a ", "time, ", "a ", "page ", "reloaded."];
    let agent = example(stubs.path(), "agent.py")
        .args(["--server", &address, "--conversation", "py-example"])
        .args(["--delay", "0.15"])
        .args(tokens)
        .spawn()
        .unwrap();

    // The page had read "Once upon " (10 bytes) before it reloaded; it resumes from there while
    // the agent is still going.
    let mut recordings = server.recordings().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = recordings
            .get(tapedeck::pb::tapedeck::GetRecordingRequest {
                conversation_id: b"py-example".to_vec(),
            })
            .await;
        if let Ok(info) = got
            && info.get_ref().byte_length >= 10
        {
            assert_eq!(
                info.get_ref().status,
                1,
                "still recording when the resumer starts"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent never recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resumer = example(stubs.path(), "resumer.py")
        .args([
            "--server",
            &address,
            "--conversation",
            "py-example",
            "--from",
            "10",
        ])
        .spawn()
        .unwrap();

    let agent = agent.wait_with_output().unwrap();
    assert!(
        agent.status.success(),
        "{}",
        String::from_utf8_lossy(&agent.stderr)
    );
    // What the server holds, not what the agent says it sent.
    let replayed = replay_text(&server.recorder().await, b"py-example")
        .await
        .unwrap();
    assert_eq!(replayed.text, tokens.concat());
    assert_eq!(replayed.status.as_deref(), Some("completed"));
    assert_eq!(replayed.end_offset, Some(34));
    let resumer = resumer.wait_with_output().unwrap();
    let stderr = String::from_utf8(resumer.stderr).unwrap();
    assert!(resumer.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8(resumer.stdout).unwrap(),
        "a time, a page reloaded."
    );
    assert_eq!(stderr.trim(), "offset 34, ended completed");
}
