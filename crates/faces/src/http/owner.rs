//! Get, cancel and delete made where a recording is held: here, or with several instances on
//! one Redis, by the instance that holds it (over its Redis inbox, as gRPC forwards them);
//! `503` naming that instance when it does not answer. On a node of a cluster the recorder
//! sends cancels and deletes to the leader.
use super::HttpFace;
use super::failure::failed;
use super::reply::Reply;
use crate::error::Error;
use crate::id::ConversationId;
use crate::locator::{Locator, Owner, Route};
use crate::recorder::Found;

impl HttpFace {
    /// What is known of conversation `id`, from the instance that holds it.
    pub(super) async fn found_anywhere(&self, id: &ConversationId) -> Result<Found, Reply> {
        match self.owner(id).await {
            Some((locator, owner)) => (locator.forward_get(&owner, id).await)
                .ok_or_else(|| unreachable(id, &owner.address)),
            None => self.recorder.get(id).await.map_err(failed),
        }
    }

    /// Cancels `id`'s live recording where it is held; whether it was live (or cancelled).
    pub(super) async fn cancel_anywhere(&self, id: &ConversationId) -> Result<bool, Reply> {
        match self.owner(id).await {
            Some((locator, owner)) => (locator.forward_cancel(&owner, id, false).await)
                .ok_or_else(|| unreachable(id, &owner.address)),
            None => self.recorder.cancel(id).await.map_err(failed),
        }
    }

    /// Deletes `id`'s recording where it is held; whether there was one.
    pub(super) async fn delete_anywhere(&self, id: &ConversationId) -> Result<bool, Reply> {
        match self.owner(id).await {
            Some((locator, owner)) => (locator.forward_delete(&owner, id).await)
                .ok_or_else(|| unreachable(id, &owner.address)),
            None => self.recorder.delete(id).await.map_err(failed),
        }
    }

    /// The other instance that holds `id`'s recording, if there is one.
    async fn owner(&self, id: &ConversationId) -> Option<(&Locator, Owner)> {
        let locator = self.locator.as_ref()?;
        match locator.route(&self.recorder, id.key()).await {
            Route::There(owner) => Some((locator, owner)),
            Route::Here => None,
        }
    }
}

fn unreachable(id: &ConversationId, address: &str) -> Reply {
    failed(Error::OwnerUnreachable {
        id: id.to_string(),
        address: address.to_string(),
    })
}
