//! [`ServerSettings`]: what the server itself is set to: where it listens, where it keeps its
//! data, whether gRPC speaks TLS, and how long it takes to stop.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::tls::TlsFiles;

/// The server's own settings.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Address to listen on for gRPC (`--listen`). Default `127.0.0.1:9090`.
    pub listen: SocketAddr,
    /// Address the HTTP face (Durable Streams) listens on; `None` turns it off
    /// (`--http-listen`). Default `127.0.0.1:4437`, the protocol's port.
    pub http_listen: Option<SocketAddr>,
    /// Directory holding the database file `tapedeck.redb` (`--data-dir`). Default
    /// `./tapedeck-data`.
    pub data_dir: PathBuf,
    /// How long graceful shutdown waits for streams and the commit pipeline
    /// (`--shutdown-timeout`). Default 10 seconds.
    pub shutdown_timeout: Duration,
    /// Serve gRPC over TLS with these files (`--tls-cert`, `--tls-key`). Default plaintext.
    pub tls: Option<TlsFiles>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            http_listen: Some(SocketAddr::from(([127, 0, 0, 1], 4437))),
            data_dir: PathBuf::from("./tapedeck-data"),
            shutdown_timeout: Duration::from_secs(10),
            tls: None,
        }
    }
}

impl ServerSettings {
    /// Path of the database file inside `data_dir`.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("tapedeck.redb")
    }
}
