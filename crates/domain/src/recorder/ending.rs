//! The ends a caller asks for: cancel (here, or on the leader of a cluster), supersede by
//! another instance, and delete, which takes the recording's sealed copies with it.
use std::sync::Arc;
use std::time::Duration;

use super::{Recorder, Status, Tape};
use crate::error::Result;
use crate::id::ConversationId;

impl Recorder {
    /// Cancels the live recording of `id`. True if it was live, or had already been cancelled.
    ///
    /// Fails when the cancel cannot be committed, or the stored state cannot be read.
    pub async fn cancel(&self, id: &ConversationId) -> Result<bool> {
        match self.leader.get() {
            Some(leader) => leader.cancel(id).await,
            None => self.cancel_here(id).await,
        }
    }

    /// As [`cancel`](Self::cancel), on this node's recordings only (on a node of a cluster,
    /// the leader's).
    ///
    /// Fails as [`cancel`](Self::cancel) does.
    pub async fn cancel_here(&self, id: &ConversationId) -> Result<bool> {
        if let Some(tape) = self.deck.live(id.key())
            && self.deck.end(&tape, Status::Cancelled, None).await?
        {
            tracing::info!(conversation = %id, "recording cancelled");
            return Ok(true);
        }
        // Not live (or it ended just now): only an earlier cancel counts as accepted.
        let meta = self.deck.store().meta(id.key()).await?;
        Ok(meta.is_some_and(|m| m.status == Status::Cancelled))
    }

    /// Ends live recording `tape` as `superseded`, with `message` for its producer: a newer
    /// recording of its conversation started on another instance. False if it had ended.
    ///
    /// Fails when the end cannot be committed.
    pub async fn supersede(&self, tape: &Arc<Tape>, message: String) -> Result<bool> {
        let ended = self
            .deck
            .end(tape, Status::Superseded, Some(message))
            .await?;
        if ended {
            tracing::info!(conversation = %tape.id(), "recording superseded by another instance");
        }
        Ok(ended)
    }

    /// Deletes conversation `id`'s recording: a live one is cancelled first (its producer is
    /// told so, its readers end with `deleted`); its chunks are deleted in bounded commits and
    /// a tombstone is left. Returns whether there was a recording; deleting again is harmless.
    ///
    /// Fails when a commit fails; what is left is collected by the sweeper.
    pub async fn delete(&self, id: &ConversationId) -> Result<bool> {
        match self.leader.get() {
            Some(leader) => leader.delete(id).await,
            None => self.delete_here(id).await,
        }
    }

    /// As [`delete`](Self::delete), on this node only (on a node of a cluster, the leader).
    ///
    /// Fails as [`delete`](Self::delete) does.
    pub async fn delete_here(&self, id: &ConversationId) -> Result<bool> {
        let mut was_live = false;
        if let Some(tape) = self.deck.live(id.key()) {
            was_live = self
                .deck
                .end(
                    &tape,
                    Status::Deleted,
                    Some("the recording was deleted".into()),
                )
                .await?;
        }
        let existed = self.deck.store().delete(id.key()).await?;
        self.deck.changes().mark(id.key());
        // Its sealed copies go too, wherever it was recorded; the answer waits for the object
        // store, so that "deleted" is true everywhere (and a failure says so, to be retried).
        let existed = match self.deck.tier() {
            Some(tier) => tier.delete_copies(id.key(), self.now_ms()).await? || existed,
            None => existed,
        };
        if existed || was_live {
            metrics::counter!(crate::metrics::DELETED_RECORDINGS).increment(1);
            tracing::info!(conversation = %id, "recording deleted");
        }
        Ok(existed || was_live)
    }

    /// As [`cancel`](Self::cancel), then waits up to `wait` for the producer to let go.
    ///
    /// Fails as [`cancel`](Self::cancel) does.
    pub async fn cancel_and_wait(&self, id: &ConversationId, wait: Duration) -> Result<bool> {
        let tape = self.deck.live(id.key());
        let accepted = self.cancel(id).await?;
        if let Some(tape) = tape
            && tokio::time::timeout(wait, tape.producer_detached())
                .await
                .is_err()
        {
            tracing::warn!(conversation = %id, "producer still attached after cancel");
        }
        Ok(accepted)
    }
}
