//! Loopback networking for tests: a port that was free a moment ago, and a proxy whose
//! connections can be cut at once.
use std::net::SocketAddr;

use super::{RecorderClient, ResumerClient, WAIT, recorder_client, resumer_client};

/// Where [`free_port`] picks from: below Linux's ephemeral range (32768-60999), from which the
/// kernel hands out the local ports of outgoing connections and of `bind` to port 0. A port
/// picked there could be taken by any connection a test opens before the server binds it; here
/// only another picker could take it.
const PICKED_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A loopback address with a port that was free a moment ago: bound, read, released.
pub(crate) fn free_port() -> SocketAddr {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Test processes run side by side: each starts at its own place in the range.
    let seed = u64::from(std::process::id()).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
    let span = u64::from(PICKED_PORTS.end - PICKED_PORTS.start);
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = PICKED_PORTS.start + (seed.wrapping_add(n.wrapping_mul(7_919)) % span) as u16;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return listener.local_addr().unwrap();
        }
    }
    panic!("no free loopback port in {PICKED_PORTS:?}")
}

/// A loopback TCP proxy in front of a server whose connections can be cut at once, the way a
/// client process that dies or a network that drops would cut them.
pub(crate) struct CuttableProxy {
    pub(crate) addr: SocketAddr,
    cut: tokio_util::sync::CancellationToken,
}

impl CuttableProxy {
    pub(crate) async fn start(target: SocketAddr) -> CuttableProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = tokio_util::sync::CancellationToken::new();
        let stop = cut.clone();
        tokio::spawn(async move {
            loop {
                let (mut inbound, _) = tokio::select! {
                    accepted = listener.accept() => accepted.unwrap(),
                    () = stop.cancelled() => return,
                };
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut outbound = tokio::net::TcpStream::connect(target).await.unwrap();
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        // Dropping both sockets closes them mid-stream.
                        () = stop.cancelled() => {}
                    }
                });
            }
        });
        CuttableProxy { addr, cut }
    }

    pub(crate) async fn recorder(&self) -> RecorderClient {
        recorder_client(self.addr).await
    }

    pub(crate) async fn resumer(&self) -> ResumerClient {
        resumer_client(self.addr).await
    }

    /// Closes every proxied connection.
    pub(crate) fn cut(&self) {
        self.cut.cancel();
    }
}

/// GETs `/metrics` at `addr` (the binary's `--metrics-listen`) and parses it as the Prometheus
/// text format.
pub(crate) fn scrape(addr: SocketAddr) -> prometheus_parse::Scrape {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.contains(" 200 "), "{head}");
    let lines = body.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines).expect("the Prometheus text format")
}

/// Scrapes `/metrics` until `done` holds (within [`WAIT`]).
pub(crate) async fn metric_until(
    addr: SocketAddr,
    what: &str,
    done: impl Fn(&prometheus_parse::Scrape) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let scrape = tokio::task::spawn_blocking(move || scrape(addr))
            .await
            .unwrap();
        if done(&scrape) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The value of the sample `name` whose labels include `labels` (a histogram's: its count).
pub(crate) fn metric_value(
    scrape: &prometheus_parse::Scrape,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    use prometheus_parse::Value;
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            Value::Summary(_) => f64::NAN,
        })
}

/// Reads `stream` until `text` has arrived, within `within` (the test fails otherwise, or if
/// the stream closes first); returns all it read.
pub(crate) async fn read_until(
    stream: &mut tokio::net::TcpStream,
    text: &str,
    within: std::time::Duration,
) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    while !String::from_utf8_lossy(&got).contains(text) {
        let read = tokio::time::timeout_at(deadline, stream.read(&mut buf)).await;
        let text_so_far = || String::from_utf8_lossy(&got).into_owned();
        let n = read
            .unwrap_or_else(|_| panic!("{text:?} never came; got {:?}", text_so_far()))
            .unwrap();
        assert!(n > 0, "closed before {text:?}: {:?}", text_so_far());
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Creates the `text/plain` stream `path` holding `body` on the HTTP face at `addr` (the test
/// fails if it is not created).
pub(crate) async fn create_text_stream(addr: SocketAddr, path: &str, body: &str) {
    let created = reqwest::Client::new()
        .put(format!("http://{addr}/v1/stream/{path}"))
        .header("content-type", "text/plain")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.status());
}
