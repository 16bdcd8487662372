//! The one error type of tapedeck, and the single place it becomes a gRPC status.
use std::path::PathBuf;

use tonic::{Code, Status};

/// Result with tapedeck's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tapedeck, named after its cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid conversation_id: {reason}")]
    InvalidConversationId { reason: String },
    #[error("the first message of a stream must carry a conversation_id")]
    MissingConversationId,
    #[error("conversation_id changed mid-stream; open a new stream for another conversation")]
    ConversationIdChanged,
    #[error("chunk of {size} bytes exceeds the limit of {max} bytes (--max-chunk-bytes)")]
    ChunkTooLarge { size: usize, max: usize },
    #[error(
        "recording would reach {size} bytes, over the limit of {max} bytes (--max-recording-bytes)"
    )]
    RecordingTooLarge { size: u64, max: u64 },
    #[error("{max} recordings are already live, the limit (--max-live-recordings); retry later")]
    TooManyLiveRecordings { max: usize },
    #[error("{count} conversation ids given; at most {max} per call")]
    TooManyIds { count: usize, max: usize },
    #[error("no recording for conversation {id}: never recorded, or already collected")]
    RecordingNotFound { id: String },
    #[error("offset {offset} is past the end of the finished recording ({len} bytes)")]
    OffsetOutOfRange { offset: u64, len: u64 },
    #[error("offset {offset} is inside a UTF-8 character; resume from a character boundary")]
    OffsetInsideCharacter { offset: u64 },
    #[error("offset {offset} is negative")]
    NegativeOffset { offset: i64 },
    #[error("the recording was superseded by a newer recording of the same conversation")]
    Superseded,
    #[error("the recording has already ended")]
    RecordingEnded,
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error(
        "database {path} was written by schema version {found}; this build reads version {expected}"
    )]
    SchemaVersion {
        path: PathBuf,
        found: u64,
        expected: u64,
    },
    #[error(
        "cannot open database {path}: {source}; the file is damaged or is not a tapedeck \
         database: restore it from a backup, or move it away to start with an empty one"
    )]
    OpenDatabase {
        path: PathBuf,
        #[source]
        source: redb::DatabaseError,
    },
    #[error(
        "database {path} is in use by another process; stop it, or give this one another \
         --data-dir"
    )]
    DatabaseInUse { path: PathBuf },
    #[error(
        "cannot use data directory {path}: {source}; make it a writable directory, or choose \
         another with --data-dir"
    )]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the disk is full: {0}")]
    DiskFull(String),
    #[error("storage error: {0}")]
    Storage(String),
    #[error("stored data could not be decoded: {0}")]
    Corrupt(String),
}

impl Error {
    /// Wraps any redb error, telling a full disk apart from other storage failures.
    pub(crate) fn storage(err: impl Into<redb::Error>) -> Self {
        let err: redb::Error = err.into();
        if let redb::Error::Io(io) = &err
            && io.kind() == std::io::ErrorKind::StorageFull
        {
            return Error::DiskFull(io.to_string());
        }
        Error::Storage(err.to_string())
    }

    /// The gRPC code DESIGN.md names for this error.
    pub fn code(&self) -> Code {
        match self {
            Error::InvalidConversationId { .. }
            | Error::MissingConversationId
            | Error::ConversationIdChanged
            | Error::TooManyIds { .. }
            | Error::OffsetInsideCharacter { .. }
            | Error::NegativeOffset { .. } => Code::InvalidArgument,
            Error::ChunkTooLarge { .. }
            | Error::RecordingTooLarge { .. }
            | Error::TooManyLiveRecordings { .. }
            | Error::DiskFull(_) => Code::ResourceExhausted,
            Error::RecordingNotFound { .. } => Code::NotFound,
            Error::OffsetOutOfRange { .. } => Code::OutOfRange,
            Error::Superseded | Error::RecordingEnded => Code::Aborted,
            Error::ShuttingDown => Code::Unavailable,
            Error::SchemaVersion { .. }
            | Error::OpenDatabase { .. }
            | Error::DatabaseInUse { .. }
            | Error::DataDir { .. }
            | Error::Storage(_)
            | Error::Corrupt(_) => Code::Internal,
        }
    }
}

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        let code = err.code();
        if code == Code::Internal {
            // Internal details go to the log; the client gets a stable, actionable message.
            tracing::error!(error = %err, "internal error");
            return Status::internal("internal storage error; see the server log");
        }
        Status::new(code, err.to_string())
    }
}
