//! An idle SSE reader waits with no timer of its own and no future for the recorder's stop: it
//! is nudged instead (every few seconds while its stream is quiet, for its keepalives and its
//! minute's end, which `http_documented` checks), and at once when the recorder stops, which
//! ends its response.
use crate::common;

use std::time::Duration;

use common::*;
use tapedeck::access::{AccessConfig, Guard};
use tapedeck::http::{Bounds, HttpFace};
use tapedeck::recorder::{Limits, LivePolicy, Recorder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    create_text_stream(addr, path, "hello").await;
    let mut reader = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /v1/stream/{path}?offset=-1&live=sse HTTP/1.1\r\nhost: x\r\n\r\n");
    reader.write_all(request.as_bytes()).await.unwrap();
    let got = read_until(&mut reader, "\"upToDate\":true", WAIT).await;
    (reader, got)
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
