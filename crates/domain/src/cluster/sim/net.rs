//! The simulated network's two ends for tonic: a connector that dials a node's cluster address
//! over turmoil's TCP, and the connections a node's cluster port accepts there.
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::Uri;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Dials `host:port` addresses on turmoil's network; also says which Raft RPCs to deliver twice.
#[derive(Clone, Debug)]
pub(crate) struct Connector {
    /// Draws the duplicates, seeded by the simulation.
    rng: Arc<Mutex<StdRng>>,
    /// The share of RPCs delivered a second time, late.
    duplicates: f64,
}

impl Connector {
    /// A connector whose duplicates (`duplicates` of the RPCs) are drawn from `seed`.
    pub(crate) fn new(seed: u64, duplicates: f64) -> Connector {
        Connector {
            rng: Arc::new(Mutex::new(StdRng::seed_from_u64(seed))),
            duplicates,
        }
    }

    /// Whether to deliver the next RPC twice, and how long after the first the copy is sent.
    pub(crate) fn duplicate(&self) -> Option<std::time::Duration> {
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        rng.random_bool(self.duplicates)
            .then(|| std::time::Duration::from_millis(rng.random_range(0..200)))
    }
}

type Connecting =
    Pin<Box<dyn Future<Output = io::Result<TokioIo<turmoil::net::TcpStream>>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<turmoil::net::TcpStream>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        Box::pin(async move {
            let (Some(host), Some(port)) = (uri.host(), uri.port_u16()) else {
                return Err(io::Error::other(format!("{uri} names no host and port")));
            };
            let stream = turmoil::net::TcpStream::connect((host, port)).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// A connection a node's cluster port accepted, with the caller's address for its check.
pub(crate) struct Accepted(turmoil::net::TcpStream);

impl Connected for Accepted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.0.local_addr().ok(),
            remote_addr: self.0.peer_addr().ok(),
        }
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// The connections `listener` accepts, for tonic's server.
pub(crate) fn incoming(
    listener: turmoil::net::TcpListener,
) -> impl tokio_stream::Stream<Item = io::Result<Accepted>> + Send + 'static {
    futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| Accepted(stream));
        Some((accepted, listener))
    })
}
