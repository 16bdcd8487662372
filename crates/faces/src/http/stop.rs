//! Stop over HTTP: `POST /v1/stop/{path}` cancels a live response, whichever face produces it,
//! for a caller who may cancel it (a writer grant, as gRPC Cancel asks). The route is outside
//! the Durable Streams protocol's paths, so it cannot collide with them.
//!
//! A gRPC producer is told `RECORD_STATUS_CANCELLED`, an HTTP producer's next append is
//! refused as cancelled, and readers see the stream end as cancelled. Like gRPC Cancel it is
//! idempotent and truthful: the JSON answer says whether this call stopped the response,
//! whether it had been stopped already, or how it had ended otherwise (409).
use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use tracing::Instrument;

use super::dispatch::Query;
use super::reply::{Replied, Reply};
use super::{HttpFace, access};
use crate::access::Operation;
use crate::id::ConversationId;
use crate::recorder::Gone;
use crate::recorder::{Found, Status};

/// `POST /v1/stop/{path}`.
pub(super) async fn stop(
    State(face): State<Arc<HttpFace>>,
    Path(path): Path<String>,
    request: Request,
) -> Response {
    let span = tracing::error_span!("request", method = "STOP", path = %path);
    match face.stop(&path, request).instrument(span).await {
        Ok(reply) | Err(reply) => reply.into_response(),
    }
}

/// What a stop found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// This call stopped it.
    Stopped,
    /// An earlier cancel had stopped it.
    AlreadyStopped,
    /// It had ended another way.
    AlreadyEnded,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Stopped => "stopped",
            Outcome::AlreadyStopped => "already_stopped",
            Outcome::AlreadyEnded => "already_ended",
        }
    }
}

impl HttpFace {
    async fn stop(&self, path: &str, request: Request) -> Replied {
        let id = ConversationId::parse(path.as_bytes()).map_err(|err| {
            Reply::refuse(StatusCode::BAD_REQUEST, format!("bad stream path: {err}"))
        })?;
        let query = Query::parse(request.uri().query())?;
        let principal = access::principal(&self.guard, request.headers(), query.token.as_deref())?;
        access::authorize(&principal, Operation::Cancel, &id)?;
        let status = match self.status_of(&id).await? {
            Some(status) => status,
            None => return Err(nothing_to_stop(path)),
        };
        let (outcome, status) = match status {
            Status::Cancelled => (Outcome::AlreadyStopped, status),
            status if !status.is_live() => (Outcome::AlreadyEnded, status),
            _ if self.cancel_anywhere(&id).await? => (Outcome::Stopped, Status::Cancelled),
            // It ended on its own between the look and the cancel: say how.
            _ => match self.status_of(&id).await? {
                Some(Status::Cancelled) => (Outcome::AlreadyStopped, Status::Cancelled),
                Some(status) => (Outcome::AlreadyEnded, status),
                None => return Err(nothing_to_stop(path)),
            },
        };
        if outcome == Outcome::Stopped {
            tracing::info!(conversation = %id, "stopped over HTTP");
        }
        let code = match outcome {
            Outcome::AlreadyEnded => StatusCode::CONFLICT,
            Outcome::Stopped | Outcome::AlreadyStopped => StatusCode::OK,
        };
        let answer = serde_json::json!({
            "outcome": outcome.as_str(),
            "status": status.as_str(),
        });
        let reply = Reply::new(code)
            .content_type("application/json")
            .cache("no-store")
            .bytes(format!("{answer}\n").into());
        if code.is_success() {
            Ok(reply)
        } else {
            Err(reply)
        }
    }

    /// The status of conversation `id`'s latest recording (`deleted` for a deleted one's
    /// tombstone), asked of the instance that holds it; `None` when it was never recorded.
    async fn status_of(&self, id: &ConversationId) -> Result<Option<Status>, Reply> {
        Ok(match self.found_anywhere(id).await? {
            Found::Recording(info) => Some(info.meta.status),
            Found::Gone(tombstone) => match tombstone.gone {
                Gone::Deleted => Some(Status::Deleted),
                // Collected after its retention: how it had ended.
                Gone::Expired => Some(tombstone.status),
            },
            Found::Unknown => None,
        })
    }
}

fn nothing_to_stop(path: &str) -> Reply {
    Reply::refuse(
        StatusCode::NOT_FOUND,
        format!("nothing to stop: no response is recorded at {path}"),
    )
}
