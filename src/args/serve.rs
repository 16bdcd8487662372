//! `tapedeck serve`'s flags, each with its `TAPEDECK_*` variable; every default comes from
//! `Config::default()`, written once in `src/config.rs`.
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::ValueEnum;
use tapedeck::Config;

use crate::values::{
    Bytes, HttpListen, Period, parse_advertised, parse_chunk_size, parse_commit_interval,
    parse_duration, parse_http_listen, parse_listen, parse_positive_duration, parse_positive_size,
};

/// The flags of `tapedeck serve`.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on: an IP address or a host name, with a port.
    #[arg(long, env = "TAPEDECK_LISTEN", default_value_t = Config::default().server.listen,
          value_parser = parse_listen)]
    pub(super) listen: SocketAddr,
    /// Address of the HTTP face (the Durable Streams protocol, for browsers and plain-HTTP
    /// agents), or `off`.
    #[arg(long, env = "TAPEDECK_HTTP_LISTEN", value_parser = parse_http_listen,
          default_value_t = HttpListen(Config::default().server.http_listen))]
    pub(super) http_listen: HttpListen,
    /// Longest a request to the HTTP face may take to arrive, its head and then its body
    /// (more than zero); an idle keep-alive connection is closed after it too.
    #[arg(long, env = "TAPEDECK_HTTP_REQUEST_TIMEOUT", value_parser = parse_positive_duration,
          default_value_t = Period(Config::default().http.bounds.request_timeout))]
    pub(super) http_request_timeout: Period,
    /// Most connections the HTTP face serves at once (more than zero); one more is answered
    /// 503 and closed.
    #[arg(long, env = "TAPEDECK_HTTP_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u32).range(1..),
          default_value_t = Config::default().http.bounds.max_connections as u32)]
    pub(super) http_max_connections: u32,
    /// Where the HTTP face serves streams: `{prefix}/{path}` (e.g. /streams for TanStack AI's
    /// adapter).
    #[arg(long, env = "TAPEDECK_HTTP_PATH_PREFIX", value_parser = tapedeck::http::StreamPrefix::parse,
          default_value = tapedeck::http::DEFAULT_STREAM_PREFIX)]
    pub(super) http_path_prefix: tapedeck::http::StreamPrefix,
    /// Directory of the database file.
    #[arg(long, env = "TAPEDECK_DATA_DIR", default_value_os_t = Config::default().server.data_dir)]
    pub(super) data_dir: PathBuf,
    /// How long finished recordings stay replayable (e.g. 30m, 1.5h, 90s, 2d).
    #[arg(long, env = "TAPEDECK_RETENTION", value_parser = parse_duration,
          default_value_t = Period(Config::default().store.retention))]
    pub(super) retention: Period,
    /// Longest retention a producer may choose for its own recording (retention_seconds).
    #[arg(long, env = "TAPEDECK_MAX_RETENTION", value_parser = parse_duration,
          default_value_t = Period(Config::default().recorder.max_retention))]
    pub(super) max_retention: Period,
    /// How long a collected recording's tombstone answers "expired" instead of "unknown".
    #[arg(long, env = "TAPEDECK_TOMBSTONE_RETENTION", value_parser = parse_duration,
          default_value_t = Period(Config::default().store.tombstone_retention))]
    pub(super) tombstone_retention: Period,
    /// How long a recording whose producer went away waits for it to resume before it ends as
    /// interrupted (0 ends it at once).
    #[arg(long, env = "TAPEDECK_PRODUCER_GRACE", value_parser = parse_duration,
          default_value_t = Period(Config::default().recorder.producer_grace))]
    pub(super) producer_grace: Period,
    /// What a new recording does to a conversation's live one: supersede it, or be refused
    /// with ALREADY_EXISTS.
    #[arg(long, env = "TAPEDECK_ON_CONFLICT", value_enum, default_value_t = Conflict::Supersede)]
    pub(super) on_conflict: Conflict,
    /// How often expired and idle recordings are collected (more than zero).
    #[arg(long, env = "TAPEDECK_GC_INTERVAL", value_parser = parse_positive_duration,
          default_value_t = Period(Config::default().recorder.gc_interval))]
    pub(super) gc_interval: Period,
    /// A live recording with no token for this long is ended as interrupted (more than zero).
    #[arg(long, env = "TAPEDECK_IDLE_TIMEOUT", value_parser = parse_positive_duration,
          default_value_t = Period(Config::default().recorder.idle_timeout))]
    pub(super) idle_timeout: Period,
    /// Largest chunk (e.g. 1MiB, 512KiB, 4096; KB and MB are powers of 1000).
    #[arg(long, env = "TAPEDECK_MAX_CHUNK_BYTES", value_parser = parse_chunk_size,
          default_value_t = Bytes(Config::default().recorder.max_chunk_bytes as u64))]
    pub(super) max_chunk_bytes: Bytes,
    /// Largest recording.
    #[arg(long, env = "TAPEDECK_MAX_RECORDING_BYTES", value_parser = parse_positive_size,
          default_value_t = Bytes(Config::default().recorder.max_recording_bytes))]
    pub(super) max_recording_bytes: Bytes,
    /// Most recordings live at once (more than zero).
    #[arg(long, env = "TAPEDECK_MAX_LIVE_RECORDINGS",
          value_parser = clap::value_parser!(u32).range(1..),
          default_value_t = Config::default().recorder.max_live_recordings as u32)]
    pub(super) max_live_recordings: u32,
    /// Size of the write-ahead log that makes the next commit a checkpoint (redb synced, the
    /// log emptied); bounds what a restart after a crash replays.
    #[arg(long, env = "TAPEDECK_CHECKPOINT_SIZE", value_parser = parse_positive_size,
          default_value_t = Bytes(Config::default().store.checkpoint_bytes))]
    pub(super) checkpoint_size: Bytes,
    /// Memory redb keeps pages of the file in (its own cache; reads beyond it come from the
    /// OS page cache): more speeds up catch-up reads of recent recordings.
    #[arg(long, env = "TAPEDECK_CACHE_SIZE", value_parser = parse_positive_size,
          default_value_t = Bytes(Config::default().store.cache_bytes))]
    pub(super) cache_size: Bytes,
    /// Group commit: after a commit of several producers' tokens, the next one may wait for as
    /// many, for no longer than the last commit took and never past this long from its start,
    /// so each disk sync carries more (less CPU and disk writes per token, at most one sync's
    /// time of latency). `0s` commits as soon as it can.
    #[arg(long, env = "TAPEDECK_COMMIT_INTERVAL", value_parser = parse_commit_interval,
          default_value_t = Period(Config::default().store.commit_interval))]
    pub(super) commit_interval: Period,
    /// How long shutdown waits for streams to end and the store to close.
    #[arg(long, env = "TAPEDECK_SHUTDOWN_TIMEOUT", value_parser = parse_duration,
          default_value_t = Period(Config::default().server.shutdown_timeout))]
    pub(super) shutdown_timeout: Period,
    /// Log format.
    #[arg(long, env = "TAPEDECK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(super) log_format: LogFormat,
    /// An API key of a trusted service, `name=secret` (repeatable; the env var takes a
    /// comma-separated list). Any credential turns access control on.
    #[arg(
        long = "api-key",
        env = "TAPEDECK_API_KEYS",
        value_name = "NAME=SECRET",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub(super) api_keys: Vec<String>,
    /// A file of API keys: one `name=secret` a line, `#` comments.
    #[arg(long, env = "TAPEDECK_API_KEYS_FILE")]
    pub(super) api_keys_file: Option<PathBuf>,
    /// Shared secret of HS256 grants (bearer tokens).
    #[arg(long, env = "TAPEDECK_JWT_SECRET", hide_env_values = true)]
    pub(super) jwt_secret: Option<String>,
    /// PEM public key of RS256, ES256 or EdDSA grants.
    #[arg(long, env = "TAPEDECK_JWT_PUBLIC_KEY")]
    pub(super) jwt_public_key: Option<PathBuf>,
    /// The issuer (`iss`) grants must name.
    #[arg(long, env = "TAPEDECK_JWT_ISSUER")]
    pub(super) jwt_issuer: Option<String>,
    /// The audience (`aud`) grants must name.
    #[arg(long, env = "TAPEDECK_JWT_AUDIENCE")]
    pub(super) jwt_audience: Option<String>,
    /// Serve a non-loopback address with no credentials configured (anyone who can reach the
    /// port may then read and cancel every recording).
    #[arg(long, env = "TAPEDECK_ALLOW_UNAUTHENTICATED")]
    pub(super) allow_unauthenticated: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9091). Default off.
    #[arg(long, env = "TAPEDECK_METRICS_LISTEN", value_parser = parse_listen)]
    pub(super) metrics_listen: Option<SocketAddr>,
    /// Redis of the locator, `redis://[user:password@]host:port[/db]`: runs this instance as
    /// one of several behind one address (with --advertised-address).
    #[arg(long, env = "TAPEDECK_REDIS_URL", hide_env_values = true)]
    pub(super) redis_url: Option<String>,
    /// The host:port other instances redirect clients to (required with --redis-url).
    #[arg(long, env = "TAPEDECK_ADVERTISED_ADDRESS", value_parser = parse_advertised)]
    pub(super) advertised_address: Option<String>,
    /// This instance's HTTP face as other instances reach it, `host:port`: with it, an HTTP
    /// request about a stream another instance holds is passed to that instance's face (with
    /// --redis-url). Default: none (such a request is answered here: 404).
    #[arg(long, env = "TAPEDECK_ADVERTISED_HTTP_ADDRESS", value_parser = parse_advertised,
          requires = "redis_url")]
    pub(super) advertised_http_address: Option<String>,
    /// Seal ended recordings into an object store, `s3://BUCKET/PREFIX` (credentials, region
    /// and endpoint from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
    /// AWS_ENDPOINT_URL, AWS_ALLOW_HTTP) or `file:///PATH`, and serve from there what is not
    /// on local disk. Default off.
    #[arg(long, env = "TAPEDECK_OBJECT_STORE")]
    pub(super) object_store: Option<String>,
    /// With an `s3://` --object-store and no credentials in the environment, ask this
    /// machine's instance metadata service (an EC2 instance role) for them. Default off: a
    /// start without credentials is refused.
    #[arg(
        long,
        env = "TAPEDECK_OBJECT_STORE_INSTANCE_CREDENTIALS",
        requires = "object_store"
    )]
    pub(super) object_store_instance_credentials: bool,
    /// How long a sealed recording's chunks stay on local disk once its copy is verified
    /// (0s drops them at once). Default: its whole retention.
    #[arg(long, env = "TAPEDECK_LOCAL_RETENTION", value_parser = parse_duration,
          requires = "object_store")]
    pub(super) local_retention: Option<Period>,
    /// This node's id in a replicated cluster (with --cluster-listen and --cluster-peers).
    /// Default off: a single node.
    #[arg(long, env = "TAPEDECK_NODE_ID", requires_all = ["cluster_listen", "cluster_peers"])]
    pub(super) node_id: Option<u64>,
    /// Where this node listens for the other nodes of its cluster, e.g. 0.0.0.0:7070.
    #[arg(long, env = "TAPEDECK_CLUSTER_LISTEN", value_parser = parse_listen,
          requires = "node_id")]
    pub(super) cluster_listen: Option<SocketAddr>,
    /// Every voter's cluster address, this node's included: `1=HOST:PORT,2=HOST:PORT,3=HOST:PORT`
    /// (3 or 5 voters). The same on every node.
    #[arg(long, env = "TAPEDECK_CLUSTER_PEERS", requires = "node_id")]
    pub(super) cluster_peers: Option<String>,
    /// Entries applied between two snapshots of a node's state; the log keeps as many before
    /// the last one. Default 50000.
    #[arg(long, env = "TAPEDECK_CLUSTER_SNAPSHOT_EVERY", requires = "node_id",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) cluster_snapshot_every: Option<u64>,
    /// PEM certificate chain: serve gRPC over TLS (with --tls-key).
    #[arg(long, env = "TAPEDECK_TLS_CERT", requires = "tls_key")]
    pub(super) tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "TAPEDECK_TLS_KEY", requires = "tls_cert")]
    pub(super) tls_key: Option<PathBuf>,
    /// PEM CA certificate: clients must present a certificate it signed (mutual TLS).
    #[arg(long, env = "TAPEDECK_TLS_CLIENT_CA", requires = "tls_cert")]
    pub(super) tls_client_ca: Option<PathBuf>,
}

/// `--on-conflict`, as the flag spells its values.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Conflict {
    /// End the live recording and start the new one.
    Supersede,
    /// Refuse the new one with ALREADY_EXISTS.
    Reject,
}

/// `--log-format`.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    /// One line of text per event.
    Text,
    /// One JSON object per event.
    Json,
}
