//! The one mapping of tapedeck's errors to HTTP responses: each [`Kind`] to its status, with the
//! client's message as the body, `Retry-After` on a 503 and a challenge on a 401. A 500 is
//! logged, inside the span of the request it failed (its method and path).
use http::StatusCode;
use http::header::{RETRY_AFTER, WWW_AUTHENTICATE};

use super::reply::Reply;
use crate::error::{Error, Kind};

/// The HTTP status of each kind. No wildcard arm: a new kind does not compile until it is
/// mapped here.
pub(crate) fn status(kind: Kind) -> StatusCode {
    match kind {
        Kind::InvalidArgument | Kind::OutOfRange => StatusCode::BAD_REQUEST,
        Kind::NotFound => StatusCode::NOT_FOUND,
        // The protocol answers every clash with the stream's state with 409.
        Kind::AlreadyExists | Kind::FailedPrecondition | Kind::Aborted => StatusCode::CONFLICT,
        Kind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Kind::Busy => StatusCode::TOO_MANY_REQUESTS,
        Kind::DiskFull => StatusCode::INSUFFICIENT_STORAGE,
        Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
        Kind::PermissionDenied => StatusCode::FORBIDDEN,
        Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The reply that reports `err`: its kind's status and the message a client may read.
pub(crate) fn failed(err: Error) -> Reply {
    let kind = err.kind();
    let reply = Reply::refuse(status(kind), err.client_message());
    match kind {
        Kind::Internal => {
            // The client reads a pointer to this log line, not the detail.
            tracing::error!(error = %err, "HTTP request failed");
            reply
        }
        // Shutting down or changing hands: the restarted server (or another instance) takes
        // the retry.
        Kind::Unavailable => reply.header(RETRY_AFTER, "1"),
        Kind::Unauthenticated => reply.header(WWW_AUTHENTICATE, "Bearer"),
        _ => reply,
    }
}
