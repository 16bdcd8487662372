//! The sweeper: on a fixed schedule, whatever the traffic, ends live recordings that have been
//! idle too long and deletes recordings whose retention has passed, in bounded commits.
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Status, Store, SweepReport};
use crate::error::Result;

/// Most chunks deleted by one sweep commit, so a large sweep never stalls producers for long.
pub const MAX_CHUNKS_PER_SWEEP_COMMIT: u64 = 10_000;

/// Runs [`sweep_once`] every `interval` until `shutdown` is cancelled.
pub async fn run(
    store: Store,
    interval: Duration,
    idle_timeout: Duration,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: it collects what expired while the server was down.
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = ticker.tick() => {}
        }
        match sweep_once(&store, idle_timeout).await {
            Ok(report) if report.recordings_deleted > 0 => tracing::info!(
                recordings = report.recordings_deleted,
                chunks = report.chunks_deleted,
                "collected expired recordings"
            ),
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "sweep failed; retrying next interval"),
        }
    }
}

/// Ends recordings with no token for `idle_timeout` as `interrupted`, then deletes every
/// recording whose retention has passed, in commits of at most
/// [`MAX_CHUNKS_PER_SWEEP_COMMIT`] chunks. Returns the totals.
pub async fn sweep_once(store: &Store, idle_timeout: Duration) -> Result<SweepReport> {
    let now = store.clock().now_ms();
    let idle_ms = idle_timeout.as_millis() as u64;
    for tape in store.live_tapes() {
        if now.saturating_sub(tape.last_activity_ms()) >= idle_ms {
            let message = format!("no token for {}s (idle timeout)", idle_timeout.as_secs());
            if store.end(&tape, Status::Interrupted, Some(message)).await? {
                tracing::info!(conversation = %uuid::Uuid::from_u128(tape.key()), "ended idle recording");
            }
        }
    }
    let mut total = SweepReport::default();
    loop {
        let report = store.sweep_expired(MAX_CHUNKS_PER_SWEEP_COMMIT).await?;
        total.recordings_deleted += report.recordings_deleted;
        total.chunks_deleted += report.chunks_deleted;
        if !report.more {
            return Ok(total);
        }
    }
}
