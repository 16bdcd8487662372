//! The one error type of tapedeck: variants named after their cause, keeping the real source.
//! [`Error::kind`] classifies each one for both faces, which map a [`Kind`] to their own status
//! (`grpc::status`, `http::failure`); [`Error::client_message`] is the single place that decides
//! what a client may read; internal detail goes to the log.
use std::path::PathBuf;
use std::sync::Arc;

mod absence;
mod classify;
mod grpc;
mod setup;

pub use absence::Absence;
pub use classify::Kind;
pub use grpc::{REASON_METADATA, REDIRECT_METADATA, code};
pub use setup::Setup;

/// Result with tapedeck's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tapedeck, named after its cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A conversation id that is none of the accepted forms.
    #[error("invalid conversation_id: {reason}")]
    InvalidConversationId {
        /// What is wrong with it.
        reason: String,
    },
    /// The first message of a stream named no conversation.
    #[error("the first message of a stream must carry a conversation_id")]
    MissingConversationId,
    /// A later message named another conversation.
    #[error("conversation_id changed mid-stream; open a new stream for another conversation")]
    ConversationIdChanged,
    /// A chunk over `--max-chunk-bytes`.
    #[error("chunk of {size} bytes exceeds the limit of {max} bytes (--max-chunk-bytes)")]
    ChunkTooLarge {
        /// The chunk's size, in bytes.
        size: usize,
        /// The limit, in bytes.
        max: usize,
    },
    /// A recording that would grow over `--max-recording-bytes`.
    #[error(
        "recording would reach {size} bytes, over the limit of {max} bytes (--max-recording-bytes)"
    )]
    RecordingTooLarge {
        /// The size it would reach, in bytes.
        size: u64,
        /// The limit, in bytes.
        max: u64,
    },
    /// `--max-live-recordings` are live already.
    #[error("{max} recordings are already live, the limit (--max-live-recordings); retry later")]
    TooManyLiveRecordings {
        /// The limit.
        max: usize,
    },
    /// A check of more ids than one call takes.
    #[error("{count} conversation ids given; at most {max} per call")]
    TooManyIds {
        /// Ids given.
        count: usize,
        /// The most one call takes.
        max: usize,
    },
    /// Nothing recorded for the conversation, or it was collected or deleted.
    #[error("{}", absence::message(id, *why))]
    RecordingNotFound {
        /// The id as the caller sent it.
        id: String,
        /// Whether it never existed (as far as tapedeck remembers), expired or was deleted.
        why: Absence,
    },
    /// A new recording of a conversation that has a live one, under `--on-conflict reject`.
    #[error("a response is already being recorded for conversation {id}")]
    AlreadyRecording {
        /// The id as the caller sent it.
        id: String,
    },
    /// A resume (current API) of a recording another instance holds.
    #[error("conversation {id}'s recording is held by the instance at {address}; resume it there")]
    ResumeElsewhere {
        /// The id as the caller sent it.
        id: String,
        /// The owner's advertised address, `host:port`.
        address: String,
    },
    /// A legacy call about a recording another instance holds: the client follows the
    /// `x-resumer-redirect-*` metadata.
    #[error("conversation {id} is served by the instance at {address}")]
    Redirect {
        /// The id as the caller sent it.
        id: String,
        /// The owner's advertised address, `host:port`.
        address: String,
    },
    /// Another instance holds the conversation's recording and did not answer a call
    /// forwarded to it (a Get, a Delete): it is down, or cut off from Redis.
    #[error(
        "conversation {id}'s recording is held by the instance at {address}, which did not \
         answer; try again once it is back"
    )]
    OwnerUnreachable {
        /// The id as the caller sent it.
        id: String,
        /// The owner's advertised address, `host:port`.
        address: String,
    },
    /// A resume from beyond what is committed.
    #[error(
        "resume_from_offset {offset} is past the committed length of conversation {id}'s \
         recording, {committed} bytes; resend from offset {committed}"
    )]
    ResumePastEnd {
        /// The id as the caller sent it.
        id: String,
        /// The offset asked for.
        offset: u64,
        /// What is committed.
        committed: u64,
    },
    /// A resume of a recording its producer finished, or someone cancelled.
    #[error(
        "the recording of conversation {id} already ended as {status} ({bytes} bytes); \
         there is nothing to resume"
    )]
    AlreadyEnded {
        /// The id as the caller sent it.
        id: String,
        /// How it ended.
        status: crate::status::Status,
        /// Its length, in bytes.
        bytes: u64,
    },
    /// Resent text whose already-committed part ends inside a UTF-8 character.
    #[error(
        "resent text does not line up with the committed text: offset {offset} falls inside a \
         UTF-8 character; resend the same chunks as before"
    )]
    ResumeInsideCharacter {
        /// The committed length, inside the message's text.
        offset: u64,
    },
    /// A resume kept meeting a recording that was ending or starting.
    #[error("the recording of conversation {id} is changing hands; retry the resume shortly")]
    ResumeUnsettled {
        /// The id as the caller sent it.
        id: String,
    },
    /// Another producer resumed the recording; this one may store nothing more.
    #[error("superseded: another producer resumed this recording")]
    Fenced,
    /// A per-recording retention over `--max-retention`.
    #[error("retention_seconds {asked} is over the limit of {max} seconds (--max-retention)")]
    RetentionTooLong {
        /// Seconds asked for.
        asked: u64,
        /// The most allowed, in seconds.
        max: u64,
    },
    /// A page token this server did not hand out.
    #[error("page_token is not one this server handed out; start again without one")]
    BadPageToken,
    /// A status filter that names no status.
    #[error("status filter {value} is not a recording status")]
    BadStatusFilter {
        /// The value sent.
        value: i32,
    },
    /// A resume offset past the end of a finished recording.
    #[error("offset {offset} is past the end of the finished recording ({len} bytes)")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// The recording's length, in bytes.
        len: u64,
    },
    /// A resume offset that splits a UTF-8 character.
    #[error("offset {offset} is inside a UTF-8 character; resume from a character boundary")]
    OffsetInsideCharacter {
        /// The offset asked for.
        offset: u64,
    },
    /// A text read (a gRPC replay) of a byte stream.
    #[error(
        "the recording is a byte stream of content type {content_type}, not UTF-8 text; read it over HTTP"
    )]
    NotText {
        /// The stream's content type.
        content_type: String,
    },
    /// A text read (a gRPC replay) of a stream forked over HTTP.
    #[error(
        "the recording is a stream forked from another over HTTP; read it over HTTP, where its inherited bytes are stitched in"
    )]
    ForkedStream,
    /// A negative resume offset.
    #[error("offset {offset} is negative")]
    NegativeOffset {
        /// The offset asked for.
        offset: i64,
    },
    /// The call's credentials are missing or wrong.
    #[error("unauthenticated: {reason}")]
    Unauthenticated {
        /// Which credential, and what is wrong with it; never the credential itself.
        reason: String,
    },
    /// The caller's credentials do not allow this.
    #[error("{caller} may not {action} conversation {id}: that needs {needs}")]
    PermissionDenied {
        /// Who called: an API key's name, a grant's subject.
        caller: String,
        /// What it tried.
        action: &'static str,
        /// The conversation, as the caller sent it.
        id: String,
        /// The access that would be needed.
        needs: &'static str,
    },
    /// An offline tool cannot work on the database file.
    #[error("{reason}")]
    Offline {
        /// What is wrong, and what to do.
        reason: String,
    },
    /// The object store failed or did not answer; what only it holds cannot be read now.
    #[error(
        "the object store, which holds this recording, did not answer ({detail}); try again later"
    )]
    ObjectStoreUnavailable {
        /// What failed (never a credential).
        detail: String,
    },
    /// This node of a cluster cannot commit: it is not the leader, or no majority answers.
    #[error("{}", classify::no_quorum_message(*.leader, leader_address.as_deref()))]
    NoQuorum {
        /// The leader's node id, if this node knows one.
        leader: Option<u64>,
        /// The leader's cluster address, if known.
        leader_address: Option<String>,
    },
    /// The cluster's leader refused a call this node forwarded to it; `kind` is how it was
    /// refused, `message` what it said.
    #[error("{message}")]
    LeaderRefused {
        /// How the leader refused it.
        kind: crate::error::Kind,
        /// What the leader said.
        message: String,
    },
    /// A newer recording of the conversation replaced this one.
    #[error("the recording was superseded by a newer recording of the same conversation")]
    Superseded,
    /// The recording ended before this operation.
    #[error("the recording has already ended")]
    RecordingEnded,
    /// The server is shutting down, or the store is closed.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A database file of another schema version.
    #[error(
        "database {path} was written by schema version {found}; this build reads version {expected}"
    )]
    SchemaVersion {
        /// The database file.
        path: PathBuf,
        /// Its version.
        found: u64,
        /// The version this build reads.
        expected: u64,
    },
    /// redb refused to open the file.
    #[error(
        "cannot open database {path}: {source}; the file is damaged or is not a tapedeck \
         database: restore it from a backup, or move it away to start with an empty one"
    )]
    OpenDatabase {
        /// The database file.
        path: PathBuf,
        /// redb's reason.
        #[source]
        source: redb::DatabaseError,
    },
    /// The file opened, but reading or recovering it failed.
    #[error(
        "cannot open database {path}: {source}; the file is damaged or is not a tapedeck \
         database: restore it from a backup, or move it away to start with an empty one"
    )]
    DamagedDatabase {
        /// The database file.
        path: PathBuf,
        /// What failed while recovering it.
        #[source]
        source: Box<Error>,
    },
    /// redb panicked on the file: it cannot make sense of it.
    #[error(
        "cannot open database {path}: redb could not read it ({panic}); the file is damaged or \
         is not a tapedeck database: restore it from a backup, or move it away to start with an \
         empty one"
    )]
    UnreadableDatabase {
        /// The database file.
        path: PathBuf,
        /// redb's panic message.
        panic: String,
    },
    /// Another process holds the database file.
    #[error(
        "database {path} is in use by another process; stop it, or give this one another \
         --data-dir"
    )]
    DatabaseInUse {
        /// The database file.
        path: PathBuf,
    },
    /// The data directory cannot be used.
    #[error(
        "cannot use data directory {path}: {source}; make it a writable directory, or choose \
         another with --data-dir"
    )]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A write failed because the disk is full.
    #[error("the disk is full: {source}")]
    DiskFull {
        /// The failed write.
        #[source]
        source: std::io::Error,
    },
    /// The disk filled up earlier and has no room yet: what would grow the file is refused.
    #[error("the disk is full; new recordings are refused until space is freed")]
    StoreFull,
    /// redb failed.
    #[error("storage error: {0}")]
    Storage(#[source] redb::Error),
    /// The database could not be reopened after an I/O error.
    #[error("the database is unavailable: it could not be reopened after an I/O error")]
    DatabaseUnavailable,
    /// Stored data breaks one of tapedeck's invariants.
    #[error("stored data is inconsistent: {detail}")]
    Corrupt {
        /// Which invariant, and where.
        detail: String,
    },
    /// A stored value could not be decoded.
    #[error("stored {what} could not be decoded: {source}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// bincode's reason.
        #[source]
        source: bincode::error::DecodeError,
    },
    /// A value could not be encoded for storage.
    #[error("{what} could not be encoded: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// bincode's reason.
        #[source]
        source: bincode::error::EncodeError,
    },
    /// One failure, shared by every operation it failed (all the ops of a failed commit).
    #[error(transparent)]
    Shared(Arc<Error>),
    /// A snapshot of a node's state could not be written, or read back (installed).
    #[error("a snapshot of the cluster's state could not be {action}: {source}")]
    Snapshot {
        /// "written" or "read".
        action: &'static str,
        /// What failed, or why the bytes are not a snapshot.
        #[source]
        source: std::io::Error,
    },
    /// The commit pipeline's thread could not be started.
    #[error("cannot start the commit pipeline thread: {0}")]
    WriterThread(#[source] std::io::Error),
    /// An internal task (a blocking read, a producer's start) panicked or was cancelled.
    #[error("an internal task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// The server cannot be set up, or cannot go on: see [`Setup`].
    #[error(transparent)]
    Setup(#[from] Setup),
}
