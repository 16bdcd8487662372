//! What the faces ask the locator when several instances share one address: where a call
//! about a conversation is served, whether a new recording may start here, and which
//! conversations are live anywhere. With no locator, everything is served here.
use std::collections::HashSet;

use crate::error::Error;
use crate::id::ConversationId;
use crate::locator::{Locator, Owner, Route};
use crate::recorder::{Found, MAX_CHECK_IDS, OnConflict, Recorder};

/// Where calls about conversation `id` go.
pub(super) async fn route(
    locator: Option<&Locator>,
    recorder: &Recorder,
    id: &ConversationId,
) -> Route {
    match locator {
        Some(locator) => locator.route(recorder, id.key()).await,
        None => Route::Here,
    }
}

/// What became of a call sent to the instance that holds the recording.
pub(super) enum OwnerAnswer<T> {
    /// Not forwarded: the recording is here, or no other instance registered it.
    NotNeeded,
    /// The owner's answer, and the owner's address.
    Answered(T, String),
    /// The owner did not answer in time: it is at this address.
    Unanswered(String),
}

/// Sends a cancel of conversation `id` to the instance holding its recording, if that is
/// another one, and waits (bounded) for its answer, whether it accepted; `wait` asks the owner
/// to wait a little for its producer to let go, as the legacy API does.
pub(super) async fn forward_cancel(
    locator: Option<&Locator>,
    recorder: &Recorder,
    id: &ConversationId,
    wait: bool,
) -> OwnerAnswer<bool> {
    forward(locator, recorder, id, |locator, owner| async move {
        locator.forward_cancel(&owner, id, wait).await
    })
    .await
}

/// Asks the instance holding conversation `id`'s recording, if that is another one, what it
/// knows of it.
pub(super) async fn forward_get(
    locator: Option<&Locator>,
    recorder: &Recorder,
    id: &ConversationId,
) -> OwnerAnswer<Found> {
    forward(locator, recorder, id, |locator, owner| async move {
        locator.forward_get(&owner, id).await
    })
    .await
}

/// Asks the instance holding conversation `id`'s recording, if that is another one, to
/// delete it; whether one existed.
pub(super) async fn forward_delete(
    locator: Option<&Locator>,
    recorder: &Recorder,
    id: &ConversationId,
) -> OwnerAnswer<bool> {
    forward(locator, recorder, id, |locator, owner| async move {
        locator.forward_delete(&owner, id).await
    })
    .await
}

async fn forward<'a, T, F, Fut>(
    locator: Option<&'a Locator>,
    recorder: &Recorder,
    id: &ConversationId,
    ask: F,
) -> OwnerAnswer<T>
where
    F: FnOnce(&'a Locator, Owner) -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let Some(locator) = locator else {
        return OwnerAnswer::NotNeeded;
    };
    match locator.route(recorder, id.key()).await {
        Route::Here => OwnerAnswer::NotNeeded,
        Route::There(owner) => {
            let address = owner.address.clone();
            match ask(locator, owner).await {
                Some(answer) => OwnerAnswer::Answered(answer, address),
                None => OwnerAnswer::Unanswered(address),
            }
        }
    }
}

/// Whether a producer's session on `id` may open here. A resume of a recording another
/// instance holds goes there (`ResumeElsewhere` on the current API, `Redirect` on the legacy
/// one); under `--on-conflict reject`, a new recording of a conversation live on another
/// instance is refused with `AlreadyRecording`. Under supersede, a new recording starts here
/// and the registrar tells the other instance to end its own.
///
/// Fails as said above.
pub(super) async fn admit_producer(
    locator: Option<&Locator>,
    recorder: &Recorder,
    id: &ConversationId,
    resume: bool,
    legacy: bool,
) -> Result<(), Error> {
    let Some(locator) = locator else {
        return Ok(());
    };
    if !resume && recorder.on_conflict() == OnConflict::Supersede {
        return Ok(());
    }
    let Route::There(owner) = locator.route(recorder, id.key()).await else {
        return Ok(());
    };
    let (id, address) = (id.to_string(), owner.address);
    match (resume, legacy) {
        (true, false) => Err(Error::ResumeElsewhere { id, address }),
        (true, true) => Err(Error::Redirect { id, address }),
        (false, _) if owner.live => Err(Error::AlreadyRecording { id }),
        (false, _) => Ok(()),
    }
}

/// The conversations among `ids` live on any instance, by key; empty with no locator, or when
/// Redis does not answer (the check then answers from what is live here). On a node of a
/// cluster, those its store holds live.
pub(super) async fn live_anywhere(
    locator: Option<&Locator>,
    recorder: &Recorder,
    ids: &[Vec<u8>],
) -> HashSet<u128> {
    if ids.len() > MAX_CHECK_IDS {
        return HashSet::new();
    }
    let keys: Vec<u128> = ids
        .iter()
        .filter_map(|raw| ConversationId::parse(raw).ok())
        .map(|id| id.key())
        .collect();
    // On a node of a cluster, the leader holds the producers: what is live is what every
    // node's store says.
    if let Some(live) = recorder.live_in_cluster(&keys).await {
        return live;
    }
    let Some(locator) = locator else {
        return HashSet::new();
    };
    locator.live_among(&keys).await.unwrap_or_default()
}
