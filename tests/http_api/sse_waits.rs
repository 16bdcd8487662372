//! What an idle SSE reader sees while it waits with no timer of its own (it is nudged instead,
//! every few seconds and at the recorder's stop): a keepalive comment once the stream has been
//! quiet for 15 s, and the end of its response as soon as the recorder stops.
use crate::common;

use std::time::Duration;

use common::*;
use tapedeck::access::{AccessConfig, Guard};
use tapedeck::http::{Bounds, HttpFace};
use tapedeck::recorder::{Limits, LivePolicy, Recorder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Seconds of quiet before a keepalive comment (`sse.rs`'s `KEEPALIVE`)...
const KEEPALIVE: Duration = Duration::from_secs(15);
/// ...and the most it may come later: one round of nudges (`NUDGE_EVERY`), and some slack.
const NUDGE_SLACK: Duration = Duration::from_secs(5 + 3);

/// A recorder and an HTTP face over it on a free port, on a new data dir.
async fn face(dir: &std::path::Path) -> (Recorder, std::net::SocketAddr) {
    let config = test_config(dir);
    let store = tapedeck::server::open_store(&config).unwrap();
    let limits = Limits {
        max_chunk_bytes: config.recorder.max_chunk_bytes,
        max_recording_bytes: config.recorder.max_recording_bytes,
        max_retention: config.recorder.max_retention,
    };
    let recorder = Recorder::new(store, limits, LivePolicy::default());
    let face = HttpFace::new(
        recorder.clone(),
        Guard::new(&AccessConfig::default()).unwrap(),
        Bounds::default(),
        tapedeck::http::StreamPrefix::default(),
        None,
        None,
        tapedeck::http::FaceHost::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tapedeck::http::serve(
        listener,
        face,
        Duration::from_secs(60),
        std::future::pending(),
    ));
    (recorder, addr)
}

/// Creates stream `path` and opens an SSE reader of it, caught up (its first control event
/// read): the reader's socket, and what it read.
async fn caught_up_reader(addr: std::net::SocketAddr, path: &str) -> (TcpStream, String) {
    let created = reqwest::Client::new()
        .put(format!("http://{addr}/v1/stream/{path}"))
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.status());
    let mut reader = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /v1/stream/{path}?offset=-1&live=sse HTTP/1.1\r\nhost: x\r\n\r\n");
    reader.write_all(request.as_bytes()).await.unwrap();
    let got = read_until(&mut reader, "\"upToDate\":true", WAIT).await;
    (reader, got)
}

#[tokio::test]
async fn a_quiet_reader_gets_a_keepalive_comment() {
    let dir = tempfile::tempdir().unwrap();
    let (_recorder, addr) = face(dir.path()).await;
    let (mut reader, got) = caught_up_reader(addr, "quiet").await;
    assert!(!got.contains(": keepalive"), "{got}");
    let started = tokio::time::Instant::now();
    read_until(&mut reader, ": keepalive\n\n", KEEPALIVE + NUDGE_SLACK).await;
    assert!(
        started.elapsed() >= KEEPALIVE - Duration::from_secs(1),
        "too early"
    );
}

#[tokio::test]
async fn a_reader_ends_as_soon_as_the_recorder_stops() {
    let dir = tempfile::tempdir().unwrap();
    let (recorder, addr) = face(dir.path()).await;
    let (mut reader, _) = caught_up_reader(addr, "stopping").await;
    tokio::time::timeout(WAIT, recorder.shutdown())
        .await
        .unwrap();
    // Well within a round of nudges: the stop wakes every reader itself. The chunked body
    // ends, and the connection closes.
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), reader.read_to_end(&mut rest))
        .await
        .expect("the reader was not ended by the stop")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&rest).ends_with("0\r\n\r\n"),
        "{:?}",
        String::from_utf8_lossy(&rest)
    );
}
