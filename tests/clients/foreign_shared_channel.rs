//! A thousand producers on one Python grpcio channel (sync API, a thread per call, one short
//! token per message), on both APIs, against the real binary that is stopped for 300 ms while
//! their tokens pile up on the connection: no GOAWAY, every call succeeds and every recording
//! holds exactly its tokens. The Python side is `tests/foreign/shared_channel.py`.
use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

use std::time::Duration;

use common::python::{generate_stubs, python};
use common::{BinaryServer, replay_text};
use tapedeck::pb::CheckRecordingsRequest;
use tokio::sync::mpsc;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Calls sharing the one channel.
const PRODUCERS: usize = 1000;
/// Tokens per call, each in its own message: 11,000 small frames on the connection, twenty
/// times what the server could hold before the fix (the run is bound by the Python client's
/// threads, so more buys no strength).
const TOKENS: usize = 10;
/// How long the server stands still while the producers send.
const STALL: Duration = Duration::from_millis(300);
/// How long a thousand Python threads may take to start their calls on a busy machine.
const START_LIMIT: Duration = Duration::from_secs(120);
/// How long the Python side may take from "go" to its summary.
const RUN_LIMIT: Duration = Duration::from_secs(150);
/// The two tests run one after the other: each loads the machine's cores on its own.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The Python process, killed if the test ends before it does (a thousand threads left
/// behind would starve every other test on the machine).
struct Producers(Option<Child>);

impl Drop for Producers {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The tokens producer `i` sends, as `shared_channel.py` builds them.
fn tokens_of(i: usize) -> String {
    (0..TOKENS).map(|j| format!(" t{i}.{j}")).collect()
}

fn ids(prefix: &str) -> Vec<Vec<u8>> {
    (0..PRODUCERS)
        .map(|i| format!("{prefix}-{i}").into_bytes())
        .collect()
}

/// The script's stdout, line by line, as it comes; the channel closes when the script exits.
fn lines_of(stdout: ChildStdout) -> mpsc::UnboundedReceiver<String> {
    let (lines, receiver) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    receiver
}

/// The script's next line, or `None` once it has exited; fails the test after `limit`.
async fn next_line(lines: &mut mpsc::UnboundedReceiver<String>, limit: Duration) -> Option<String> {
    tokio::time::timeout(limit, lines.recv())
        .await
        .expect("the Python producers said nothing in time")
}

/// Waits (at most [`START_LIMIT`]) until the server holds every one of `ids` as a live recording:
/// every call's first message has arrived.
async fn wait_all_live(server: &BinaryServer, ids: &[Vec<u8>], python: &mut Child) {
    let mut client = server.recorder().await;
    let deadline = tokio::time::Instant::now() + START_LIMIT;
    loop {
        let live = client
            .check_recordings(CheckRecordingsRequest {
                conversation_ids: ids.to_vec(),
            })
            .await
            .unwrap()
            .into_inner()
            .conversation_ids
            .len();
        if live == ids.len() {
            return;
        }
        if let Some(status) = python.try_wait().unwrap() {
            panic!("the Python producers exited early ({status}) with {live} calls started");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {live} of {} calls started in time",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `shared_channel.py` against a real server on `api`, stopping the server for
/// [`STALL`] right as every producer starts sending, then checks every recording.
async fn many_producers_share_one_channel(api: &str) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let stubs = tempfile::tempdir().unwrap();
    generate_stubs(stubs.path());
    let prefix = format!("shared-{api}");
    let ids = ids(&prefix);

    let python = Command::new(python())
        .arg(format!("{ROOT}/tests/foreign/shared_channel.py"))
        .args(["--server", &server.addr.to_string(), "--api", api])
        .args(["--producers", &PRODUCERS.to_string()])
        .args(["--tokens", &TOKENS.to_string(), "--prefix", &prefix])
        .env("PYTHONPATH", stubs.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut producers = Producers(Some(python));
    let python = producers.0.as_mut().unwrap();
    let mut lines = lines_of(python.stdout.take().unwrap());
    // Drained all along, so that a full pipe never holds the script up.
    let mut stderr = python.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut log);
        log
    });
    let started = next_line(&mut lines, START_LIMIT).await;
    assert_eq!(started.as_deref(), Some("started"));
    wait_all_live(&server, &ids, python).await;

    // The server falls behind while every producer sends all its tokens: stopped until they
    // are all on the connection (or the script gave up), and for STALL at least.
    unsafe { libc::kill(server.pid(), libc::SIGSTOP) };
    let stopped = tokio::time::Instant::now();
    let mut stdin = python.stdin.take().unwrap();
    writeln!(stdin, "go").unwrap();
    drop(stdin);
    let sent = next_line(&mut lines, START_LIMIT).await;
    tokio::time::sleep_until(stopped + STALL).await;
    unsafe { libc::kill(server.pid(), libc::SIGCONT) };
    // Without every message waiting on the connection the stall proves nothing.
    assert_eq!(
        sent.as_deref(),
        Some("sent"),
        "the producers did not send everything while the server stood still"
    );

    let mut summary = String::new();
    while let Some(line) = next_line(&mut lines, RUN_LIMIT).await {
        summary.push('\n');
        summary.push_str(&line);
    }
    let log = log.join().unwrap();
    let status = python.wait().unwrap();
    assert!(
        status.success(),
        "not every call on the shared channel succeeded: {summary}{log}"
    );

    let client = server.recorder().await;
    for (i, id) in ids.iter().enumerate() {
        let replayed = replay_text(&client, id).await.unwrap();
        assert_eq!(replayed.text, tokens_of(i), "recording {i} of {api}");
        assert_eq!(replayed.status.as_deref(), Some("completed"), "{i}");
    }
}

#[tokio::test]
async fn a_thousand_record_calls_on_one_grpcio_channel_survive_a_stalled_server() {
    many_producers_share_one_channel("recorder").await;
}

#[tokio::test]
async fn a_thousand_legacy_token_streams_on_one_grpcio_channel_survive_a_stalled_server() {
    many_producers_share_one_channel("resumer").await;
}
