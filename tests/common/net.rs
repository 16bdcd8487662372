//! Loopback networking for tests: a port that was free a moment ago, and a proxy whose
//! connections can be cut at once.
use std::net::SocketAddr;

use super::{RecorderClient, ResumerClient, recorder_client, resumer_client};

/// A loopback address with a port that was free a moment ago: bound, read, released.
pub(crate) fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
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
