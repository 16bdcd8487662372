//! What the server runs beside the faces, asked of the [`Recorder`] rather than of what lies
//! under it: the sweeper, the sealer, the changes the locator and the console follow, and a
//! node's part when leadership of its cluster moves.
use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::sealer::{self, SealerSettings};
use super::{Changes, Recorder, sweeper};
use crate::error::Result;
use crate::tier::Tier;

impl Recorder {
    /// The sweeper: collects expired recordings and ends idle ones every `interval` (see
    /// [`sweeper::run`]) until `stop` is cancelled.
    pub fn sweeping(
        &self,
        interval: Duration,
        idle_timeout: Duration,
        stop: CancellationToken,
    ) -> impl Future<Output = ()> + Send + 'static {
        sweeper::run(self.deck.clone(), interval, idle_timeout, stop)
    }

    /// One round of the sweeper, now.
    ///
    /// Fails with a storage error.
    pub async fn sweep_once(&self, idle_timeout: Duration) -> Result<()> {
        sweeper::sweep_once(&self.deck, idle_timeout)
            .await
            .map(drop)
    }

    /// The sealer: copies ended recordings into `tier` (see [`sealer::run`]) until `stop` is
    /// cancelled.
    pub fn sealing(
        &self,
        tier: Tier,
        settings: SealerSettings,
        stop: CancellationToken,
    ) -> impl Future<Output = ()> + Send + 'static {
        sealer::run(self.deck.clone(), tier, settings, stop)
    }

    /// How many recordings are live now.
    pub fn live_count(&self) -> usize {
        self.deck.live_tapes().len()
    }

    /// Whether ended recordings are sealed into an object store.
    pub fn has_object_store(&self) -> bool {
        self.deck.tier().is_some()
    }

    /// Conversations whose recording started, reopened, ended or was deleted.
    pub fn changes(&self) -> &Changes {
        self.deck.changes()
    }

    /// Drops every live recording this node held as its cluster's leader: their writes are the
    /// next leader's. Returns how many there were.
    pub fn depose_all(&self) -> usize {
        self.deck.depose_all()
    }

    /// Adopts, detached, the recordings the node that led before left live.
    ///
    /// Fails with a storage error.
    pub async fn adopt_left_live(&self) -> Result<usize> {
        self.deck.adopt_left_live().await
    }
}
