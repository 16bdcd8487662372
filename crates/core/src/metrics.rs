//! Metric names and their descriptions, in one place (the gauges' sampler is the recorder's
//! `gauges`, next to what it samples).
//! Values are recorded with the `metrics` crate's macros, which do nothing until the binary
//! installs the Prometheus exporter (`--metrics-listen`).
use std::sync::OnceLock;

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::PrometheusHandle;

/// The installed exporter's handle, if the binary installed one.
static EXPORTER: OnceLock<PrometheusHandle> = OnceLock::new();

/// Keeps the installed exporter's `handle`, for [`rendered`].
pub fn keep_handle(handle: PrometheusHandle) {
    let _ = EXPORTER.set(handle);
}

/// Every metric now, in the Prometheus text format (what `/metrics` serves); `None` when no
/// exporter is installed (a server embedded in a test).
pub fn rendered() -> Option<String> {
    EXPORTER.get().map(PrometheusHandle::render)
}

/// gRPC calls started (go-grpc-prometheus).
pub const GRPC_STARTED: &str = "grpc_server_started_total";
/// gRPC calls finished, by `grpc_code` (go-grpc-prometheus).
pub const GRPC_HANDLED: &str = "grpc_server_handled_total";
/// Time from a call's start to its status (go-grpc-prometheus).
pub const GRPC_HANDLING_SECONDS: &str = "grpc_server_handling_seconds";
/// Request messages received (go-grpc-prometheus).
pub const GRPC_MSG_RECEIVED: &str = "grpc_server_msg_received_total";
/// Response messages sent (go-grpc-prometheus).
pub const GRPC_MSG_SENT: &str = "grpc_server_msg_sent_total";

/// HTTP requests answered, by `method` and `code` (the HTTP status).
pub const HTTP_REQUESTS: &str = "tapedeck_http_requests_total";
/// Time from an HTTP request's arrival to its response's head.
pub const HTTP_REQUEST_SECONDS: &str = "tapedeck_http_request_duration_seconds";
/// SSE and long-poll readers open now, by `kind`.
pub const HTTP_OPEN_READERS: &str = "tapedeck_http_open_readers";
/// Bytes of HTTP response bodies sent.
pub const HTTP_SENT_BYTES: &str = "tapedeck_http_sent_bytes_total";
/// SSE readers cut for not taking an event within `--http-request-timeout`.
pub const HTTP_SLOW_READERS_CUT: &str = "tapedeck_http_slow_readers_cut_total";

/// Recordings live now.
pub const LIVE_RECORDINGS: &str = "tapedeck_live_recordings";
/// Producers of live recordings, by `state`: `attached` or `detached`.
pub const PRODUCERS: &str = "tapedeck_producers";
/// Replays following a live recording now.
pub const LIVE_REPLAYS: &str = "tapedeck_live_replays";
/// Chunks (tokens) committed.
pub const APPENDED_TOKENS: &str = "tapedeck_appended_tokens_total";
/// UTF-8 bytes committed.
pub const APPENDED_BYTES: &str = "tapedeck_appended_bytes_total";
/// Write transactions committed.
pub const COMMITS: &str = "tapedeck_commits_total";
/// Ops per commit.
pub const COMMIT_BATCH_OPS: &str = "tapedeck_commit_batch_ops";
/// Time of a commit's durable write (its log write and sync and redb's commit, or a checkpoint).
pub const COMMIT_FSYNC_SECONDS: &str = "tapedeck_commit_fsync_seconds";
/// Checkpoints: redb made durable, the write-ahead log emptied.
pub const CHECKPOINTS: &str = "tapedeck_checkpoints_total";
/// Time of each checkpoint.
pub const CHECKPOINT_SECONDS: &str = "tapedeck_checkpoint_seconds";
/// Bytes in the write-ahead log: what a restart after a crash would replay.
pub const WAL_BYTES: &str = "tapedeck_wal_bytes";
/// Chunks in the journal (in memory and the log) not yet folded into `chunks`.
pub const JOURNAL_BACKLOG: &str = "tapedeck_journal_backlog_entries";
/// Sweeper runs.
pub const SWEEPS: &str = "tapedeck_sweeper_runs_total";
/// Recordings the sweeper deleted (their retention passed).
pub const SWEPT_RECORDINGS: &str = "tapedeck_sweeper_deleted_recordings_total";
/// Tombstones the sweeper forgot.
pub const TOMBSTONES_FORGOTTEN: &str = "tapedeck_tombstones_forgotten_total";
/// Recordings deleted through the management API (each leaves a tombstone).
pub const DELETED_RECORDINGS: &str = "tapedeck_deleted_recordings_total";
/// Size of the database file.
pub const FILE_BYTES: &str = "tapedeck_database_file_bytes";
/// 1 while the disk is full (new recordings refused), else 0.
pub const DISK_FULL: &str = "tapedeck_disk_full";
/// Calls refused by access control, by `reason`: `unauthenticated` or `permission_denied`.
pub const AUTH_REFUSALS: &str = "tapedeck_auth_refusals_total";
/// Gauge.
pub const SEAL_BACKLOG: &str = "tapedeck_seal_backlog";
/// Counter.
pub const SEALED_RECORDINGS: &str = "tapedeck_sealed_recordings_total";
/// Counter.
pub const SEALED_BYTES: &str = "tapedeck_sealed_bytes_total";
/// Counter.
pub const SEAL_FAILURES: &str = "tapedeck_seal_failures_total";
/// Counter.
pub const LOCAL_COPIES_DROPPED: &str = "tapedeck_local_copies_dropped_total";
/// Counter.
pub const OBJECT_STORE_COLLECTED: &str = "tapedeck_object_store_collected_total";
/// Gauge: the cluster's leader as this node knows it (0: none known).
pub const CLUSTER_LEADER: &str = "tapedeck_cluster_leader";
/// Gauge.
pub const CLUSTER_TERM: &str = "tapedeck_cluster_term";
/// Gauge.
pub const CLUSTER_LAST_LOG_INDEX: &str = "tapedeck_cluster_last_log_index";
/// Gauge.
pub const CLUSTER_APPLIED_INDEX: &str = "tapedeck_cluster_applied_index";
/// Gauge: 1 while this node leads, else 0.
pub const CLUSTER_LEADING: &str = "tapedeck_cluster_leading";
/// Gauge, by `node`; on the leader only.
pub const CLUSTER_NODE_LAG: &str = "tapedeck_cluster_node_lag";
/// Gauge, by `node`, 1 or 0; on the leader only.
pub const CLUSTER_NODE_HEALTHY: &str = "tapedeck_cluster_node_healthy";

/// Buckets of every `_seconds` histogram: 100 µs to 30 s.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];
/// Buckets of the batch-size histogram.
pub const OPS_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// Describes every metric to the installed recorder (help text and unit), and starts the
/// counters that carry no label at 0: a dashboard's `rate()` of a counter that has not
/// counted yet (no seal failed) shows 0, not "no data".
pub fn describe() {
    for counter in [
        APPENDED_TOKENS,
        APPENDED_BYTES,
        COMMITS,
        CHECKPOINTS,
        SWEEPS,
        SWEPT_RECORDINGS,
        TOMBSTONES_FORGOTTEN,
        DELETED_RECORDINGS,
        SEALED_RECORDINGS,
        SEALED_BYTES,
        SEAL_FAILURES,
        LOCAL_COPIES_DROPPED,
        OBJECT_STORE_COLLECTED,
        HTTP_SLOW_READERS_CUT,
    ] {
        metrics::counter!(counter).increment(0);
    }
    describe_counter!(GRPC_STARTED, "RPCs started on the server.");
    describe_counter!(GRPC_HANDLED, "RPCs completed on the server, by code.");
    describe_histogram!(
        GRPC_HANDLING_SECONDS,
        Unit::Seconds,
        "Time from an RPC's start until the server sent its status."
    );
    describe_counter!(
        GRPC_MSG_RECEIVED,
        "RPC stream messages received by the server."
    );
    describe_counter!(GRPC_MSG_SENT, "gRPC stream messages sent by the server.");
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by method and status code."
    );
    describe_histogram!(
        HTTP_REQUEST_SECONDS,
        Unit::Seconds,
        "Time from an HTTP request's arrival to its response's head (a long-poll's wait included)."
    );
    describe_gauge!(HTTP_OPEN_READERS, "SSE and long-poll readers open now.");
    describe_counter!(
        HTTP_SENT_BYTES,
        Unit::Bytes,
        "Bytes of HTTP response bodies sent."
    );
    describe_counter!(
        HTTP_SLOW_READERS_CUT,
        "SSE readers cut for not taking an event within --http-request-timeout."
    );
    describe_gauge!(LIVE_RECORDINGS, "Recordings live now.");
    describe_gauge!(
        PRODUCERS,
        "Producers of live recordings, attached or detached."
    );
    describe_gauge!(LIVE_REPLAYS, "Replays following a live recording now.");
    describe_counter!(APPENDED_TOKENS, "Chunks committed.");
    describe_counter!(APPENDED_BYTES, Unit::Bytes, "UTF-8 bytes committed.");
    describe_counter!(COMMITS, "Write transactions committed.");
    describe_histogram!(COMMIT_BATCH_OPS, "Ops per committed write transaction.");
    describe_histogram!(
        COMMIT_FSYNC_SECONDS,
        Unit::Seconds,
        "Time of each commit's durable write: its log write and sync and redb's commit, or a checkpoint."
    );
    describe_counter!(
        CHECKPOINTS,
        "Checkpoints: redb made durable and the write-ahead log emptied."
    );
    describe_histogram!(
        CHECKPOINT_SECONDS,
        Unit::Seconds,
        "Time of each checkpoint."
    );
    describe_gauge!(
        WAL_BYTES,
        Unit::Bytes,
        "Bytes in the write-ahead log: what a restart after a crash would replay."
    );
    describe_gauge!(
        JOURNAL_BACKLOG,
        "Chunks in the journal (held in memory, durable in the write-ahead log) not yet folded into the chunks table."
    );
    describe_counter!(SWEEPS, "Sweeper runs.");
    describe_counter!(SWEPT_RECORDINGS, "Recordings deleted by the sweeper.");
    describe_counter!(TOMBSTONES_FORGOTTEN, "Tombstones forgotten by the sweeper.");
    describe_counter!(DELETED_RECORDINGS, "Recordings deleted through the API.");
    describe_gauge!(FILE_BYTES, Unit::Bytes, "Size of the database file.");
    describe_gauge!(
        DISK_FULL,
        "1 while the disk is full and new recordings are refused."
    );
    describe_counter!(AUTH_REFUSALS, "Calls refused by access control, by reason.");
    describe_gauge!(
        SEAL_BACKLOG,
        "Ended recordings waiting to be sealed into the object store."
    );
    describe_counter!(
        SEALED_RECORDINGS,
        "Recordings sealed: uploaded, read back, verified and marked."
    );
    describe_counter!(
        SEALED_BYTES,
        Unit::Bytes,
        "Bytes of sealed objects written."
    );
    describe_counter!(
        SEAL_FAILURES,
        "Seal attempts that failed (the object store did not answer, or a copy did not verify); each is retried."
    );
    describe_counter!(
        LOCAL_COPIES_DROPPED,
        "Sealed recordings whose chunks left local disk after --local-retention."
    );
    describe_counter!(
        OBJECT_STORE_COLLECTED,
        "Sealed copies deleted from the object store by expiry."
    );
    describe_gauge!(
        CLUSTER_LEADER,
        "The id of the cluster's leader as this node knows it; 0 when it knows none."
    );
    describe_gauge!(
        CLUSTER_TERM,
        "The cluster's current term, as this node knows it."
    );
    describe_gauge!(CLUSTER_LAST_LOG_INDEX, "The last entry in this node's log.");
    describe_gauge!(
        CLUSTER_APPLIED_INDEX,
        "The last entry applied to this node's database."
    );
    describe_gauge!(
        CLUSTER_LEADING,
        "1 while this node leads its cluster, else 0."
    );
    describe_gauge!(
        CLUSTER_NODE_LAG,
        "On the leader: entries each node is behind its log."
    );
    describe_gauge!(
        CLUSTER_NODE_HEALTHY,
        "On the leader: 1 while a node answers it and holds its log within 1,000 entries."
    );
}
