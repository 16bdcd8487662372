//! Calls forwarded to the instance that holds a recording, over its Redis inbox: a cancel, a
//! Get, a Delete; and a List, to every instance. Each waits (at most [`FORWARD_TIMEOUT`]) for the owner's reply on this
//! instance's inbox; no reply means the owner is down, or cut off from Redis.
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::inbox::Message;
use super::{FORWARD_TIMEOUT, Locator, Owner};
use crate::id::ConversationId;
use crate::recorder::{Found, Listing, Status};

/// An owner's reply to a forwarded call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Reply {
    /// To a cancel: whether it was accepted.
    Cancelled(bool),
    /// To a Get: what the owner knows; `None` when it failed to look (it logged why).
    Found(Option<Found>),
    /// To a Delete: whether a recording existed; `None` when it failed (it logged why).
    Deleted(Option<bool>),
    /// To a List: a page of what the owner holds; `None` when it failed (it logged why).
    Listed(Option<Listing>),
}

impl Locator {
    /// Asks `owner` to cancel conversation `id`'s recording (and, when `wait`, to wait a
    /// little for its producer to let go); its answer, or `None` if none came in time.
    pub async fn forward_cancel(
        &self,
        owner: &Owner,
        id: &ConversationId,
        wait: bool,
    ) -> Option<bool> {
        let id = id.original().to_vec();
        let ask = |request, reply_to| Message::Cancel {
            request,
            reply_to,
            id,
            wait,
        };
        match self.ask(&owner.instance, ask).await? {
            Reply::Cancelled(accepted) => Some(accepted),
            _ => None,
        }
    }

    /// What `owner` knows of conversation `id`, or `None` if it did not answer in time (or
    /// failed to look).
    pub async fn forward_get(&self, owner: &Owner, id: &ConversationId) -> Option<Found> {
        let id = id.original().to_vec();
        let ask = |request, reply_to| Message::Get {
            request,
            reply_to,
            id,
        };
        match self.ask(&owner.instance, ask).await? {
            Reply::Found(found) => found,
            _ => None,
        }
    }

    /// Asks `owner` to delete conversation `id`'s recording (cancelling a live one first);
    /// whether one existed, or `None` if it did not answer in time (or failed).
    pub async fn forward_delete(&self, owner: &Owner, id: &ConversationId) -> Option<bool> {
        let id = id.original().to_vec();
        let ask = |request, reply_to| Message::Delete {
            request,
            reply_to,
            id,
        };
        match self.ask(&owner.instance, ask).await? {
            Reply::Deleted(existed) => existed,
            _ => None,
        }
    }

    /// A page of the recordings `instance` holds itself (the object store's left out), as
    /// [`Recorder::list`](crate::recorder::Recorder::list) gives it there; `None` if it did
    /// not answer in time (or failed).
    pub async fn forward_list(
        &self,
        instance: &str,
        page_token: Option<String>,
        page_size: usize,
        only: Option<Status>,
    ) -> Option<Listing> {
        let ask = |request, reply_to| Message::List {
            request,
            reply_to,
            page_token,
            page_size: page_size as u32,
            only,
        };
        match self.ask(instance, ask).await? {
            Reply::Listed(listing) => listing,
            _ => None,
        }
    }

    /// Sends `instance` the message `ask` builds from a request number and this instance's
    /// inbox, and waits for the reply.
    async fn ask(&self, instance: &str, ask: impl FnOnce(u64, String) -> Message) -> Option<Reply> {
        let request = self
            .inner
            .next_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (reply, replied) = oneshot::channel();
        self.lock_waiting().insert(request, reply);
        let message = ask(request, self.inner.instance.clone());
        let delivered = self.publish(instance, &message).await;
        let reply = match delivered {
            // Nobody listens on the owner's inbox: it is down, or cut off from Redis.
            Some(0) | None => None,
            Some(_) => tokio::time::timeout(FORWARD_TIMEOUT, replied)
                .await
                .ok()
                .and_then(|reply| reply.ok()),
        };
        self.lock_waiting().remove(&request);
        reply
    }

    /// Delivers a reply to a call this instance forwarded and is waiting on.
    pub(super) fn replied(&self, request: u64, reply: Reply) {
        if let Some(waiting) = self.lock_waiting().remove(&request) {
            let _ = waiting.send(reply);
        }
    }

    fn lock_waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, oneshot::Sender<Reply>>> {
        self.inner.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}
