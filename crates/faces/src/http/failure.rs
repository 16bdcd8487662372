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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::response::IntoResponse;

    use super::*;

    /// A log sink the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_500_is_logged_with_the_request_and_its_detail_kept_from_the_client() {
        let log = Captured::default();
        let sink = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .finish();
        let reply = tracing::subscriber::with_default(subscriber, || {
            // As `dispatch` wraps every request.
            let _request = tracing::error_span!("request", method = "GET", path = "c1").entered();
            failed(Error::Corrupt {
                detail: "chunk 7 of c1 is missing".into(),
            })
        });
        let reply = reply.into_response();
        assert_eq!(reply.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(reply.into_body(), 1024).await.unwrap();
        assert!(!String::from_utf8_lossy(&body).contains("chunk 7"));
        let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(log.contains("HTTP request failed"), "{log}");
        assert!(
            log.contains("method=\"GET\"") || log.contains("method=GET"),
            "{log}"
        );
        assert!(log.contains("chunk 7 of c1 is missing"), "{log}");
    }
}
