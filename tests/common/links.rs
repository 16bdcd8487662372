//! Loopback links between the nodes of a cluster, one TCP proxy per direction, each of which
//! can be cut (its open connections dropped, new ones closed at once) and healed again: a
//! network partition made without root or network namespaces.
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// The proxies of [`Link`]s, served on a runtime of their own: a test thread that blocks
/// (starting nodes, say) never stalls the traffic between the nodes.
pub(crate) struct Links {
    /// `None` once shut down.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Links {
    pub(crate) fn new() -> Links {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-links")
            .enable_all()
            .build()
            .expect("a runtime for the links");
        Links {
            runtime: Some(runtime),
        }
    }

    /// A link to `target`, open: what connects to its `addr` is passed through to `target`.
    pub(crate) fn to(&self, target: SocketAddr) -> Link {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Arc::new(Mutex::new(Some(CancellationToken::new())));
        let runtime = self.runtime.as_ref().expect("the links are running");
        runtime.spawn(serve(listener, target, gate.clone()));
        Link { addr, gate }
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        // Dropped inside the test's runtime, where a runtime may not block to shut down.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// One direction of traffic between two nodes; see [`Links`].
pub(crate) struct Link {
    /// Where the dialing node connects.
    pub(crate) addr: SocketAddr,
    /// `Some` while the link is open: the token its connections end on when it is cut.
    gate: Arc<Mutex<Option<CancellationToken>>>,
}

impl Link {
    /// Drops every connection through the link and closes new ones at once, until
    /// [`heal`](Self::heal).
    pub(crate) fn cut(&self) {
        if let Some(open) = self.gate.lock().unwrap().take() {
            open.cancel();
        }
    }

    /// Lets new connections through again.
    pub(crate) fn heal(&self) {
        self.gate
            .lock()
            .unwrap()
            .get_or_insert_with(CancellationToken::new);
    }
}

/// Accepts connections on `listener` for as long as the runtime runs; passes each through to
/// `target` while `gate` is open, and closes it at once while it is cut.
async fn serve(
    listener: std::net::TcpListener,
    target: SocketAddr,
    gate: Arc<Mutex<Option<CancellationToken>>>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        let open = gate.lock().unwrap().clone();
        match open {
            Some(open) => {
                tokio::spawn(pass(inbound, target, open));
            }
            // Cut: the dialer sees its connection closed, as a partition that resets would.
            None => drop(inbound),
        }
    }
}

/// Copies both ways between `inbound` and a new connection to `target` until either side
/// closes or the link is cut (`open` cancelled), which drops both sockets mid-stream.
async fn pass(mut inbound: tokio::net::TcpStream, target: SocketAddr, open: CancellationToken) {
    let _ = inbound.set_nodelay(true);
    let connected = tokio::select! {
        connected = tokio::net::TcpStream::connect(target) => connected,
        () = open.cancelled() => return,
    };
    let Ok(mut outbound) = connected else {
        return;
    };
    let _ = outbound.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        () = open.cancelled() => {}
    }
}
