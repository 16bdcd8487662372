//! SSE readers served on their own socket, on the real binary and real sockets: the response
//! is chunked and closes the connection; a reader that closes its end leaves the open readers
//! at once; a reader that takes nothing is cut after `--http-request-timeout`, with a warning
//! and a metric; the smuggling forms of a request head are refused; every other request still
//! goes to hyper on the same port.
use crate::common;

use std::net::SocketAddr;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` on a new connection to `addr`.
async fn send(addr: SocketAddr, request: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

fn http_args(extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![
        "--http-listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_on_its_own_socket_gets_a_chunked_answer_and_leaves_when_it_closes() {
    let dir = tempfile::tempdir().unwrap();
    let (server, log) = BinaryServer::spawn_logged(dir.path(), &http_args(&[]));
    let (http, metrics) = (server.http_addr.unwrap(), server.metrics_addr.unwrap());
    create_text_stream(http, "own", "hello").await;
    let mut reader = send(
        http,
        "GET /v1/stream/own?offset=-1&live=sse HTTP/1.1\r\nhost: x\r\norigin: https://app.example\r\n\r\n",
    )
    .await;
    let got = read_until(&mut reader, "\"upToDate\":true", WAIT).await;
    let (head, body) = got.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    for header in [
        "content-type: text/event-stream",
        "transfer-encoding: chunked",
        "connection: close",
        // The same layers as any other response: CORS and the security headers.
        "access-control-allow-origin: *",
        "x-content-type-options: nosniff",
    ] {
        assert!(head.contains(header), "{header} missing from {head}");
    }
    assert!(
        body.contains("event: data\r\n") || body.contains("event: data\n"),
        "{body}"
    );
    assert!(body.contains("data:hello\n"), "{body}");
    metric_until(metrics, "one open SSE reader", |s| {
        metric_value(s, "tapedeck_http_open_readers", &[("kind", "sse")]) == Some(1.0)
    })
    .await;

    // A live append reaches it, framed as a chunk.
    let client = reqwest::Client::new();
    let appended = client
        .post(format!("http://{http}/v1/stream/own"))
        .header("content-type", "text/plain")
        .body("world")
        .send()
        .await
        .unwrap();
    assert!(appended.status().is_success());
    let live = read_until(&mut reader, "data:world", WAIT).await;
    assert!(
        live.contains("\r\nevent: data\n"),
        "not a chunk of its own: {live:?}"
    );

    // The client goes: the server notices without writing to it.
    drop(reader);
    metric_until(metrics, "the closed reader leaves the open readers", |s| {
        metric_value(s, "tapedeck_http_open_readers", &[("kind", "sse")]) == Some(0.0)
    })
    .await;
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("HTTP reader ended"))
    );
    // Other requests on the same port are hyper's, keep-alive included.
    let read = client
        .get(format!("http://{http}/v1/stream/own?offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(read.text().await.unwrap(), "helloworld");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_takes_nothing_is_cut_after_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (server, log) =
        BinaryServer::spawn_logged(dir.path(), &http_args(&["--http-request-timeout", "500ms"]));
    let (http, metrics) = (server.http_addr.unwrap(), server.metrics_addr.unwrap());
    create_text_stream(http, "stuck", "").await;
    // A reader with a small receive buffer that never reads.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stuck = socket.connect(http).await.unwrap();
    stuck
        .write_all(b"GET /v1/stream/stuck?offset=-1&live=sse HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    metric_until(metrics, "the stuck reader is open", |s| {
        metric_value(s, "tapedeck_http_open_readers", &[("kind", "sse")]) == Some(1.0)
    })
    .await;
    // More than the kernel's buffers hold, so that the server's writes stop.
    let client = reqwest::Client::new();
    let piece = "x".repeat(1 << 20);
    for _ in 0..24 {
        let appended = client
            .post(format!("http://{http}/v1/stream/stuck"))
            .header("content-type", "text/plain")
            .body(piece.clone())
            .send()
            .await
            .unwrap();
        assert!(appended.status().is_success(), "{}", appended.status());
    }
    metric_until(metrics, "the stuck reader is cut", |s| {
        metric_value(s, "tapedeck_http_slow_readers_cut_total", &[]) == Some(1.0)
            && metric_value(s, "tapedeck_http_open_readers", &[("kind", "sse")]) == Some(0.0)
    })
    .await;
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("did not take an event in time")
                && l.contains("--http-request-timeout")),
        "no warning of the cut reader"
    );
    // Cut means closed: what it had not read ends, and nothing more comes.
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, stuck.read_to_end(&mut rest))
        .await
        .expect("the cut reader's connection stayed open")
        .ok();
    // Everything acknowledged is still there for a reader that reads.
    let read = client
        .head(format!("http://{http}/v1/stream/stuck"))
        .send()
        .await
        .unwrap();
    let next = read.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(next.ends_with(&format!("{:016}", 24u64 << 20)), "{next}");
}

#[tokio::test]
async fn smuggling_forms_of_a_live_read_are_refused_and_other_requests_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let addr = server.http_addr.unwrap();
    for (head, why) in [
        (
            "content-length: 0\r\ntransfer-encoding: chunked\r\n",
            "both Content-Length and Transfer-Encoding are set",
        ),
        (
            "content-length: 0\r\ncontent-length: 0\r\n",
            "Content-Length is set more than once",
        ),
        (
            "content-length: 4\r\n",
            "a live read (live=sse) has no body",
        ),
    ] {
        let request =
            format!("GET /v1/stream/s?offset=-1&live=sse HTTP/1.1\r\nhost: x\r\n{head}\r\n");
        let mut stream = send(addr, &request).await;
        let mut answer = String::new();
        tokio::time::timeout(WAIT, stream.read_to_string(&mut answer))
            .await
            .expect("the refused connection stayed open")
            .unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{answer}"
        );
        assert!(answer.ends_with(&format!("\r\n\r\n{why}\n")), "{answer}");
    }
    // Any other request is hyper's, on the same port.
    let mut stream = send(
        addr,
        "GET /v1/stream/s HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let mut answer = String::new();
    tokio::time::timeout(WAIT, stream.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    server.stop().await;
}
