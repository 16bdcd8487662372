//! A real tapedeck server running in the test's own process, on free loopback ports with the
//! test's data dir, shut down gracefully by [`TestServer::stop`].
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tapedeck::Config;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{RecorderClient, ResumerClient, recorder_client, resumer_client};

/// A server running in this process.
pub(crate) struct TestServer {
    pub(crate) addr: SocketAddr,
    /// The HTTP face's address, when the test asked for it.
    pub(crate) http_addr: Option<SocketAddr>,
    pub(crate) data_dir: PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<tapedeck::Result<()>>,
}

/// A config for tests: everything default but the data dir, a short shutdown timeout, and no
/// producer grace period (a producer that goes away ends its recording as `interrupted` at
/// once; the tests of resuming set a grace period of their own).
pub(crate) fn test_config(data_dir: &Path) -> Config {
    let mut config = Config::default();
    config.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.server.data_dir = data_dir.to_path_buf();
    config.server.shutdown_timeout = Duration::from_secs(5);
    config.recorder.producer_grace = Duration::ZERO;
    config
}

impl TestServer {
    /// Starts a server on `config.server.data_dir`, listening on a free loopback port.
    pub(crate) async fn start(config: Config) -> TestServer {
        let store = tapedeck::server::open_store(&config).unwrap();
        Self::start_with_store(config, store).await
    }

    /// Starts a server with default settings on `data_dir`.
    pub(crate) async fn start_in(data_dir: &Path) -> TestServer {
        Self::start(test_config(data_dir)).await
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) async fn recorder(&self) -> RecorderClient {
        recorder_client(self.addr).await
    }

    pub(crate) async fn resumer(&self) -> ResumerClient {
        resumer_client(self.addr).await
    }

    /// Shuts the server down gracefully and waits until its database is closed.
    pub(crate) async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), &mut self.task)
            .await
            .expect("server did not stop in time")
            .unwrap()
            .unwrap();
    }
}

impl TestServer {
    /// Starts a server on a store the test opened itself (with a manual clock, say).
    pub(crate) async fn start_with_store(
        config: Config,
        store: tapedeck::store::Store,
    ) -> TestServer {
        Self::serve(config, store, None).await
    }

    /// Starts a server with its HTTP face too, each on a free loopback port.
    pub(crate) async fn start_with_http(config: Config) -> TestServer {
        let store = tapedeck::server::open_store(&config).unwrap();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(config, store, Some(http)).await
    }

    /// The HTTP face's URL of stream `path`.
    pub(crate) fn stream_url(&self, path: &str) -> String {
        let addr = self
            .http_addr
            .expect("the server was started without its HTTP face");
        format!("http://{addr}/v1/stream/{path}")
    }

    async fn serve(
        config: Config,
        store: tapedeck::store::Store,
        http: Option<tokio::net::TcpListener>,
    ) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let http_addr = http.as_ref().map(|l| l.local_addr().unwrap());
        let (shutdown, stop) = oneshot::channel::<()>();
        let data_dir = config.server.data_dir.clone();
        let task = tokio::spawn(async move {
            tapedeck::server::run(listener, http, store, &config, async {
                let _ = stop.await;
            })
            .await
        });
        TestServer {
            addr,
            http_addr,
            data_dir,
            shutdown: Some(shutdown),
            task,
        }
    }
}
