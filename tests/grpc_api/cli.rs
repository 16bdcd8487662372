//! The client commands of the real binary, run as separate processes against a real server:
//! record → ls → inspect → replay --follow while the recording goes on → check → cancel → rm,
//! with `--json` output parsed; and errors as one line with a non-zero exit.
use crate::common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{BinaryServer, WAIT};
use serde_json::Value;

/// Runs `tapedeck ARGS --server ADDR` to its end, with `stdin` as its input.
fn tapedeck(server: &BinaryServer, args: &[&str], stdin: &str) -> Output {
    common::run_cli(server, args, stdin)
}

/// Runs a command that must succeed; returns its stdout.
fn ok(server: &BinaryServer, args: &[&str]) -> String {
    let output = tapedeck(server, args, "");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Polls `inspect ID` until `done` accepts its JSON.
fn inspect_until(server: &BinaryServer, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let output = tapedeck(server, &["inspect", id], "");
        if output.status.success() {
            let value = json(&String::from_utf8_lossy(&output.stdout));
            if done(&value) {
                return value;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "inspect {id} never agreed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_recording_from_the_command_line_from_record_to_rm() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);

    // record: stdin becomes a completed recording.
    let recorded = tapedeck(&server, &["record", "cli-done"], "Hello, wörld");
    assert!(recorded.status.success(), "{recorded:?}");
    assert_eq!(ok(&server, &["replay", "cli-done"]), "Hello, wörld");

    // A producer still going: `record` with stdin left open.
    let mut producer = Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["record", "cli-live", "--server", &server.addr.to_string()])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = producer.stdin.take().unwrap();
    input.write_all(b"first part, ").unwrap();
    input.flush().unwrap();
    inspect_until(&server, "cli-live", |v| v["byte_length"] == 12);

    // ls --json: both, in start order, with their status.
    let listed = json(&ok(&server, &["ls", "--json"]));
    let rows: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let field = |name: &str| r[name].as_str().unwrap().to_string();
            (field("conversation_id"), field("status"))
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("cli-done".into(), "completed".into()),
            ("cli-live".into(), "recording".into())
        ]
    );
    let table = ok(&server, &["ls", "--status", "recording"]);
    assert!(table.starts_with("CONVERSATION"), "{table}");
    assert!(
        table.contains("cli-live") && !table.contains("cli-done"),
        "{table}"
    );

    // inspect: one recording's metadata.
    let info = json(&ok(&server, &["inspect", "cli-live"]));
    assert_eq!(info["status"], "recording");
    assert_eq!(info["producer_attached"], true);

    // check: which are live.
    let live = json(&ok(&server, &["check", "cli-done", "cli-live", "--json"]));
    assert_eq!(live, serde_json::json!(["cli-live"]));

    // replay --follow while it goes on: it gets the rest as it comes, and ends with it.
    let follower = Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args([
            "replay",
            "cli-live",
            "--follow",
            "--server",
            &server.addr.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Without --follow, a replay stops at what is committed now.
    assert_eq!(ok(&server, &["replay", "cli-live"]), "first part, ");
    input.write_all(b"second part").unwrap();
    input.flush().unwrap();
    inspect_until(&server, "cli-live", |v| v["byte_length"] == 23);

    // cancel: the producer is told to stop, the follower ends with what was recorded.
    assert_eq!(
        ok(&server, &["cancel", "cli-live"]),
        "cli-live: cancelled\n"
    );
    let followed = follower.wait_with_output().unwrap();
    assert!(followed.status.success());
    assert_eq!(
        String::from_utf8(followed.stdout).unwrap(),
        "first part, second part"
    );
    drop(input);
    let produced = producer.wait_with_output().unwrap();
    assert!(
        !produced.status.success(),
        "the cancelled producer exits non-zero"
    );
    let said = String::from_utf8(produced.stderr).unwrap();
    assert!(said.contains("cancelled"), "{said}");

    // Chunked replay: one JSON line per chunk.
    let chunks = ok(&server, &["replay", "cli-live", "--chunked"]);
    let contents: Vec<String> = chunks
        .lines()
        .map(|line| json(line)["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(contents.concat(), "first part, second part");

    // rm: deleted, and inspect now shows the tombstone.
    assert_eq!(ok(&server, &["rm", "cli-live"]), "cli-live: deleted\n");
    let gone = json(&ok(&server, &["inspect", "cli-live"]));
    assert_eq!(gone["status"], "deleted", "{gone}");
    assert!(
        gone["tombstone"]["collected_at_ms"].as_i64() > Some(0),
        "{gone}"
    );

    // Nothing live to cancel: said, with a non-zero exit.
    let late = tapedeck(&server, &["cancel", "cli-done"], "");
    assert!(!late.status.success());
    let said = String::from_utf8(late.stderr).unwrap();
    assert!(said.contains("no live recording"), "{said}");
}

/// Ids are any UTF-8 text, control characters included. Whatever the CLI prints for a person
/// (a table, JSON, a confirmation, an error) carries them escaped, never raw: an ANSI escape
/// in an id must not clear or rewrite the operator's terminal.
#[test]
fn ids_with_control_characters_are_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let id = "evil\u{1b}[2J\r\nSet-Cookie:x\u{9b}31m";
    let recorded = tapedeck(&server, &["record", id], "payload");
    assert!(recorded.status.success(), "{recorded:?}");
    let table = ok(&server, &["ls"]);
    assert!(
        table.contains("evil\\u{1b}[2J\\r\\nSet-Cookie:x\\u{9b}31m"),
        "{table:?}"
    );
    // JSON keeps the id exact for programs: escaped, it reads back as the same text.
    let listed = json(&ok(&server, &["ls", "--json"]));
    assert_eq!(listed[0]["conversation_id"], id, "{listed}");
    let runs: [&[&str]; 8] = [
        &["ls"],
        &["ls", "--json"],
        &["inspect", id],
        &["check", id],
        &["check", id, "--json"],
        &["cancel", id],
        &["rm", id],
        &["inspect", id],
    ];
    let mut printed = String::from_utf8_lossy(&recorded.stderr).into_owned();
    for args in runs {
        let output = tapedeck(&server, args, "");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        for raw in ['\u{1b}', '\r', '\u{9b}'] {
            assert!(
                !text.contains(raw),
                "{args:?} printed {raw:?} raw: {text:?}"
            );
        }
        // Escaped once, not twice: an error line quotes the id as `ls` shows it.
        if args[0] == "cancel" {
            assert!(
                text.contains("evil\\u{1b}[2J\\r\\nSet-Cookie:x\\u{9b}31m has no live"),
                "{text:?}"
            );
        }
        // Lines are whole: the id's own line break never splits one.
        assert!(
            !text.lines().any(|line| line.starts_with("Set-Cookie")),
            "{args:?}: {text:?}"
        );
        printed.push_str(&text);
    }
    assert!(
        printed.contains("recorded 7 bytes as evil\\u{1b}"),
        "{printed:?}"
    );
    assert!(
        printed.contains("evil\\u{1b}[2J\\r\\nSet-Cookie:x\\u{9b}31m: deleted"),
        "{printed:?}"
    );
}

#[test]
fn client_errors_are_one_line_with_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &["--api-key", "ops=s3cret-key-0123456789"]);
    let cases: [(&[&str], &str); 5] = [
        (
            &["inspect", "nobody"],
            "give this command --api-key SECRET or --token",
        ),
        (
            &[
                "inspect",
                "nobody",
                "--api-key",
                "ops=s3cret-key-0123456789",
            ],
            "--api-key takes the secret alone, not NAME=SECRET",
        ),
        (&["ls", "--status", "sleeping"], "not a status"),
        (
            &["cancel", "nobody", "--api-key", "s3cret-key-0123456789"],
            "may not cancel",
        ),
        (
            &["inspect", "nobody", "--api-key", "s3cret-key-0123456789"],
            "NotFound",
        ),
    ];
    for (args, says) in cases {
        let output = tapedeck(&server, args, "");
        assert!(!output.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("tapedeck: error: "), "{stderr}");
        assert!(
            stderr.to_lowercase().contains(&says.to_lowercase()),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("s3cret"), "{stderr}");
    }
    let unreachable = Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["ls", "--server", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!unreachable.status.success());
    let stderr = String::from_utf8(unreachable.stderr).unwrap();
    assert!(stderr.contains("cannot connect to 127.0.0.1:1"), "{stderr}");
}

#[test]
fn a_server_address_without_a_port_or_on_the_http_face_is_refused_saying_what_to_dial() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &["--http-listen", "127.0.0.1:0"]);
    let http = server.http_addr.unwrap().to_string();
    for (address, says) in [
        ("9090", "has no port; give host:port".to_string()),
        (
            http.as_str(),
            format!(
                "this is tapedeck's HTTP face (Durable Streams); gRPC is served on {}",
                server.addr
            ),
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_tapedeck"))
            .args(["ls", "--server", address])
            .output()
            .unwrap();
        assert!(!output.status.success(), "{address}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{address}: {stderr}");
        assert!(stderr.contains(&says), "{address}: {stderr}");
    }
}

#[test]
fn a_replay_into_a_pipe_nobody_reads_ends_quietly() {
    use std::os::fd::FromRawFd;
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    assert!(
        tapedeck(&server, &["record", "piped"], "text")
            .status
            .success()
    );
    // A pipe whose reader is gone before the command writes (`tapedeck replay x | head`,
    // once head has read its lines).
    let mut ends = [0; 2];
    assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
    unsafe { libc::close(ends[0]) };
    let writer = unsafe { std::os::fd::OwnedFd::from_raw_fd(ends[1]) };
    let output = Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["replay", "piped", "--server", &server.addr.to_string()])
        .stdout(std::process::Stdio::from(writer))
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr, "", "nothing said");
    assert_eq!(
        output.status.code(),
        Some(141),
        "as a process SIGPIPE killed"
    );
}

#[test]
fn a_token_given_with_the_word_bearer_is_refused_with_a_hint() {
    const TOKEN: &str = "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl";
    let flag = Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["ls", "--server", "127.0.0.1:1", "--token"])
        .arg(format!("Bearer {TOKEN}"))
        .env_remove("TAPEDECK_TOKEN")
        .output()
        .unwrap();
    let variable = Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["ls", "--server", "127.0.0.1:1"])
        .env("TAPEDECK_TOKEN", format!("bearer {TOKEN}"))
        .output()
        .unwrap();
    for (output, named) in [(flag, "for --token:"), (variable, "for TAPEDECK_TOKEN:")] {
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(named), "{stderr}");
        assert!(stderr.contains("without the word `Bearer`"), "{stderr}");
        assert!(!stderr.contains(TOKEN), "the token is repeated: {stderr}");
    }
}

/// Runs `tapedeck db ARGS`; its exit status, stdout and stderr.
fn db(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .arg("db")
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
async fn db_tools_read_check_and_compact_a_copied_data_dir_and_refuse_a_running_servers() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let data = dir.path().to_str().unwrap().to_string();
    for (id, text) in [("db-1", "one"), ("db-2", "two two")] {
        assert!(tapedeck(&server, &["record", id], text).status.success());
    }
    assert!(tapedeck(&server, &["rm", "db-1"], "").status.success());

    // While the server holds the file: refused, one line.
    let busy = db(&["stats", "--data-dir", &data]);
    assert!(!busy.status.success());
    let stderr = String::from_utf8(busy.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("in use by a running tapedeck server"),
        "{stderr}"
    );

    // On a copy of the stopped server's data dir.
    assert!(server.terminate().await.success());
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
    }
    let copy = copy.path().to_str().unwrap().to_string();
    let stats = db(&["stats", "--data-dir", &copy, "--json"]);
    assert!(stats.status.success(), "{stats:?}");
    let stats = json(&String::from_utf8(stats.stdout).unwrap());
    assert_eq!(stats["recordings"]["completed"], 1, "{stats}");
    assert_eq!(stats["recorded_bytes"], 7, "{stats}");
    assert_eq!(stats["tombstones"], 1, "{stats}");
    assert!(
        stats["file_bytes"].as_u64() >= stats["live_bytes"].as_u64(),
        "{stats}"
    );

    let check = db(&["check", "--data-dir", &copy]);
    assert!(check.status.success(), "{check:?}");
    assert_eq!(
        String::from_utf8(check.stdout).unwrap(),
        "ok: no problems found\n"
    );
    let compact = db(&["compact", "--data-dir", &copy]);
    assert!(compact.status.success(), "{compact:?}");
    assert!(db(&["check", "--data-dir", &copy]).status.success());

    // A dir with no database: one line, non-zero.
    let empty = tempfile::tempdir().unwrap();
    let missing = db(&["check", "--data-dir", empty.path().to_str().unwrap()]);
    assert!(!missing.status.success());
    let stderr = String::from_utf8(missing.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no tapedeck database"), "{stderr}");
}
