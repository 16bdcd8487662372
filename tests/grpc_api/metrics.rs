//! Prometheus metrics and request logs of the real binary: `/metrics` scraped during and after
//! a recording parses as the Prometheus text format, and its counters move; every call leaves
//! one log line with its method, conversation, outcome and duration.
use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{BinaryServer, Recording, WAIT, metric_value, replay_text, scrape};
use prometheus_parse::Scrape;

/// Scrapes until `done` accepts a scrape.
fn scrape_until(addr: SocketAddr, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let scrape = scrape(addr);
        if done(&scrape) {
            return scrape;
        }
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_during_a_recording_and_every_call_is_logged_once() {
    let dir = tempfile::tempdir().unwrap();
    let (server, log) =
        BinaryServer::spawn_logged(dir.path(), &["--metrics-listen", "127.0.0.1:0"]);
    let metrics = server.metrics_addr.expect("it serves metrics");
    let record = [
        ("grpc_service", "memory.v1.ResponseRecorderService"),
        ("grpc_method", "Record"),
        ("grpc_type", "client_stream"),
    ];

    let recording = Recording::open(&server.recorder().await, b"metrics-1").await;
    for token in ["one ", "two ", "three"] {
        recording.send(token).await;
    }
    let during = scrape_until(metrics, "three tokens appended, one live recording", |s| {
        metric_value(s, "tapedeck_appended_tokens_total", &[]) >= Some(3.0)
            && metric_value(s, "tapedeck_live_recordings", &[]) == Some(1.0)
    });
    assert_eq!(
        metric_value(&during, "grpc_server_started_total", &record),
        Some(1.0)
    );
    assert_eq!(
        metric_value(&during, "grpc_server_msg_received_total", &record),
        Some(4.0)
    );
    assert_eq!(
        metric_value(&during, "tapedeck_appended_bytes_total", &[]),
        Some(13.0)
    );
    assert_eq!(
        metric_value(&during, "tapedeck_producers", &[("state", "attached")]),
        Some(1.0)
    );
    assert!(metric_value(&during, "tapedeck_commits_total", &[]) >= Some(1.0));
    assert!(metric_value(&during, "tapedeck_commit_fsync_seconds", &[]) >= Some(1.0));
    assert!(metric_value(&during, "tapedeck_database_file_bytes", &[]) > Some(0.0));
    assert_eq!(metric_value(&during, "tapedeck_disk_full", &[]), Some(0.0));
    assert_eq!(
        metric_value(&during, "grpc_server_handled_total", &record),
        None
    );

    recording.complete().await.unwrap();
    assert_eq!(
        replay_text(&server.recorder().await, b"metrics-1")
            .await
            .unwrap()
            .text,
        "one two three"
    );
    let after = scrape_until(metrics, "the Record call handled", |s| {
        metric_value(
            s,
            "grpc_server_handled_total",
            &[("grpc_method", "Record"), ("grpc_code", "OK")],
        ) == Some(1.0)
            && metric_value(s, "tapedeck_live_recordings", &[]) == Some(0.0)
    });
    let replay = [("grpc_method", "Replay"), ("grpc_type", "server_stream")];
    assert_eq!(
        metric_value(&after, "grpc_server_msg_sent_total", &replay),
        Some(1.0)
    );
    assert_eq!(
        metric_value(
            &after,
            "grpc_server_handling_seconds",
            &[("grpc_method", "Record")]
        ),
        Some(1.0),
        "one observation in the histogram"
    );
    let unknown = server
        .recorder()
        .await
        .cancel(tapedeck::pb::CancelRecordRequest {
            conversation_id: vec![],
        })
        .await;
    assert!(unknown.is_err());
    scrape_until(metrics, "the refused Cancel handled", |s| {
        metric_value(
            s,
            "grpc_server_handled_total",
            &[("grpc_method", "Cancel"), ("grpc_code", "InvalidArgument")],
        ) == Some(1.0)
    });

    // One log line per call, with its conversation and outcome.
    let lines = log.lock().unwrap().clone();
    let calls: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "call")
        .collect();
    let record_calls: Vec<_> = calls
        .iter()
        .filter(|v| v["fields"]["method"] == "/memory.v1.ResponseRecorderService/Record")
        .collect();
    assert_eq!(record_calls.len(), 1, "{calls:?}");
    assert_eq!(record_calls[0]["fields"]["conversation"], "metrics-1");
    assert_eq!(record_calls[0]["fields"]["outcome"], "OK");
    assert!(record_calls[0]["fields"]["duration_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(record_calls[0]["level"], "INFO");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_refusal_is_counted_once() {
    const SECRET: &str = "a-grant-secret-of-thirty-two-bytes-or-more";
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(
        dir.path(),
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--jwt-secret",
            SECRET,
        ],
    );
    let claims = tapedeck::access::Claims {
        sub: "user-1".into(),
        exp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 600,
        nbf: None,
        iss: None,
        aud: None,
        conversations: [("elsewhere".to_string(), tapedeck::access::Role::Writer)].into(),
    };
    let grant = tapedeck::access::mint(&tapedeck::access::Secret::new(SECRET), &claims).unwrap();
    let (metrics, http) = (
        server.metrics_addr.expect("it serves metrics"),
        server.http_addr.expect("its HTTP face listens"),
    );
    let url = format!("http://{http}/v1/stream/private");
    let client = reqwest::Client::new();
    let denied = client.put(&url).bearer_auth(&grant).send().await.unwrap();
    assert_eq!(denied.status(), reqwest::StatusCode::FORBIDDEN);
    let anonymous = client.put(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), reqwest::StatusCode::UNAUTHORIZED);

    let counted = scrape(metrics);
    let refusals = |reason| {
        metric_value(
            &counted,
            "tapedeck_auth_refusals_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(refusals("permission_denied"), Some(1.0));
    assert_eq!(refusals("unauthenticated"), Some(1.0));
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_face_counts_and_logs_every_request_and_every_live_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (server, log) = BinaryServer::spawn_logged(
        dir.path(),
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ],
    );
    let (metrics, http) = (
        server.metrics_addr.expect("it serves metrics"),
        server.http_addr.expect("its HTTP face listens"),
    );
    let url = format!("http://{http}/v1/stream/observed");
    let client = reqwest::Client::new();
    let created = client
        .put(&url)
        .header("content-type", "text/plain")
        .body("12345")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let sse = client
        .get(format!("{url}?offset=-1&live=sse"))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    let open = scrape_until(metrics, "one SSE reader open", |s| {
        metric_value(s, "tapedeck_http_open_readers", &[("kind", "sse")]) == Some(1.0)
    });
    assert_eq!(
        metric_value(
            &open,
            "tapedeck_http_requests_total",
            &[("method", "PUT"), ("code", "201")]
        ),
        Some(1.0)
    );
    let closed = client
        .post(&url)
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .body("678")
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 204);
    // The reader gets everything and its response ends with the stream.
    let events = tokio::time::timeout(WAIT, sse.text())
        .await
        .unwrap()
        .unwrap();
    assert!(
        events.contains("12345") && events.contains("678"),
        "{events}"
    );
    let missing = client.get(format!("{url}-not")).send().await.unwrap();
    assert_eq!(missing.status(), 404);

    let after = scrape_until(metrics, "the SSE reader closed", |s| {
        metric_value(s, "tapedeck_http_open_readers", &[("kind", "sse")]) == Some(0.0)
    });
    let requests = |method, code| {
        metric_value(
            &after,
            "tapedeck_http_requests_total",
            &[("method", method), ("code", code)],
        )
    };
    assert_eq!(requests("POST", "204"), Some(1.0));
    assert_eq!(requests("GET", "200"), Some(1.0));
    assert_eq!(requests("GET", "404"), Some(1.0));
    assert_eq!(
        metric_value(
            &after,
            "tapedeck_http_request_duration_seconds",
            &[("method", "GET")]
        ),
        Some(2.0),
        "two GETs observed"
    );
    let sent = metric_value(&after, "tapedeck_http_sent_bytes_total", &[]).unwrap();
    assert!(sent >= events.len() as f64, "{sent} < {}", events.len());

    // One line per request, with its stream and status; one more when the reader ended. (The
    // log is read from the server's stderr by another thread: wait for it to catch up.)
    let deadline = std::time::Instant::now() + WAIT;
    let lines: Vec<serde_json::Value> = loop {
        let lines: Vec<serde_json::Value> = log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if lines
            .iter()
            .any(|v| v["fields"]["message"] == "HTTP reader ended")
            || std::time::Instant::now() > deadline
        {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let requests: Vec<_> = lines
        .iter()
        .filter(|v| v["fields"]["message"] == "HTTP request")
        .collect();
    assert_eq!(requests.len(), 4, "{requests:?}");
    let put = &requests[0]["fields"];
    assert_eq!(put["method"], "PUT");
    assert_eq!(put["stream"], "observed");
    assert_eq!(put["status"], 201);
    assert!(put["duration_ms"].as_f64().unwrap() >= 0.0);
    let ended: Vec<_> = lines
        .iter()
        .filter(|v| v["fields"]["message"] == "HTTP reader ended")
        .collect();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0]["fields"]["kind"], "sse");
    assert_eq!(ended[0]["fields"]["stream"], "observed");
    assert_eq!(ended[0]["fields"]["bytes"], events.len() as u64);
    drop(server);
}
