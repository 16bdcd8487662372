//! Live-tail latency: producer send → replay receive over gRPC on loopback, with the real
//! `tapedeck` binary as the server, 100 concurrent recordings each followed by one live replay.
//! Prints p50 / p99 / p99.9 / max and the ratio to Memory Service's 20 ms polling interval.
//!
//! Run: `cargo bench --bench live_tail`
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tapedeck::pb::{RecordRequest, ReplayRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// Concurrent recordings, each with one live replay.
const STREAMS: usize = 100;
/// Tokens per second per producer.
const TOKENS_PER_SECOND: u64 = 20;
/// Every token is this many bytes, so a replay offset tells how many tokens arrived.
const TOKEN: &str = "tok-8byt";
/// How long producers send.
const DURATION: Duration = Duration::from_secs(10);
/// Memory Service's recorder polls its files this often.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` probes bench binaries; nothing to run then.
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut server, addr) = spawn_server(dir.path());
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let client = ResponseRecorderServiceClient::new(channel);

    let latencies = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for stream in 0..STREAMS {
        let client = client.clone();
        let latencies = latencies.clone();
        tasks.push(tokio::spawn(async move {
            run_stream(client, format!("live-tail-{stream}"), latencies).await
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let _ = server.kill();
    let _ = server.wait();

    let mut latencies = Arc::try_unwrap(latencies).unwrap().into_inner().unwrap();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    let (p50, p99, p999) = (at(0.50), at(0.99), at(0.999));
    println!(
        "live tail, {STREAMS} streams x {TOKENS_PER_SECOND} tokens/s, {} tokens measured",
        latencies.len()
    );
    println!(
        "p50 {p50:?}  p99 {p99:?}  p99.9 {p999:?}  max {:?}",
        latencies.last().unwrap()
    );
    println!(
        "p99 vs Memory Service's {POLL_INTERVAL:?} poll interval: {:.1}x lower",
        POLL_INTERVAL.as_secs_f64() / p99.as_secs_f64()
    );
}

/// One producer and its live replay; pushes the latency of every token into `latencies`.
async fn run_stream(
    client: ResponseRecorderServiceClient<Channel>,
    id: String,
    latencies: Arc<Mutex<Vec<Duration>>>,
) {
    let (tx, rx) = mpsc::channel(64);
    tx.send(RecordRequest {
        conversation_id: id.clone().into_bytes(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut producer_client = client.clone();
    let answer = tokio::spawn(async move { producer_client.record(ReceiverStream::new(rx)).await });
    let mut replay = loop {
        let request = ReplayRequest {
            conversation_id: id.clone().into_bytes(),
            resume_offset: 0,
            ..Default::default()
        };
        if let Ok(replay) = client.clone().replay(request).await {
            break replay.into_inner();
        }
        tokio::task::yield_now().await;
    };
    let sent_at = Arc::new(Mutex::new(Vec::new()));
    let sent = sent_at.clone();
    let producer = tokio::spawn(async move {
        let mut ticker =
            tokio::time::interval(Duration::from_micros(1_000_000 / TOKENS_PER_SECOND));
        let end = Instant::now() + DURATION;
        while Instant::now() < end {
            ticker.tick().await;
            sent.lock().unwrap().push(Instant::now());
            tx.send(RecordRequest {
                content: TOKEN.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        }
        tx.send(RecordRequest {
            complete: true,
            ..Default::default()
        })
        .await
        .unwrap();
    });
    let mut received = 0;
    while let Some(message) = replay.message().await.unwrap() {
        let now = Instant::now();
        let total = message.offset as usize / TOKEN.len();
        let sent = sent_at.lock().unwrap();
        let mut latencies = latencies.lock().unwrap();
        for index in received..total {
            latencies.push(now - sent[index]);
        }
        received = total;
    }
    producer.await.unwrap();
    answer.await.unwrap().unwrap();
}

/// Starts the real binary on a free port and waits for its listening line.
fn spawn_server(data_dir: &std::path::Path) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "off",
            "--log-format",
            "json",
            "--data-dir",
        ])
        .arg(data_dir)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(start) = line.find("\"addr\":\"") {
            let rest = &line[start + 8..];
            break rest[..rest.find('"').unwrap()].to_string();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    (child, addr)
}
