//! When each peer last answered an RPC of this node: a node that stopped answering is not
//! healthy, however little it lags (nothing new may have been written since it died). Each
//! change, a peer that stops answering or answers again, is logged once: openraft's own lines
//! about unreachable peers repeat several times a second, and are off by default.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use super::types::NodeId;

/// What this node heard from each peer. Clones share it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Answers(Arc<Mutex<BTreeMap<NodeId, Heard>>>);

#[derive(Debug, Clone, Copy, Default)]
struct Heard {
    /// When it last answered, if it has since this process started.
    last: Option<Instant>,
    /// Whether its last RPC found it unreachable.
    silent: bool,
}

impl Answers {
    /// Notes that `peer` answered just now.
    pub(crate) fn heard(&self, peer: NodeId) {
        let mut peers = self.lock();
        let heard = peers.entry(peer).or_default();
        if std::mem::take(&mut heard.silent) {
            tracing::info!(node = peer, "a node of the cluster answers again");
        }
        heard.last = Some(Instant::now());
    }

    /// Notes that `peer` could not be reached (`why`).
    pub(crate) fn unreachable(&self, peer: NodeId, why: &dyn std::fmt::Display) {
        let mut peers = self.lock();
        let heard = peers.entry(peer).or_default();
        if !std::mem::replace(&mut heard.silent, true) {
            tracing::warn!(node = peer, error = %why, "a node of the cluster does not answer");
        }
    }

    /// How long since `peer` last answered, in milliseconds; `None` if it has not since this
    /// process started.
    pub(crate) fn silent_ms(&self, peer: NodeId) -> Option<u64> {
        let heard = self.lock().get(&peer)?.last?;
        Some(heard.elapsed().as_millis() as u64)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Heard>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
