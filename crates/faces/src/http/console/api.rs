//! The console's JSON, each call with the caller's credential (headers only: the console never
//! puts one in a URL):
//! - `GET recordings?status=&prefix=&page_token=&page_size=`: a page of recordings in start
//!   order (every instance's, with several), only those the credential may read; `prefix`
//!   keeps the page's rows whose id starts with it, so a page may come back short, with a
//!   token to go on;
//! - `GET recordings/{id}`, `DELETE recordings/{id}`: one recording (or its tombstone), and
//!   its delete, made where it is held;
//! - `GET overview`: the live recordings, every metric in the Prometheus text format (what
//!   `/metrics` serves) and the instances; it needs an API key when access control is on;
//! - `GET changes`: an SSE stream with a `changed` event whenever recordings start, end or
//!   are deleted (on a node of a cluster: when it applies commits, at most every 2 s), and a
//!   `tick` every 2 s while any is live here (their lengths grow), so the list is fetched
//!   again when it changes, not polled.
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::access::{Operation, Principal};
use crate::grpc::all_instances;
use crate::http::HttpFace;
use crate::http::access;
use crate::http::failure::failed;
use crate::http::reply::Reply;
use crate::id::ConversationId;
use crate::recorder::Tombstone;
use crate::recorder::{Found, Location, RecordingInfo, Status};

/// Rows in a console page unless it asks for another number.
const PAGE_SIZE: usize = 50;
/// How often `changes` says so while recordings are live.
const TICK: Duration = Duration::from_secs(2);
/// A comment goes out after this long without an event, so idle proxies keep the stream.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Changes that come together are told once, this long after the first.
const SETTLE: Duration = Duration::from_millis(200);

fn principal(face: &HttpFace, headers: &HeaderMap) -> Result<Principal, Reply> {
    access::principal(&face.guard, headers, None)
}

fn parse_id(id: &str) -> Result<ConversationId, Reply> {
    ConversationId::parse(id.as_bytes())
        .map_err(|err| Reply::refuse(StatusCode::BAD_REQUEST, format!("bad recording id: {err}")))
}

fn json_reply(code: StatusCode, value: &Value) -> Reply {
    Reply::new(code)
        .content_type("application/json")
        .cache("no-store")
        .bytes(Bytes::from(value.to_string()))
}

fn respond(replied: Result<Reply, Reply>) -> Response {
    match replied {
        Ok(reply) | Err(reply) => reply.into_response(),
    }
}

/// The query of a page of recordings.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
    status: Option<String>,
    prefix: Option<String>,
    page_token: Option<String>,
    page_size: Option<usize>,
}

/// `GET /console/api/recordings`.
pub(super) async fn list(
    State(face): State<Arc<HttpFace>>,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    respond(list_page(&face, query, &headers).await)
}

async fn list_page(face: &HttpFace, query: ListQuery, headers: &HeaderMap) -> Result<Reply, Reply> {
    let principal = principal(face, headers)?;
    let only = match query.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(name) => Some(status_named(name).ok_or_else(|| {
            Reply::refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "status must be recording, completed, cancelled, interrupted, failed or \
                     deleted; got {name:?}"
                ),
            )
        })?),
    };
    let token = query.page_token.as_deref().filter(|t| !t.is_empty());
    let page_size = query.page_size.unwrap_or(PAGE_SIZE);
    let recorder = &face.recorder;
    let (rows, next, unanswered) = match &face.locator {
        Some(locator) => {
            let page = all_instances::list(locator, recorder, token, page_size, only).await;
            let page = page.map_err(failed)?;
            (page.rows, page.next_page_token, page.unanswered)
        }
        None => {
            let listing = recorder
                .list(token, page_size, only)
                .await
                .map_err(failed)?;
            let rows = listing.recordings.into_iter();
            let rows = rows.map(|info| (info, String::new())).collect();
            (rows, listing.next_page_token, Vec::new())
        }
    };
    let prefix = query.prefix.unwrap_or_default();
    let mut recordings = Vec::new();
    for (info, owner) in rows {
        let Ok(id) = ConversationId::parse(&info.meta.original_id) else {
            continue;
        };
        if !info.meta.original_id.starts_with(prefix.as_bytes())
            || !principal.may(Operation::Replay, &id)
        {
            continue;
        }
        recordings.push(face.row(&id, &info, &owner).await);
    }
    let page = json!({
        "recordings": recordings,
        "next_page_token": next,
        "unanswered_instances": unanswered,
    });
    Ok(json_reply(StatusCode::OK, &page))
}

/// The status a filter names.
fn status_named(name: &str) -> Option<Status> {
    [
        Status::Recording,
        Status::Completed,
        Status::Cancelled,
        Status::Interrupted,
        Status::Failed,
        Status::Deleted,
    ]
    .into_iter()
    .find(|status| status.as_str() == name)
}

impl HttpFace {
    /// One recording as the console shows it; a stream made over HTTP here with its content
    /// type and its idempotent producers' epoch and sequence.
    async fn row(&self, id: &ConversationId, info: &RecordingInfo, owner: &str) -> Value {
        let meta = &info.meta;
        let mut row = json!({
            "id": String::from_utf8_lossy(&meta.original_id),
            "status": meta.status.as_str(),
            "created_ms": meta.created_ms,
            "finished_ms": meta.finished_ms,
            "bytes": meta.byte_len,
            "chunks": meta.chunk_count,
            "readers": info.readers,
            "producer_attached": info.producer_attached,
            "end_message": info.end_message,
            "location": match info.location {
                Location::Local => "local",
                Location::LocalAndObjectStore => "local and object store",
                Location::ObjectStore => "object store",
            },
            "owner": owner,
        });
        let here = owner.is_empty() || self.locator.as_ref().is_some_and(|l| l.address() == owner);
        if here && let Ok(Some(stream)) = self.recorder.stream_row(id).await {
            row["content_type"] = stream.content_type.into();
            let producers: Vec<Value> = (stream.producers.iter())
                .map(|(name, state)| json!({"id": name, "epoch": state.epoch, "seq": state.seq}))
                .collect();
            row["producers"] = producers.into();
        }
        row
    }
}

/// `GET /console/api/recordings/{id}`.
pub(super) async fn one(
    State(face): State<Arc<HttpFace>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    respond(one_recording(&face, &id, &headers).await)
}

async fn one_recording(face: &HttpFace, id: &str, headers: &HeaderMap) -> Result<Reply, Reply> {
    let principal = principal(face, headers)?;
    let id = parse_id(id)?;
    access::authorize(&principal, Operation::Replay, &id)?;
    let answer = match face.found_anywhere(&id).await? {
        Found::Recording(info) => json!({"recording": face.row(&id, &info, "").await}),
        Found::Gone(tombstone) => json!({"tombstone": tombstone_json(&tombstone)}),
        Found::Unknown => {
            return Err(Reply::refuse(
                StatusCode::NOT_FOUND,
                format!("no recording of {id} is known"),
            ));
        }
    };
    Ok(json_reply(StatusCode::OK, &answer))
}

fn tombstone_json(tombstone: &Tombstone) -> Value {
    json!({
        "id": String::from_utf8_lossy(&tombstone.original_id),
        "gone": match tombstone.gone {
            crate::recorder::Gone::Expired => "expired",
            crate::recorder::Gone::Deleted => "deleted",
        },
        "status": tombstone.status.as_str(),
        "created_ms": tombstone.created_ms,
        "finished_ms": tombstone.finished_ms,
        "collected_ms": tombstone.collected_ms,
    })
}

/// `DELETE /console/api/recordings/{id}`.
pub(super) async fn delete(
    State(face): State<Arc<HttpFace>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    respond(delete_recording(&face, &id, &headers).await)
}

async fn delete_recording(face: &HttpFace, id: &str, headers: &HeaderMap) -> Result<Reply, Reply> {
    let principal = principal(face, headers)?;
    let id = parse_id(id)?;
    access::authorize(&principal, Operation::Delete, &id)?;
    let deleted = face.delete_anywhere(&id).await?;
    Ok(json_reply(StatusCode::OK, &json!({"deleted": deleted})))
}

/// `GET /console/api/overview`.
pub(super) async fn overview(State(face): State<Arc<HttpFace>>, headers: HeaderMap) -> Response {
    respond(overview_of(&face, &headers).await)
}

async fn overview_of(face: &HttpFace, headers: &HeaderMap) -> Result<Reply, Reply> {
    if let Principal::Caller { key: None, .. } = principal(face, headers)? {
        return Err(Reply::refuse(
            StatusCode::FORBIDDEN,
            "the overview is for operators: it needs an API key",
        ));
    }
    let mut instances = Vec::new();
    if let Some(locator) = &face.locator {
        instances.push(json!({"address": locator.address(), "here": true, "running": true}));
        for (_, address) in locator.other_instances().await.unwrap_or_default() {
            instances.push(json!({"address": address, "here": false, "running": true}));
        }
    }
    let overview = json!({
        "live": face.recorder.live_count(),
        "disk_full": face.recorder.disk_full(),
        "instances": instances,
        "metrics": crate::metrics::rendered(),
    });
    Ok(json_reply(StatusCode::OK, &overview))
}

/// `GET /console/api/changes`.
pub(super) async fn changes(State(face): State<Arc<HttpFace>>, headers: HeaderMap) -> Response {
    if let Err(refused) = principal(&face, &headers) {
        return refused.into_response();
    }
    let count = face.recorder.changes().follow();
    // On a node of a cluster, recordings start and end where their producers are: what this
    // node applies says so (every commit is an entry; told at most once per tick).
    let applied = face.recorder.applied_entries();
    let stop = face.recorder.stopping().clone();
    // The first event goes out at once: the page fetches the list when its stream opens.
    let state = (true, count, applied);
    let events = futures::stream::unfold(state, move |(first, mut count, mut applied)| {
        let stop = stop.clone();
        let face = face.clone();
        async move {
            if first {
                count.borrow_and_update();
                let sent = Ok::<_, std::convert::Infallible>(event("changed"));
                return Some((sent, (false, count, applied)));
            }
            let live = face.recorder.live_count() > 0;
            let tick = async {
                match live {
                    true => tokio::time::sleep(TICK).await,
                    false => std::future::pending().await,
                }
            };
            let entry = async {
                match applied.as_mut() {
                    Some(applied) => applied.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            let sent = tokio::select! {
                () = stop.cancelled() => return None,
                changed = count.changed() => {
                    changed.ok()?;
                    tokio::time::sleep(SETTLE).await;
                    count.borrow_and_update();
                    event("changed")
                }
                () = tick => event("tick"),
                open = entry => {
                    if !open {
                        return None;
                    }
                    tokio::time::sleep(TICK).await;
                    if let Some(applied) = applied.as_mut() {
                        applied.borrow_and_update();
                    }
                    event("changed")
                }
                () = tokio::time::sleep(KEEPALIVE) => Bytes::from_static(b": keepalive\n\n"),
            };
            Some((Ok(sent), (false, count, applied)))
        }
    });
    Reply::new(StatusCode::OK)
        .content_type("text/event-stream")
        .cache("no-cache")
        .body(Body::from_stream(events))
        .into_response()
}

fn event(name: &str) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {{}}\n\n"))
}
