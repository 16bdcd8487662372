//! Messages between instances, over Redis pub/sub: each instance listens on its own inbox
//! for calls forwarded to it (a cancel, a Get, a Delete, a List; it replies to each), replies to the
//! calls it forwarded, and notices that a newer recording on another instance superseded one
//! of its own.
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::asks::Reply;
use super::{FORWARDED_CANCEL_WAIT, Locator, back_off, entry, owner_token};
use crate::id::ConversationId;
use crate::recorder::{Found, Listing, Recorder, Status};

/// One message to an instance's inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Message {
    /// Cancel the recording of conversation `id` (as the caller sent it), then answer
    /// `request` to `reply_to`'s inbox.
    Cancel {
        request: u64,
        reply_to: String,
        id: Vec<u8>,
        wait: bool,
    },
    /// The answer to a forwarded cancel (as earlier builds, which know no [`Message::Reply`],
    /// send and expect it).
    Answer { request: u64, accepted: bool },
    /// A newer recording of conversation `key`, on the instance at `by`, replaced the entry
    /// of this instance's recording `owner`: that recording ends as superseded.
    Superseded {
        key: u128,
        owner: String,
        by: String,
    },
    /// Tell what is known of conversation `id`'s recording, replying to `request` on
    /// `reply_to`'s inbox. (New variants go last: earlier builds decode the others.)
    Get {
        request: u64,
        reply_to: String,
        id: Vec<u8>,
    },
    /// Delete conversation `id`'s recording, replying as [`Message::Get`] does.
    Delete {
        request: u64,
        reply_to: String,
        id: Vec<u8>,
    },
    /// The reply to a forwarded call.
    Reply { request: u64, reply: Reply },
    /// List a page of the recordings held here, replying as [`Message::Get`] does.
    List {
        request: u64,
        reply_to: String,
        page_token: Option<String>,
        page_size: u32,
        only: Option<Status>,
    },
}

impl Message {
    pub(super) fn encode(&self) -> Vec<u8> {
        // Encoding plain data into a Vec cannot fail.
        bincode::serde::encode_to_vec(self, bincode::config::standard()).unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        bincode::serde::decode_from_slice(bytes, bincode::config::standard())
            .ok()
            .map(|(message, _)| message)
    }
}

/// Listens on this instance's inbox until `stop`, subscribing again (with backoff) whenever
/// the connection breaks; each time it is back, everything is registered again.
pub(super) async fn listen(locator: Locator, recorder: Recorder, stop: CancellationToken) {
    let inbox = entry::inbox(&locator.inner.instance);
    let mut failures = 0;
    loop {
        let subscribed = async {
            let mut pubsub = locator.inner.client.get_async_pubsub().await?;
            pubsub.subscribe(&inbox).await?;
            redis::RedisResult::Ok(pubsub)
        };
        let subscribed = tokio::select! {
            subscribed = subscribed => subscribed,
            () = stop.cancelled() => return,
        };
        match subscribed {
            Ok(mut pubsub) => {
                failures = 0;
                locator.reachable();
                let mut messages = pubsub.on_message();
                loop {
                    tokio::select! {
                        message = messages.next() => match message {
                            Some(message) => handle(&locator, &recorder, message.get_payload_bytes()),
                            None => break,
                        },
                        () = stop.cancelled() => return,
                    }
                }
                locator.unreachable("the subscription to this instance's inbox broke");
            }
            Err(err) => locator.unreachable(&err.to_string()),
        }
        failures += 1;
        if !back_off(failures, &stop).await {
            return;
        }
    }
}

/// Acts on one inbox message, on a task of its own so that a slow cancel holds up nothing.
fn handle(locator: &Locator, recorder: &Recorder, payload: &[u8]) {
    let Some(message) = Message::decode(payload) else {
        tracing::warn!("ignored a malformed message on this instance's Redis inbox");
        return;
    };
    let (locator, recorder) = (locator.clone(), recorder.clone());
    locator.inner.tasks.clone().spawn(async move {
        match message {
            Message::Answer { request, accepted } => {
                locator.replied(request, Reply::Cancelled(accepted));
            }
            Message::Reply { request, reply } => locator.replied(request, reply),
            Message::Cancel {
                request,
                reply_to,
                id,
                wait,
            } => {
                // Answered as earlier builds answer, so that they understand it.
                let accepted = cancel(&recorder, &id, wait).await;
                locator
                    .publish(&reply_to, &Message::Answer { request, accepted })
                    .await;
            }
            Message::Get {
                request,
                reply_to,
                id,
            } => {
                let reply = Reply::Found(get(&recorder, &id).await);
                locator
                    .publish(&reply_to, &Message::Reply { request, reply })
                    .await;
            }
            Message::Delete {
                request,
                reply_to,
                id,
            } => {
                let reply = Reply::Deleted(delete(&recorder, &id).await);
                locator
                    .publish(&reply_to, &Message::Reply { request, reply })
                    .await;
            }
            Message::List {
                request,
                reply_to,
                page_token,
                page_size,
                only,
            } => {
                let listed = recorder
                    .list(page_token.as_deref(), page_size as usize, only)
                    .await
                    .map(Listing::local_only)
                    .inspect_err(|err| tracing::warn!(error = %err, "forwarded List failed"))
                    .ok();
                let reply = Reply::Listed(listed);
                locator
                    .publish(&reply_to, &Message::Reply { request, reply })
                    .await;
            }
            Message::Superseded { key, owner, by } => {
                let Some(tape) = recorder.deck().live(key) else {
                    return;
                };
                if owner_token(&locator.inner.instance, tape.generation()) != owner {
                    return;
                }
                let message = format!(
                    "superseded: a newer recording of this conversation started on the \
                     instance at {by}"
                );
                if let Err(err) = recorder.supersede(&tape, message).await {
                    tracing::warn!(error = %err, "could not end a recording superseded elsewhere");
                }
            }
        }
    });
}

/// Cancels conversation `id`'s recording here, for another instance; whether it was accepted.
async fn cancel(recorder: &Recorder, id: &[u8], wait: bool) -> bool {
    let Ok(id) = ConversationId::parse(id) else {
        return false;
    };
    let cancelled = if wait {
        recorder.cancel_and_wait(&id, FORWARDED_CANCEL_WAIT).await
    } else {
        recorder.cancel(&id).await
    };
    cancelled.unwrap_or_else(|err| {
        tracing::warn!(conversation = %id, error = %err, "forwarded cancel failed");
        false
    })
}

/// What is known here of conversation `id`, for another instance; `None` when it cannot be
/// looked up (logged).
async fn get(recorder: &Recorder, id: &[u8]) -> Option<Found> {
    let Ok(id) = ConversationId::parse(id) else {
        return Some(Found::Unknown);
    };
    recorder
        .get(&id)
        .await
        .inspect_err(|err| tracing::warn!(conversation = %id, error = %err, "forwarded Get failed"))
        .ok()
}

/// Deletes conversation `id`'s recording here, for another instance; whether one existed, or
/// `None` when the delete failed (logged).
async fn delete(recorder: &Recorder, id: &[u8]) -> Option<bool> {
    let Ok(id) = ConversationId::parse(id) else {
        return Some(false);
    };
    recorder
        .delete(&id)
        .await
        .inspect_err(
            |err| tracing::warn!(conversation = %id, error = %err, "forwarded delete failed"),
        )
        .ok()
}
