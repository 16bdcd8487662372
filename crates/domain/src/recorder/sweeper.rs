//! The sweeper: on a fixed schedule, whatever the traffic, ends live recordings that have been
//! idle too long and has the store collect recordings whose retention has passed.
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::deck::Deck;
use super::progress::Status;
use crate::error::Result;
use crate::metrics as metric;
use crate::store::SweepReport;

/// Runs [`sweep_once`] every `interval` (at least a millisecond) until `shutdown` is cancelled.
pub async fn run(
    deck: Deck,
    interval: Duration,
    idle_timeout: Duration,
    shutdown: CancellationToken,
) {
    // tokio's interval panics on zero; the command line refuses it, a library caller may not.
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: it collects what expired while the server was down.
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let swept = sweep_once(&deck, idle_timeout).await;
        metrics::counter!(metric::SWEEPS).increment(1);
        if let Ok(report) = &swept {
            metrics::counter!(metric::SWEPT_RECORDINGS).increment(report.recordings_deleted);
            metrics::counter!(metric::TOMBSTONES_FORGOTTEN).increment(report.tombstones_forgotten);
        }
        match swept {
            Ok(report) if report.recordings_deleted > 0 => tracing::info!(
                recordings = report.recordings_deleted,
                chunks = report.chunks_deleted,
                "collected expired recordings"
            ),
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "sweep failed; retrying next interval"),
        }
        if let Some(tier) = deck.tier() {
            match tier.collect_expired(deck.store().clock().now_ms()).await {
                Ok(collected) => {
                    metrics::counter!(metric::OBJECT_STORE_COLLECTED).increment(collected.copies);
                }
                Err(err) => tracing::warn!(error = %err,
                    "collecting expired copies in the object store failed; retrying next interval"),
            }
        }
    }
}

/// Ends recordings with no token for `idle_timeout` as `interrupted`, then deletes every
/// recording whose retention has passed, in bounded commits. Returns the totals.
///
/// Fails when a commit fails.
pub async fn sweep_once(deck: &Deck, idle_timeout: Duration) -> Result<SweepReport> {
    let store = deck.store();
    if !store.leads() {
        // On a node of a cluster, the leader sweeps for all of them.
        return Ok(SweepReport::default());
    }
    let now = store.clock().now_ms();
    let idle_ms = idle_timeout.as_millis() as u64;
    for tape in deck.live_tapes() {
        if !tape.is_held_open() && now.saturating_sub(tape.last_activity_ms()) >= idle_ms {
            let message = format!("no token for {}s (idle timeout)", idle_timeout.as_secs());
            if deck.end(&tape, Status::Interrupted, Some(message)).await? {
                tracing::info!(conversation = %tape.id(), "ended idle recording");
            }
        }
    }
    store.collect_expired().await
}
