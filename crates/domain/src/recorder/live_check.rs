//! The live check: which of a caller's conversations have a live recording, here, on another
//! instance, or (on a node of a cluster) in the state this node has applied.
use std::collections::HashSet;

use super::Recorder;
use crate::error::{Error, Result};
use crate::id::ConversationId;

/// Most conversation ids accepted by one live check.
pub const MAX_CHECK_IDS: usize = 1000;

impl Recorder {
    /// The ids among `ids` whose recording is live (here, or on another instance by
    /// `live_elsewhere`) and that `visible` lets the caller see: request order, first of
    /// duplicates (by conversation) kept, each in the form the caller sent. Malformed ids are
    /// left out, as Memory Service does, rather than failing the call.
    ///
    /// Fails with `TooManyIds` over [`MAX_CHECK_IDS`].
    pub fn check_live(
        &self,
        ids: &[Vec<u8>],
        visible: impl Fn(&ConversationId) -> bool,
        live_elsewhere: &HashSet<u128>,
    ) -> Result<Vec<Vec<u8>>> {
        if ids.len() > MAX_CHECK_IDS {
            return Err(Error::TooManyIds {
                count: ids.len(),
                max: MAX_CHECK_IDS,
            });
        }
        let mut seen = HashSet::new();
        // On a node of a cluster, live is what the applied state says (`live_elsewhere`): the
        // leader's tape of a recording exists before its start is applied, and a replay on the
        // strength of it would find nothing yet.
        let tapes_count = !self.deck.store().is_replicated();
        Ok(ids
            .iter()
            .filter_map(|raw| ConversationId::parse(raw).ok())
            .filter(|id| {
                let key = id.key();
                let live_here = tapes_count && self.deck.live(key).is_some();
                seen.insert(key) && visible(id) && (live_here || live_elsewhere.contains(&key))
            })
            .map(|id| id.original().to_vec())
            .collect())
    }

    /// On a node of a cluster, which of `keys` are live in the state this node has applied
    /// (the leader holds the producers, so what is live is what every node's store says);
    /// empty when the store cannot be read. `None` on a single node.
    pub async fn live_in_cluster(&self, keys: &[u128]) -> Option<HashSet<u128>> {
        let store = self.deck.store();
        if !store.is_replicated() {
            return None;
        }
        let metas = store.metas(keys.to_vec()).await.unwrap_or_default();
        Some(
            keys.iter()
                .zip(metas)
                .filter(|(_, meta)| meta.as_ref().is_some_and(|m| m.status.is_live()))
                .map(|(key, _)| *key)
                .collect(),
        )
    }
}
