//! The real binary SIGKILLed at the two moments the write-ahead log adds: during a checkpoint
//! (redb syncing, the log about to be emptied) and while the file is rolled forward through
//! the log at start-up.
//! Each kill is made the moment the binary logs that the step begins; after a restart every
//! acknowledged byte is replayed, and nothing that was not sent.
use crate::common;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc as std_mpsc;

use common::*;
use tapedeck::pb::StreamResponseTokenRequest;

/// A token of about a kilobyte: the log fills quickly.
fn token(recording: usize, i: usize) -> String {
    format!("{recording:03}-{i:05} {} ", "ab".repeat(500))
}

/// What a server spawned by [`spawn_and_kill_at`] did.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// It listens.
    Listening,
    /// The awaited log line came, and the process was SIGKILLed at once.
    Killed,
}

/// Spawns `tapedeck serve` on `dir` with the store's debug events on, and SIGKILLs it the
/// moment a log line containing `kill_at` has appeared `nth` times. Returns the child (to
/// reap), its address, and its events.
fn spawn_and_kill_at(
    dir: &std::path::Path,
    args: &[&str],
    kill_at: &'static str,
    nth: usize,
) -> (Child, std::net::SocketAddr, std_mpsc::Receiver<Event>) {
    let addr = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["serve", "--http-listen", "off", "--log-format", "json"])
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .env("RUST_LOG", "info,tapedeck_store=debug")
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the tapedeck binary");
    let stderr = child.stderr.take().unwrap();
    let pid = child.id() as i32;
    let (events, received) = std_mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = 0;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains(kill_at) {
                seen += 1;
                if seen == nth {
                    // From this thread, as soon as the line is read.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    let _ = events.send(Event::Killed);
                }
            }
            if line.contains("tapedeck listening") {
                let _ = events.send(Event::Listening);
            }
        }
    });
    (child, addr, received)
}

/// The next event, waiting off the runtime.
async fn next_event(events: &mut std_mpsc::Receiver<Event>) -> Event {
    tokio::task::block_in_place(|| events.recv_timeout(WAIT).expect("the server went silent"))
}

/// Sends `tokens` tokens to each of `recordings` legacy producers on `addr`, completing each
/// recording with its last token; returns, per recording, what was sent and how much of it was
/// acknowledged, once each is done or its server has gone.
async fn produce(
    addr: std::net::SocketAddr,
    recordings: usize,
    tokens: usize,
) -> Vec<(String, i64)> {
    let client = resumer_client(addr).await;
    let producers = (0..recordings).map(|r| {
        let client = client.clone();
        tokio::spawn(async move {
            let LegacyProducer { tx, mut acks } = LegacyProducer::open(&client, None).await;
            let mut sent = String::new();
            let mut acked = 0i64;
            for i in 0..tokens {
                let token = token(r, i);
                let request = StreamResponseTokenRequest {
                    conversation_id: if i == 0 {
                        name(r).into_bytes()
                    } else {
                        Vec::new()
                    },
                    token: token.clone(),
                    complete: i + 1 == tokens,
                    ..Default::default()
                };
                if tx.send(request).await.is_err() {
                    break;
                }
                sent.push_str(&token);
                match acks.message().await {
                    Ok(Some(ack)) if ack.success => acked = ack.current_offset,
                    _ => break,
                }
            }
            (sent, acked)
        })
    });
    futures::future::try_join_all(producers).await.unwrap()
}

fn name(recording: usize) -> String {
    format!("wal-crash-{recording}")
}

/// Restarts on `dir` and checks that each recording replays everything acknowledged, and
/// only what was sent.
async fn check_after_restart(dir: &std::path::Path, results: &[(String, i64)]) {
    let server = BinaryServer::spawn(dir, &["--producer-grace", "0s"]);
    let client = server.recorder().await;
    for (r, (sent, acked)) in results.iter().enumerate() {
        let replayed = replay_text(&client, name(r).as_bytes()).await.unwrap();
        assert!(
            replayed.text.len() as i64 >= *acked,
            "{}: acked {acked} bytes, replayed {}",
            name(r),
            replayed.text.len()
        );
        assert!(
            sent.starts_with(&replayed.text),
            "{}: replayed what was not sent",
            name(r)
        );
    }
    assert!(server.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_checkpoint_loses_no_acknowledged_byte() {
    let dir = tempfile::tempdir().unwrap();
    // A checkpoint every 256 KiB of log: the third begins after some 750 tokens, well before
    // the producers are done (8 x 400 tokens of about 1 KiB).
    let args = ["--checkpoint-size", "256KiB"];
    let (mut child, addr, mut events) =
        spawn_and_kill_at(dir.path(), &args, "checkpoint begins", 3);
    assert_eq!(next_event(&mut events).await, Event::Listening);
    let results = produce(addr, 8, 400).await;
    assert_eq!(
        next_event(&mut events).await,
        Event::Killed,
        "the server was killed during its third checkpoint"
    );
    child.wait().unwrap();
    let sent: usize = results.iter().map(|(s, _)| s.len()).sum();
    let acked: i64 = results.iter().map(|(_, a)| a).sum();
    assert!(acked > 256 * 1024, "acked {acked} bytes before the kill");
    assert!(
        (acked as usize) < sent,
        "the kill came before the producers were done"
    );
    check_after_restart(dir.path(), &results).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_while_rolling_forward_through_the_log_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // No checkpoint while recording: everything is in the log when the binary is killed.
    let server = BinaryServer::spawn(dir.path(), &["--checkpoint-size", "1GiB"]);
    let results = produce(server.addr, 8, 500).await;
    for (sent, acked) in &results {
        assert_eq!(*acked as usize, sent.len(), "every token acknowledged");
    }
    server.kill();
    let log = std::fs::metadata(dir.path().join("tapedeck.wal"))
        .unwrap()
        .len();
    assert!(log > 4_000_000, "the log holds the recordings: {log} bytes");

    // Killed as rolling forward begins.
    let (mut child, _, mut events) =
        spawn_and_kill_at(dir.path(), &[], "rolling the write-ahead log forward", 1);
    assert_eq!(next_event(&mut events).await, Event::Killed);
    child.wait().unwrap();

    // Rolling forward was cut short, so the next start rolls the whole log forward again (through a
    // cache of redb pages much smaller than the log).
    let (server, lines) = BinaryServer::spawn_logged(dir.path(), &["--cache-size", "1MiB"]);
    let rolled = lines
        .lock()
        .unwrap()
        .iter()
        .any(|line| line.contains("rolled the write-ahead log forward"));
    assert!(rolled, "the second start rolled the log forward again");
    assert!(server.terminate().await.success());
    check_after_restart(dir.path(), &results).await;
    // A clean stop checkpoints: the log file keeps its length, but nothing in it is waiting.
    assert_eq!(log_bytes_waiting(dir.path()), 0);
}

/// What `tapedeck db stats` says is waiting in the log of the data dir `dir`.
fn log_bytes_waiting(dir: &std::path::Path) -> u64 {
    let output = Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["db", "stats", "--json", "--data-dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stats: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    stats["log_bytes"].as_u64().unwrap()
}
