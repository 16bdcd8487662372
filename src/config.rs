//! `Config`: every setting of a tapedeck server, with defaults that work out of the box.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::access::AccessConfig;
pub use crate::locator::LocatorConfig;
pub use crate::recorder::OnConflict;
pub use crate::tls::TlsFiles;

/// Settings of a tapedeck server. `Config::default()` is what `tapedeck serve` runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on for gRPC. Default `127.0.0.1:9090`.
    pub listen: SocketAddr,
    /// Address the HTTP face (Durable Streams) listens on; `None` turns it off. Default
    /// `127.0.0.1:4437`, the protocol's port.
    pub http_listen: Option<SocketAddr>,
    /// How the HTTP face bounds its connections and the time a request takes to arrive.
    pub http_bounds: crate::http::Bounds,
    /// Where the HTTP face serves streams. Default `/v1/stream`.
    pub http_path_prefix: crate::http::StreamPrefix,
    /// Directory holding the database file `tapedeck.redb`. Default `./tapedeck-data`.
    pub data_dir: PathBuf,
    /// How long a finished recording stays replayable. Default 30 minutes.
    pub retention: Duration,
    /// Longest retention a producer may choose for its own recording. Default 7 days.
    pub max_retention: Duration,
    /// How long a collected recording's tombstone answers "expired". Default 24 hours.
    pub tombstone_retention: Duration,
    /// How long a recording whose producer went away waits for it to resume before it ends as
    /// `interrupted`. Default 30 seconds.
    pub producer_grace: Duration,
    /// What a new recording does to a conversation's live one. Default supersede.
    pub on_conflict: OnConflict,
    /// How often the sweeper collects expired and idle recordings. Default 60 seconds.
    pub gc_interval: Duration,
    /// A live recording with no token for this long is ended as `interrupted`. Default 1 hour.
    pub idle_timeout: Duration,
    /// Largest single chunk, in UTF-8 bytes. Default 1 MiB.
    pub max_chunk_bytes: usize,
    /// Largest recording, in UTF-8 bytes. Default 64 MiB.
    pub max_recording_bytes: u64,
    /// Most recordings live at once. Default 10,000.
    pub max_live_recordings: usize,
    /// Size of the write-ahead log that makes the next commit a checkpoint; bounds what a
    /// restart after a crash replays. Default 32 MiB.
    pub checkpoint_bytes: u64,
    /// Memory redb keeps pages of the file in. Default 16 MiB.
    pub cache_bytes: u64,
    /// Group commit: while commits hold several ops each, the next one starts at least this
    /// long after the last one did. Zero commits as soon as the last commit is done.
    /// Default 4 ms.
    pub commit_interval: Duration,
    /// How long graceful shutdown waits for streams and the commit pipeline. Default 10 seconds.
    pub shutdown_timeout: Duration,
    /// API keys and grant keys; nothing configured (the default) turns access control off.
    pub access: AccessConfig,
    /// Serve gRPC over TLS with these files. Default plaintext.
    pub tls: Option<TlsFiles>,
    /// Run as one of several instances, located through Redis. Default off (one instance).
    pub locator: Option<LocatorConfig>,
    /// Seal ended recordings into this object store (`s3://BUCKET/PREFIX` or
    /// `file:///PATH`), and read there what is not local. Default off.
    pub object_store: Option<String>,
    /// How long a sealed recording's chunks stay on local disk; `None` (the default) keeps
    /// them for the recording's whole retention.
    pub local_retention: Option<Duration>,
    /// Run as one node of a replicated cluster. Default off (a single node).
    pub cluster: Option<crate::cluster::ClusterConfig>,
}

impl Config {
    /// Path of the database file inside `data_dir`.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("tapedeck.redb")
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            data_dir: PathBuf::from("./tapedeck-data"),
            http_listen: Some(SocketAddr::from(([127, 0, 0, 1], 4437))),
            http_bounds: crate::http::Bounds::default(),
            http_path_prefix: crate::http::StreamPrefix::default(),
            retention: Duration::from_secs(30 * 60),
            max_retention: Duration::from_secs(7 * 24 * 60 * 60),
            tombstone_retention: Duration::from_secs(24 * 60 * 60),
            producer_grace: Duration::from_secs(30),
            on_conflict: OnConflict::Supersede,
            gc_interval: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60 * 60),
            max_chunk_bytes: 1024 * 1024,
            max_recording_bytes: 64 * 1024 * 1024,
            max_live_recordings: 10_000,
            checkpoint_bytes: crate::store::DEFAULT_CHECKPOINT_BYTES,
            cache_bytes: crate::store::DEFAULT_CACHE_BYTES,
            commit_interval: crate::store::DEFAULT_COMMIT_INTERVAL,
            shutdown_timeout: Duration::from_secs(10),
            access: AccessConfig::default(),
            tls: None,
            locator: None,
            object_store: None,
            local_retention: None,
            cluster: None,
        }
    }
}
