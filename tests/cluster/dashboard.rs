//! The Grafana dashboard (`deploy/grafana/tapedeck.json`) queries only metrics that exist: a
//! workload runs on a single node (with access control, the HTTP face and an object store) and
//! on a cluster, and every metric name in the dashboard's queries must be on some `/metrics`.
use crate::common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::SocketAddr;

use common::trio::Trio;
use common::{BinaryServer, WAIT};

/// The metric names a `/metrics` at `addr` serves now (histograms' `_bucket`, `_sum` and
/// `_count` lines each by their own name, as a query names them).
fn served_names(addr: SocketAddr) -> BTreeSet<String> {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every metric name the dashboard's queries use.
fn dashboard_names() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/tapedeck.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let words = expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            names.extend(
                words
                    .filter(|word| {
                        word.starts_with("tapedeck_") || word.starts_with("grpc_server_")
                    })
                    .map(str::to_string),
            );
        }
    }
    names
}

/// Runs `tapedeck ARGS` against `server` with `stdin`; whether it succeeded.
fn cli(server: &BinaryServer, args: &[&str], stdin: &str) -> bool {
    common::run_cli(server, args, stdin).status.success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_exists() {
    let wanted = dashboard_names();
    assert!(wanted.len() > 20, "{wanted:?}");
    let dir = tempfile::tempdir().unwrap();
    let objects = tempfile::tempdir().unwrap();
    let object_store = format!("file://{}", objects.path().display());
    let node = BinaryServer::spawn(
        dir.path(),
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--api-key",
            "agent=dashboard-test-key",
            "--object-store",
            &object_store,
        ],
    );
    // Recordings (sealed into the object store once ended), a refusal, and HTTP requests with
    // an SSE reader.
    let key = ["--api-key", "dashboard-test-key"];
    for id in ["dash-1", "dash-2"] {
        assert!(cli(
            &node,
            &[&["record", id][..], &key[..]].concat(),
            "some tokens"
        ));
    }
    assert!(
        !cli(&node, &["ls"], ""),
        "a call without a credential was answered"
    );
    let http = reqwest::Client::new();
    let stream = format!("{}/v1/stream/dash-http", node.http_base());
    let made = http
        .put(&stream)
        .header("x-api-key", "dashboard-test-key")
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .body("over http")
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);
    let sse = http
        .get(format!("{stream}?offset=-1&live=sse"))
        .header("x-api-key", "dashboard-test-key")
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    sse.text().await.unwrap();

    let trio = Trio::start(&["--metrics-listen", "127.0.0.1:0"]);
    let leader = trio.leader().await;
    common::record_all(
        &trio.nodes[&leader].recorder().await,
        b"dash-cluster",
        &["a"],
    )
    .await;

    // Gauges are sampled and seals made a moment later: look until all are there.
    let deadline = tokio::time::Instant::now() + 3 * WAIT;
    loop {
        let mut served = served_names(node.metrics_addr.unwrap());
        for node in trio.nodes.values() {
            served.extend(served_names(node.metrics_addr.unwrap()));
        }
        let missing: Vec<&String> = wanted.difference(&served).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dashboard queries metrics no /metrics serves: {missing:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}
