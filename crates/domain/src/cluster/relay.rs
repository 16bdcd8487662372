//! What a forwarded producer's handle (`forwarded`) and the task that runs its session
//! (`forwarded_session`) say to each other, and how the leader's answers read on this node.
use std::time::Duration;

use tokio::sync::oneshot;
use tonic::{Code, Status};

use crate::error::{Error, Kind, Result};
use crate::pb::cluster::{Ended, Produced, Stop, produced};
use crate::recorder::{Progress, Status as Lifecycle};

/// How long a session may look for a leader to go on with before it fails.
pub(super) const FAILOVER_WAIT: Duration = Duration::from_secs(15);
/// Messages waiting for the leader.
pub(super) const OUTGOING: usize = 256;

/// What the handle asks of the session's task.
pub(super) enum Command {
    /// Chunks' contents, in order, each with the byte offset just after it; `done` is told the
    /// last one's offset once it is committed (a `Record` call, answered once at its end,
    /// waits for none).
    Contents {
        contents: Vec<(String, u64)>,
        done: Option<oneshot::Sender<Result<u64>>>,
    },
    /// Completes (`Complete`) or lets go (`EndedWithoutComplete`) once everything sent is
    /// committed; answered with how the session ended.
    Finish(produced::Kind, oneshot::Sender<Result<Outcome>>),
    Detach(Produced),
}

/// How a session ended, as the leader told it.
#[derive(Debug, Clone)]
pub(super) struct Outcome {
    pub(super) stop: Stop,
    pub(super) progress: Progress,
    pub(super) message: Option<String>,
}

/// Whether a failed call to the leader may go on with the next one: the leader said it cannot
/// take it now, or the call itself failed. A status made here from a transport failure carries
/// its source (an HTTP/2 error is `INTERNAL` when a leader that is stopping tears down the
/// connection mid-call); one the leader sent has none.
pub(super) fn retriable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::DeadlineExceeded
    ) || std::error::Error::source(status).is_some()
}

/// The leader's refusal, as this node's error.
pub(super) fn refused(status: Status) -> Error {
    let kind = match status.code() {
        Code::InvalidArgument => Kind::InvalidArgument,
        Code::OutOfRange => Kind::OutOfRange,
        Code::NotFound => Kind::NotFound,
        Code::AlreadyExists => Kind::AlreadyExists,
        Code::FailedPrecondition => Kind::FailedPrecondition,
        Code::Aborted => Kind::Aborted,
        Code::ResourceExhausted => Kind::TooLarge,
        Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded | Code::Unknown => {
            Kind::Unavailable
        }
        Code::Unauthenticated => Kind::Unauthenticated,
        Code::PermissionDenied => Kind::PermissionDenied,
        _ => Kind::Internal,
    };
    Error::LeaderRefused {
        kind,
        message: status.message().to_string(),
    }
}

/// Whether the leader ended a session for its own sake, not the recording's: it is stopping,
/// or a commit failed there (it then ends the recording `failed` in its memory alone: in the
/// cluster the recording is still live). The next leader can take the session over. Only for
/// a session whose producer did not ask to end it.
pub(super) fn leader_gave_up(outcome: &Outcome) -> bool {
    match outcome.stop {
        Stop::ShuttingDown => true,
        Stop::Ended => outcome.progress.status == Lifecycle::Failed,
        _ => false,
    }
}

/// How a session ended, from the leader's `Ended`.
pub(super) fn outcome(end: &Ended) -> Outcome {
    let status = [
        Lifecycle::Recording,
        Lifecycle::Completed,
        Lifecycle::Cancelled,
        Lifecycle::Interrupted,
        Lifecycle::Failed,
        Lifecycle::Superseded,
        Lifecycle::Deleted,
    ]
    .into_iter()
    .find(|status| status.as_str() == end.status)
    .unwrap_or(Lifecycle::Failed);
    Outcome {
        stop: Stop::try_from(end.stop).unwrap_or(Stop::Ended),
        progress: Progress {
            chunks: end.chunks,
            bytes: end.bytes,
            status,
        },
        message: end.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_torn_down_is_tried_again_and_a_refusal_is_not() {
        // What tonic makes of a connection a stopping leader tore down mid-call.
        let torn = Status::from_error(Box::new(h2::Error::from(h2::Reason::PROTOCOL_ERROR)));
        assert_eq!(torn.code(), Code::Internal);
        assert!(retriable(&torn), "{torn:?}");
        assert!(retriable(&Status::unavailable("no leader yet")));
        // The leader's own answers.
        assert!(!retriable(&Status::internal("the commit failed")));
        assert!(!retriable(&Status::invalid_argument(
            "a session opens once"
        )));
    }
}
