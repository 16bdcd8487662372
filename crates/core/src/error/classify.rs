//! What an error is, whatever the transport that reports it: its [`Kind`], whether it is a
//! failure of the stored data, and what a client may read of it. Each face maps a kind to its
//! own status (`grpc::status`, `http::failure`), exhaustively.
use super::Error;

/// What a client reads in place of an internal error's detail.
const INTERNAL_MESSAGE: &str = "internal storage error; see the server log";
/// What a client reads when a write failed on a full disk.
const DISK_FULL_MESSAGE: &str = "the disk is full; recordings cannot grow until space is freed";

/// What kind of failure an [`Error`] is, independent of the face that reports it. Every face
/// maps every kind with a `match` that has no wildcard arm, so a new kind must be mapped on
/// both faces before the crate compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The request is malformed (an id, an offset, an argument): the caller must change it.
    InvalidArgument,
    /// An offset past the end of a finished recording.
    OutOfRange,
    /// No recording of the conversation: never recorded, collected or deleted.
    NotFound,
    /// What the request would create exists already.
    AlreadyExists,
    /// The recording's state does not allow the call: it ended, another instance holds it,
    /// it is not text.
    FailedPrecondition,
    /// The call lost to a concurrent change (superseded, fenced, ended meanwhile).
    Aborted,
    /// A chunk or a recording over its size limit.
    TooLarge,
    /// A limit on work under way is reached (live recordings): retry later.
    Busy,
    /// The disk is full: nothing may grow until space is freed.
    DiskFull,
    /// Not served here now (shutting down, changing hands, held by another instance): retry,
    /// here later or where the answer points.
    Unavailable,
    /// The call's credentials are missing or wrong.
    Unauthenticated,
    /// The caller's credentials do not allow the call.
    PermissionDenied,
    /// The server's own failure (storage, start-up, a task): its detail goes to the log only.
    Internal,
}

impl Error {
    /// Wraps any redb error, telling a full disk apart from other storage failures.
    pub fn storage(err: impl Into<redb::Error>) -> Self {
        match err.into() {
            redb::Error::Io(source) if source.kind() == std::io::ErrorKind::StorageFull => {
                Error::DiskFull { source }
            }
            err => Error::Storage(err),
        }
    }

    /// The error itself, looking through [`Error::Shared`].
    pub fn root(&self) -> &Error {
        match self {
            Error::Shared(inner) => inner.root(),
            other => other,
        }
    }

    /// Whether this is a failure of the stored data or of redb under it (as opposed to a
    /// refusal, a bad request or a failure elsewhere).
    pub fn is_storage(&self) -> bool {
        matches!(
            self.root(),
            Error::Storage(_)
                | Error::DatabaseUnavailable
                | Error::Corrupt { .. }
                | Error::Decode { .. }
                | Error::Encode { .. }
        )
    }

    /// The kind of this error, for every face. One arm per variant and no wildcard: a variant
    /// added to [`Error`] does not compile until it is classified here.
    pub fn kind(&self) -> Kind {
        match self {
            Error::InvalidConversationId { .. }
            | Error::MissingConversationId
            | Error::ConversationIdChanged
            | Error::TooManyIds { .. }
            | Error::OffsetInsideCharacter { .. }
            | Error::NegativeOffset { .. }
            | Error::ResumeInsideCharacter { .. }
            | Error::RetentionTooLong { .. }
            | Error::BadPageToken
            | Error::BadStatusFilter { .. } => Kind::InvalidArgument,
            Error::OffsetOutOfRange { .. } => Kind::OutOfRange,
            Error::RecordingNotFound { .. } => Kind::NotFound,
            Error::AlreadyRecording { .. } => Kind::AlreadyExists,
            Error::ResumePastEnd { .. }
            | Error::AlreadyEnded { .. }
            | Error::NotText { .. }
            | Error::ForkedStream
            | Error::ResumeElsewhere { .. } => Kind::FailedPrecondition,
            Error::Fenced | Error::Superseded | Error::RecordingEnded => Kind::Aborted,
            Error::ChunkTooLarge { .. } | Error::RecordingTooLarge { .. } => Kind::TooLarge,
            Error::TooManyLiveRecordings { .. } => Kind::Busy,
            Error::DiskFull { .. } | Error::StoreFull => Kind::DiskFull,
            Error::Redirect { .. }
            | Error::OwnerUnreachable { .. }
            | Error::ShuttingDown
            | Error::ResumeUnsettled { .. }
            | Error::ObjectStoreUnavailable { .. }
            | Error::NoQuorum { .. } => Kind::Unavailable,
            Error::Unauthenticated { .. } => Kind::Unauthenticated,
            Error::PermissionDenied { .. } => Kind::PermissionDenied,
            Error::Shared(inner) => inner.kind(),
            Error::LeaderRefused { kind, .. } => *kind,
            Error::SchemaVersion { .. }
            | Error::OpenDatabase { .. }
            | Error::DamagedDatabase { .. }
            | Error::UnreadableDatabase { .. }
            | Error::DatabaseInUse { .. }
            | Error::DataDir { .. }
            | Error::Storage(_)
            | Error::DatabaseUnavailable
            | Error::Corrupt { .. }
            | Error::Decode { .. }
            | Error::Encode { .. }
            | Error::Snapshot { .. }
            | Error::WriterThread(_)
            | Error::Task(_)
            | Error::Offline { .. }
            | Error::Setup(_) => Kind::Internal,
        }
    }

    /// The text a client may read: the message itself for what the client can act on, a
    /// fixed pointer to the server log for internal failures. Every face, and every stored end
    /// message, uses this.
    pub fn client_message(&self) -> String {
        match self.root() {
            // The io error's own text (an errno) is internal detail.
            Error::DiskFull { .. } => DISK_FULL_MESSAGE.to_string(),
            err if err.kind() == Kind::Internal => INTERNAL_MESSAGE.to_string(),
            err => err.to_string(),
        }
    }
}

/// What a client is told when this node cannot commit: who leads, if anyone is known to.
pub(super) fn no_quorum_message(leader: Option<u64>, address: Option<&str>) -> String {
    match (leader, address) {
        (Some(id), Some(address)) => format!(
            "this node cannot commit: node {id} (cluster address {address}) leads the cluster, \
             and this node does not or could not reach it; retry on node {id}, or here later"
        ),
        (Some(id), None) => format!(
            "this node cannot commit: node {id} leads the cluster, and this node does not or \
             could not reach it; retry on node {id}, or here later"
        ),
        (None, _) => "this node cannot commit: the cluster has no leader a majority agrees on \
             (too many nodes are down or cut off); retry when they are back"
            .to_string(),
    }
}
