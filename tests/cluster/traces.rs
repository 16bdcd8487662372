//! Traces over OTLP, received by a real OTLP/gRPC receiver (`tests/python/otlp_receiver.py`,
//! the collector's TraceService from the official `opentelemetry-proto`): a span per gRPC call
//! and per HTTP request, child of the client's `traceparent`, with the RPC and HTTP
//! conventions' attributes; a write made through a follower continues the same trace on the
//! leader; and no span names a conversation or carries content.
use crate::common;

use std::io::BufRead;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::trio::Trio;
use common::{Recording, WAIT};
use serde_json::Value;
use tapedeck::pb::RecordRequest;

/// The receiver, its port, and every span it has printed so far.
struct Receiver {
    child: Child,
    port: u16,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let mut child = std::process::Command::new(common::python::python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/python/otlp_receiver.py"
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot start the OTLP receiver");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("the receiver said nothing").unwrap();
        let port = first
            .strip_prefix("port ")
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("the receiver said {first:?}"));
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let span: Value = serde_json::from_str(&line).unwrap();
                kept.lock().unwrap().push(span);
            }
        });
        Receiver { child, port, spans }
    }

    /// Waits until a span that `matches` arrives; returns it.
    async fn span(&self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + 2 * WAIT;
        loop {
            if let Some(span) = self.spans.lock().unwrap().iter().find(|s| matches(s)) {
                return span.clone();
            }
            if tokio::time::Instant::now() > deadline {
                let seen = self.spans.lock().unwrap().clone();
                panic!("no span {what} within {:?}; received: {seen:#?}", 2 * WAIT);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A span's attribute `name`.
fn attribute<'a>(span: &'a Value, name: &str) -> &'a Value {
    &span["attributes"][name]
}

/// The OTLP span kind of a server.
const SERVER: i64 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_follow_the_callers_traceparent_across_nodes_and_name_no_conversation() {
    let receiver = Receiver::start();
    let envs: Vec<(String, String)> = [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", receiver.port),
        ),
        ("OTEL_SERVICE_NAME", "tapedeck-under-test".to_string()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_string()),
    ]
    .map(|(name, value)| (name.to_string(), value))
    .into();
    let trio = Trio::start_with_http_and_env(&[], &envs);
    let leader = trio.leader().await;
    let follower = trio.others(leader)[0];
    let (conversation, content) = ("trace-conversation-4f1c", "trace-content-9a7e");

    // gRPC, through a follower (its producer session runs on the leader).
    let grpc_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let grpc_parent = "00f067aa0ba902b7";
    let client = trio.nodes[&follower].recorder().await;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let first = RecordRequest {
        conversation_id: conversation.as_bytes().to_vec(),
        ..Default::default()
    };
    tx.send(first).await.unwrap();
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    let traceparent = format!("00-{grpc_trace}-{grpc_parent}-01");
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    let mut recorder = client.clone();
    let answer =
        tokio::spawn(async move { recorder.record(request).await.map(|r| r.into_inner()) });
    let recording = Recording { tx, answer };
    recording.send(content).await;
    recording.complete().await.unwrap();

    // HTTP, through the same follower (its write is made by the leader's face).
    let http_trace = "0af7651916cd43dd8448eb211c80319c";
    let http_parent = "b7ad6b7169203331";
    let made = reqwest::Client::new()
        .put(format!(
            "http://{}/v1/stream/{conversation}-http",
            trio.http[&follower]
        ))
        .header("traceparent", format!("00-{http_trace}-{http_parent}-01"))
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .body(content)
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);

    let record = "memory.v1.ResponseRecorderService/Record";
    let grpc_call = receiver
        .span(record, |s| {
            s["name"] == record && s["trace_id"] == grpc_trace && s["parent_span_id"] == grpc_parent
        })
        .await;
    assert_eq!(grpc_call["kind"], SERVER, "{grpc_call}");
    assert_eq!(grpc_call["service"], "tapedeck-under-test", "{grpc_call}");
    assert_eq!(
        attribute(&grpc_call, "rpc.system.name"),
        "grpc",
        "{grpc_call}"
    );
    assert_eq!(attribute(&grpc_call, "rpc.method"), record, "{grpc_call}");
    assert_eq!(
        attribute(&grpc_call, "rpc.response.status_code"),
        "OK",
        "{grpc_call}"
    );
    // The leader's side of the session, in the same trace, under the follower's call.
    let produce = "tapedeck.cluster.Cluster/Produce";
    let on_leader = receiver
        .span(produce, |s| {
            s["name"] == produce
                && s["trace_id"] == grpc_trace
                && s["parent_span_id"] == grpc_call["span_id"]
        })
        .await;
    assert_eq!(
        attribute(&on_leader, "rpc.system.name"),
        "grpc",
        "{on_leader}"
    );

    let put = "PUT /v1/stream/{path}";
    let http_call = receiver
        .span(put, |s| {
            s["name"] == put && s["trace_id"] == http_trace && s["parent_span_id"] == http_parent
        })
        .await;
    assert_eq!(http_call["kind"], SERVER, "{http_call}");
    assert_eq!(
        attribute(&http_call, "http.request.method"),
        "PUT",
        "{http_call}"
    );
    assert_eq!(
        attribute(&http_call, "http.route"),
        "/v1/stream/{path}",
        "{http_call}"
    );
    assert_eq!(
        attribute(&http_call, "http.response.status_code"),
        201,
        "{http_call}"
    );
    let forwarded = "tapedeck.cluster.Cluster/Http";
    receiver
        .span(forwarded, |s| {
            s["name"] == forwarded
                && s["trace_id"] == http_trace
                && s["parent_span_id"] == http_call["span_id"]
        })
        .await;

    // Bounded attributes: no conversation, no content, in any span received.
    for span in receiver.spans.lock().unwrap().iter() {
        let text = span.to_string();
        assert!(
            !text.contains(conversation) && !text.contains(content),
            "a span holds a conversation or content: {text}"
        );
    }
}
