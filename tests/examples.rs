//! The Python examples against a real server: stubs generated from `proto/` with grpcio-tools,
//! `examples/python/agent.py` recording a response token by token, and
//! `examples/python/resumer.py` replaying it from a saved offset while it is still being
//! recorded, following it live to its end.
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BinaryServer, WAIT};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The Python of the venv `scripts/test.sh` prepares.
fn python() -> std::path::PathBuf {
    let venv = format!("{ROOT}/target/python-client/bin/python");
    let python: std::path::PathBuf =
        std::env::var_os("TAPEDECK_TEST_PYTHON").map_or(venv.into(), Into::into);
    assert!(
        python.exists(),
        "no Python environment at {}; run scripts/test.sh",
        python.display()
    );
    python
}

/// Generates the stubs of the current API into `out`.
fn generate_stubs(out: &Path) {
    let status = Command::new(python())
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("-I{ROOT}/proto"))
        .arg(format!("--python_out={}", out.display()))
        .arg(format!("--grpc_python_out={}", out.display()))
        .arg(format!("{ROOT}/proto/memory/v1/response_recorder.proto"))
        .status()
        .unwrap();
    assert!(status.success(), "grpc_tools.protoc failed");
}

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
    assert_eq!(String::from_utf8(agent.stdout).unwrap().trim(), "34");
    let resumer = resumer.wait_with_output().unwrap();
    let stderr = String::from_utf8(resumer.stderr).unwrap();
    assert!(resumer.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8(resumer.stdout).unwrap(),
        "a time, a page reloaded."
    );
    assert_eq!(stderr.trim(), "offset 34, ended completed");
}
