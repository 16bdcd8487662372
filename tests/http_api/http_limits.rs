//! The HTTP face holds to the same rules as gRPC and bounds what a client can hold, on real
//! sockets: `Stream-TTL` / `Stream-Expires-At` within `--max-retention`, writes refused once
//! shutdown has begun, a CORS preflight that allows `Authorization`, requests whose head or
//! body never comes cut after `--http-request-timeout` (and a connection busy for longer kept
//! until it has been idle that long, over HTTP/1.1 and HTTP/2), and connections past
//! `--http-max-connections` refused while the earlier ones keep working.
use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use tapedeck::access::{AccessConfig, Guard};
use tapedeck::http::{Bounds, HttpFace};
use tapedeck::recorder::{Limits, LivePolicy, Recorder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

/// PUTs stream `path` with `headers`; returns the status and the body.
async fn create(server: &TestServer, path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let mut request = http()
        .put(server.stream_url(path))
        .header("content-type", "text/plain");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

#[tokio::test]
async fn stream_ttl_and_expires_at_beyond_max_retention_are_refused_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.recorder.max_retention = Duration::from_secs(3600);
    let server = TestServer::start_with_http(config).await;

    for ttl in ["18446744073709551615", "99999999999999999999999999", "3601"] {
        let (status, body) = create(&server, "ttl", &[("stream-ttl", ttl)]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "Stream-TTL {ttl}: {body}");
        assert!(
            body.contains("--max-retention") && body.contains("3600"),
            "{body}"
        );
    }
    let far =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(7200))
            .to_string();
    for at in [far.as_str(), "9999-12-31T23:59:59Z"] {
        let (status, body) = create(&server, "expiry", &[("stream-expires-at", at)]).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "Stream-Expires-At {at}: {body}"
        );
        assert!(body.contains("--max-retention"), "{body}");
    }

    // Within the limit: created, and the TTL is what the stream reports.
    let (status, body) = create(&server, "ttl", &[("stream-ttl", "3600")]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let head = http().head(server.stream_url("ttl")).send().await.unwrap();
    assert_eq!(head.headers()["stream-ttl"], "3600");
    let near =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(1800))
            .to_string();
    let (status, body) = create(&server, "expiry", &[("stream-expires-at", &near)]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    server.stop().await;
}

#[tokio::test]
async fn writes_are_refused_with_503_once_shutdown_begins() {
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(dir.path());
    let store = tapedeck::server::open_store(&config).unwrap();
    let limits = Limits {
        max_chunk_bytes: config.recorder.max_chunk_bytes,
        max_recording_bytes: config.recorder.max_recording_bytes,
        max_retention: config.recorder.max_retention,
    };
    let recorder = Recorder::new(store.clone(), limits, LivePolicy::default());
    let guard = Guard::new(&AccessConfig::default()).unwrap();
    let prefix = tapedeck::http::StreamPrefix::default();
    let face = HttpFace::new(
        recorder.clone(),
        guard,
        Bounds::default(),
        prefix,
        None,
        None,
        tapedeck::http::FaceHost::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let url = |path: &str| format!("http://{addr}/v1/stream/{path}");
    let (open, source) = (url("open"), url("source"));
    // The face keeps serving: only the recorder is shut down, as `server::run` does first.
    let serving = tokio::spawn(tapedeck::http::serve(
        listener,
        face,
        Duration::from_secs(60),
        std::future::pending(),
    ));
    for stream in [&open, &source] {
        let created = http()
            .put(stream)
            .header("content-type", "text/plain")
            .body("before ")
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), StatusCode::CREATED);
    }

    tokio::time::timeout(WAIT, recorder.shutdown())
        .await
        .unwrap();
    let text = |request: reqwest::RequestBuilder| request.header("content-type", "text/plain");
    let attempts = [
        ("create", text(http().put(url("new"))).body("x")),
        ("append", text(http().post(&open)).body("after")),
        ("close", http().post(&open).header("stream-closed", "true")),
        ("delete", http().delete(&open)),
        (
            "fork",
            http()
                .put(url("fork"))
                .header("stream-forked-from", "source"),
        ),
    ];
    for (what, request) in attempts {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{what}");
        assert!(response.headers().contains_key("retry-after"), "{what}");
        let body = response.text().await.unwrap();
        assert!(body.contains("shutting down"), "{what}: {body}");
    }
    serving.abort();
    store.close().await;

    // Nothing was written: the next run finds the open stream as it was, and nothing else.
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let read = http().get(server.stream_url("open")).send().await.unwrap();
    assert!(!read.headers().contains_key("stream-closed"));
    assert_eq!(read.text().await.unwrap(), "before ");
    for gone in ["new", "fork"] {
        let head = http().head(server.stream_url(gone)).send().await.unwrap();
        assert_eq!(head.status(), StatusCode::NOT_FOUND, "{gone}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_cors_preflight_allows_authorization_and_every_protocol_header() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let asked = "authorization, content-type, producer-id, producer-epoch, producer-seq, \
                 stream-closed, stream-ttl, stream-forked-from, x-api-key";
    let preflight = http()
        .request(reqwest::Method::OPTIONS, server.stream_url("chat"))
        .header("origin", "http://app.example")
        .header("access-control-request-method", "PUT")
        .header("access-control-request-headers", asked)
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let allowed = preflight.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    // `*` would not cover Authorization (Fetch standard): each header is named.
    let allowed: Vec<&str> = allowed.split(',').map(str::trim).collect();
    for header in asked.split(',').map(str::trim) {
        assert!(allowed.contains(&header), "{header} not in {allowed:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn cors_headers_answer_requests_with_an_origin_and_every_answer_varies_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let (status, _) = create(&server, "chat", &[]).await;
    assert_eq!(status, StatusCode::CREATED);
    let url = server.stream_url("chat");
    let append = |origin: Option<&'static str>| {
        let mut request = http().post(&url).header("content-type", "text/plain");
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.body("token").send()
    };
    let varies_by_origin = |headers: &reqwest::header::HeaderMap| {
        headers.get_all("vary").iter().any(|vary| {
            vary.to_str()
                .unwrap()
                .to_ascii_lowercase()
                .contains("origin")
        })
    };

    // A browser's request (it always sends Origin cross-origin): the CORS headers.
    let cors = append(Some("http://app.example")).await.unwrap();
    assert!(cors.status().is_success(), "{}", cors.status());
    assert_eq!(cors.headers()["access-control-allow-origin"], "*");
    let exposed = cors.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("stream-next-offset"), "{exposed}");
    assert!(varies_by_origin(cors.headers()));

    // An agent's request, and a read: none of them, but the mark for caches.
    let plain = append(None).await.unwrap();
    assert!(plain.status().is_success(), "{}", plain.status());
    let read = http().get(&url).send().await.unwrap();
    let read_headers = read.headers().clone();
    assert_eq!(read.text().await.unwrap(), "tokentoken");
    for answer in [plain.headers(), &read_headers] {
        assert!(
            !answer.contains_key("access-control-allow-origin"),
            "{answer:?}"
        );
        assert!(
            !answer.contains_key("access-control-expose-headers"),
            "{answer:?}"
        );
        assert!(varies_by_origin(answer), "{answer:?}");
        assert_eq!(answer["x-content-type-options"], "nosniff");
    }
    server.stop().await;
}

/// A server whose HTTP face cuts requests after `timeout` and holds `max` connections.
async fn bounded(dir: &std::path::Path, timeout: Duration, max: usize) -> TestServer {
    let mut config = test_config(dir);
    config.http.bounds = Bounds {
        request_timeout: timeout,
        max_connections: max,
    };
    TestServer::start_with_http(config).await
}

/// Reads what the server sends until it closes the connection (at most [`WAIT`]).
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut got))
        .await
        .expect("the server kept the connection open")
        .ok();
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn a_request_whose_body_never_comes_is_cut_after_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = bounded(dir.path(), Duration::from_millis(500), 100).await;
    let addr = server.http_addr.unwrap();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"PUT /v1/stream/slow HTTP/1.1\r\nhost: x\r\ncontent-type: text/plain\r\n\
              content-length: 99999999999\r\n\r\nonly this",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let answer = until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--http-request-timeout"), "{answer}");
    assert!(started.elapsed() >= Duration::from_millis(400));
    let head = http().head(server.stream_url("slow")).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}

#[tokio::test]
async fn a_request_whose_head_never_ends_is_closed_after_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = bounded(dir.path(), Duration::from_millis(500), 100).await;
    let addr = server.http_addr.unwrap();
    // Silent from the start; and a second request whose head stops half-way.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /v1/stream/x HTTP/1.1\r\nhost: x\r\n\r\nGET /v1/stream/x HTTP/1.1\r\n")
        .await
        .unwrap();
    assert_eq!(until_closed(&mut silent).await, "");
    let answered = until_closed(&mut half).await;
    assert_eq!(answered.matches("HTTP/1.1 404").count(), 1, "{answered}");
    server.stop().await;
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = bounded(dir.path(), Duration::from_millis(500), 100).await;
    let (mut sender, connection) = h2c(&server).await;
    let answer = sender.send_request(get("/v1/stream/none")).await.unwrap();
    assert_eq!(answer.status(), StatusCode::NOT_FOUND);
    drop(answer);
    // Nothing more is asked: the server closes the connection (GOAWAY), which ends it here.
    let closed = tokio::time::timeout(WAIT, connection).await;
    assert!(closed.is_ok(), "the idle HTTP/2 connection was kept open");
    server.stop().await;
}

#[tokio::test]
async fn a_connection_busy_past_the_request_timeout_is_kept_and_closed_once_idle_that_long() {
    let dir = tempfile::tempdir().unwrap();
    let timeout = Duration::from_millis(500);
    let server = bounded(dir.path(), timeout, 100).await;
    assert_eq!(create(&server, "busy", &[]).await.0, StatusCode::CREATED);
    // A long-poll waits (up to 3 s) far longer than the request timeout: its connection is busy,
    // not idle, all that time.
    let mut stream = TcpStream::connect(server.http_addr.unwrap()).await.unwrap();
    stream
        .write_all(b"GET /v1/stream/busy?offset=now&live=long-poll HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(3 * timeout, stream.read(&mut byte)).await;
    assert!(
        early.is_err(),
        "the waiting long-poll was answered or closed within three request timeouts: {early:?}"
    );
    let appended = http()
        .post(server.stream_url("busy"))
        .header("content-type", "text/plain")
        .body("late")
        .send()
        .await
        .unwrap();
    assert_eq!(appended.status(), StatusCode::NO_CONTENT);
    let head = read_response(&mut stream)
        .await
        .expect("the long-poll was answered");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    // Idle from then on: closed after the timeout.
    let started = Instant::now();
    assert_eq!(until_closed(&mut stream).await, "");
    assert!(started.elapsed() >= timeout * 4 / 5, "closed too soon");
    server.stop().await;
}

#[tokio::test]
async fn an_http2_connection_busy_with_a_live_read_past_the_request_timeout_takes_more_requests() {
    let dir = tempfile::tempdir().unwrap();
    let timeout = Duration::from_millis(500);
    let server = bounded(dir.path(), timeout, 100).await;
    assert_eq!(create(&server, "h2-busy", &[]).await.0, StatusCode::CREATED);
    let (mut sender, connection) = h2c(&server).await;
    // An SSE read over HTTP/2 goes through hyper, and keeps its connection busy while it lasts.
    let live = sender
        .send_request(get("/v1/stream/h2-busy?offset=-1&live=sse"))
        .await
        .unwrap();
    assert_eq!(live.status(), StatusCode::OK);
    let mut body = live.into_body();
    let first = http_body_util::BodyExt::frame(&mut body).await;
    assert!(matches!(first, Some(Ok(_))), "no first event: {first:?}");
    let quiet = tokio::time::timeout(3 * timeout, http_body_util::BodyExt::frame(&mut body)).await;
    assert!(quiet.is_err(), "the live read ended: {quiet:?}");
    // Busy all along, not idle: the connection was not told to go away, and takes another.
    sender.ready().await.expect("the connection was closed");
    let answer = sender
        .send_request(get("/v1/stream/none"))
        .await
        .expect("a request on the busy connection was refused");
    assert_eq!(answer.status(), StatusCode::NOT_FOUND);
    drop((answer, body));
    // Idle once the live read is gone: closed after the timeout.
    let closed = tokio::time::timeout(WAIT, connection).await;
    assert!(closed.is_ok(), "the idle HTTP/2 connection was kept open");
    server.stop().await;
}

/// An HTTP/2 connection to `server`'s HTTP face with prior knowledge (h2c), as a proxy or a
/// gRPC-style client speaks it: its sender, and the task driving it (it ends when the server
/// closes the connection).
async fn h2c(
    server: &TestServer,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let tcp = TcpStream::connect(server.http_addr.unwrap()).await.unwrap();
    let io = hyper_util::rt::TokioIo::new(tcp);
    let (sender, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
            .await
            .unwrap();
    (sender, tokio::spawn(connection))
}

/// A GET of `path`, with no body.
fn get(path: &str) -> http::Request<http_body_util::Empty<bytes::Bytes>> {
    http::Request::get(path)
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap()
}

/// Whether a GET over `stream` is answered (a whole 404 response, body included).
async fn answers(stream: &mut TcpStream) -> bool {
    // A refused connection may be closed before the request is written.
    let _ = stream
        .write_all(b"GET /v1/stream/none HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    tokio::time::timeout(WAIT, read_response(stream))
        .await
        .ok()
        .flatten()
        .is_some_and(|head| head.starts_with("http/1.1 404"))
}

/// Reads one response from `stream`; returns its head in lower case, or `None` if the stream
/// ends first.
async fn read_response(stream: &mut TcpStream) -> Option<String> {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        got.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |n| n.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.ok()?;
    Some(head)
}

#[tokio::test]
async fn connections_past_the_limit_are_refused_while_earlier_ones_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let server = bounded(dir.path(), Duration::from_secs(30), 2).await;
    let addr: SocketAddr = server.http_addr.unwrap();
    let mut first = TcpStream::connect(addr).await.unwrap();
    let mut second = TcpStream::connect(addr).await.unwrap();
    assert!(answers(&mut first).await);
    assert!(answers(&mut second).await);

    // It sends its request at once, as a browser does, and must still read the 503 (closing
    // a socket with unread bytes resets the connection, and the answer with it).
    let mut third = TcpStream::connect(addr).await.unwrap();
    third
        .write_all(b"GET /v1/stream/none HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let refused = until_closed(&mut third).await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("--http-max-connections"), "{refused}");
    assert!(
        answers(&mut first).await,
        "an earlier connection stopped working"
    );
    assert!(
        answers(&mut second).await,
        "an earlier connection stopped working"
    );

    // Once one goes, its place is free again.
    drop(first);
    let deadline = Instant::now() + WAIT;
    loop {
        let mut next = TcpStream::connect(addr).await.unwrap();
        if answers(&mut next).await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the freed place was never given again"
        );
        tokio::task::yield_now().await;
    }
    server.stop().await;
}

/// A long-poll that waited, then found more committed than its room (1 MiB), answers with its
/// room's worth and does not say it is up to date; the next read has the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_that_waited_answers_with_at_most_its_room() {
    const ROOM: usize = 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    // One append of 3 MiB, so that one commit holds more than the room.
    let server = BinaryServer::spawn(
        dir.path(),
        &[
            "--http-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--max-chunk-bytes",
            "4194304",
        ],
    );
    let (face, metrics) = (server.http_addr.unwrap(), server.metrics_addr.unwrap());
    let url = format!("http://{face}/v1/stream/waited");
    let created = http()
        .put(&url)
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let poll = tokio::spawn(http().get(format!("{url}?offset=-1&live=long-poll")).send());
    metric_until(metrics, "the long-poll waits", |scrape| {
        metric_value(
            scrape,
            "tapedeck_http_open_readers",
            &[("kind", "long-poll")],
        ) == Some(1.0)
    })
    .await;
    let written: Vec<u8> = (0..3 * ROOM).map(|i| (i % 251) as u8).collect();
    let appended = http()
        .post(&url)
        .header("content-type", "application/octet-stream")
        .body(written.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(appended.status(), StatusCode::NO_CONTENT);
    let answer = poll.await.unwrap().unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(answer.headers().get("stream-up-to-date").is_none());
    let next = answer.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_string();
    let first = answer.bytes().await.unwrap();
    assert_eq!(first.len(), ROOM);
    let rest = http()
        .get(format!("{url}?offset={next}"))
        .send()
        .await
        .unwrap();
    assert!(rest.headers().get("stream-up-to-date").is_some());
    let rest = rest.bytes().await.unwrap();
    assert_eq!([&first[..], &rest[..]].concat(), written);
}
