//! The sealer: every ended recording is sealed into the object store, in the background. It
//! learns of ends from the live registry, and at start-up (and every few minutes) walks the GC
//! schedule for ended recordings not sealed yet, so that a crash at any step only means the
//! seal runs again. Upload, read back and verify, then the store marks the row (dropping the
//! local chunks when `--local-retention` is 0) and the copy is named the conversation's
//! newest, for readers to find it in one request; later drops run on their own schedule.
//!
//! Producers and readers never wait on it: it only reads committed recordings and queues one
//! small op per seal. While the object store is away it retries with backoff; the backlog
//! shows in `tapedeck_seal_backlog`.
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::deck::Deck;
use crate::error::{Error, Result};
use crate::metrics as metric;
use crate::store::Sealing;
use crate::tier::{Step, Tier};

/// How often the GC schedule is walked again for anything the registry did not report.
const RESCAN_EVERY: Duration = Duration::from_secs(300);
/// Longest wait between two tries while the object store is away.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Ended recordings read from the schedule per walk step.
const SCAN_PAGE: usize = 1000;
/// Recordings sealed at once: each seal is a few round trips to the object store.
const PARALLEL_SEALS: usize = 8;

/// The env variable that stops a seal after one of its steps (for crash tests only): the
/// sealer logs "seal stopped for a test" and waits there until the process is killed.
pub const STOP_ENV: &str = "TAPEDECK_TEST_SEAL_STOP";

/// How the sealer keeps local copies.
#[derive(Debug, Clone, Copy, Default)]
pub struct SealerSettings {
    /// How long a sealed recording's chunks stay on local disk; `None` keeps them for the
    /// recording's whole retention.
    pub local_retention: Option<Duration>,
}

/// A local copy to drop: `(at, key, (generation, finished_ms))`.
type LocalDrop = Reverse<(u64, u128, (u64, u64))>;

/// What the sealer has to do.
#[derive(Default)]
struct SealerQueue {
    /// Conversations whose ended recording may need sealing.
    pending: BTreeSet<u128>,
    /// Local copies to drop, soonest first.
    drops: BinaryHeap<LocalDrop>,
}

/// Runs the sealer over `deck`'s store into `tier` until `stop` is cancelled.
pub async fn run(deck: Deck, tier: Tier, settings: SealerSettings, stop: CancellationToken) {
    let sealer = Sealer {
        deck,
        tier,
        settings,
        work: Arc::new(Mutex::new(SealerQueue::default())),
        stop_after: std::env::var(STOP_ENV).ok(),
    };
    sealer.deck.ended().enable();
    tokio::select! {
        () = stop.cancelled() => {}
        () = sealer.run() => {}
    }
}

struct Sealer {
    deck: Deck,
    tier: Tier,
    settings: SealerSettings,
    work: Arc<Mutex<SealerQueue>>,
    stop_after: Option<String>,
}

impl Sealer {
    async fn run(&self) {
        let mut backoff = Duration::from_millis(100);
        let mut rescan_at = tokio::time::Instant::now();
        let mut away = false;
        loop {
            if tokio::time::Instant::now() >= rescan_at {
                match self.rescan().await {
                    Ok(()) => rescan_at = tokio::time::Instant::now() + RESCAN_EVERY,
                    Err(err) => tracing::warn!(error = %err, "could not list recordings to seal"),
                }
            }
            for key in self.deck.ended().drain() {
                self.lock().pending.insert(key);
            }
            metrics::gauge!(metric::SEAL_BACKLOG).set(self.lock().pending.len() as f64);
            let failed = match self.step().await {
                Ok(true) => continue,
                Ok(false) => false,
                Err(err) => {
                    metrics::counter!(metric::SEAL_FAILURES).increment(1);
                    if !away {
                        tracing::warn!(store = self.tier.describe(), error = %err,
                            "sealing waits for the object store; retrying with backoff");
                    }
                    away = true;
                    true
                }
            };
            if !failed && away {
                tracing::info!(
                    store = self.tier.describe(),
                    "the object store answers again"
                );
                away = false;
            }
            let wait = match failed {
                true => {
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    backoff
                }
                false => {
                    backoff = Duration::from_millis(100);
                    self.next_drop_in().unwrap_or(RESCAN_EVERY)
                }
            };
            tokio::select! {
                keys = self.deck.ended().next() => {
                    self.lock().pending.extend(keys);
                    // After a failure, a new end does not cut the backoff short.
                    if failed {
                        tokio::time::sleep(backoff).await;
                    }
                }
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Seals a few pending recordings at once, or drops one local copy that is due. Returns
    /// whether there was anything to do.
    async fn step(&self) -> Result<bool> {
        let now = self.deck.store().clock().now_ms();
        let due = {
            let mut work = self.lock();
            match work.drops.peek() {
                Some(Reverse((at, _, _))) if *at <= now => work.drops.pop(),
                _ => None,
            }
        };
        if let Some(Reverse((_, key, ended))) = due {
            if self.deck.store().seal(key, ended, true).await? == Sealing::Marked {
                metrics::counter!(metric::LOCAL_COPIES_DROPPED).increment(1);
            }
            return Ok(true);
        }
        let keys: Vec<u128> = self
            .lock()
            .pending
            .iter()
            .take(PARALLEL_SEALS)
            .copied()
            .collect();
        if keys.is_empty() {
            return Ok(false);
        }
        let sealed = futures::future::join_all(keys.iter().map(|key| self.seal(*key))).await;
        let mut failure = None;
        for (key, sealed) in keys.into_iter().zip(sealed) {
            match sealed {
                Ok(()) => {
                    self.lock().pending.remove(&key);
                }
                // Left pending, for the next try.
                Err(err) => failure = Some(err),
            }
        }
        failure.map_or(Ok(true), Err)
    }

    /// Seals conversation `key`'s ended recording, if it has one whose chunks are local.
    async fn seal(&self, key: u128) -> Result<()> {
        let store = self.deck.store();
        let Some(copy) = store.recording_copy(key).await? else {
            return Ok(());
        };
        if store.seal_mark(key).await?.is_some_and(|mark| {
            mark.generation == copy.meta.generation
                && Some(mark.finished_ms) == copy.meta.finished_ms
        }) {
            return Ok(());
        }
        let (upload, header) = self.tier.upload(key, &copy).await?;
        self.stop_if(Step::Uploaded).await;
        if !self.tier.verify(key, &upload, &header).await? {
            return Err(Error::ObjectStoreUnavailable {
                detail: "a sealed copy did not read back as written".into(),
            });
        }
        self.stop_if(Step::Verified).await;
        let ended = (upload.version.generation, upload.version.finished_ms);
        let drop_now = self.settings.local_retention == Some(Duration::ZERO);
        match store.seal(key, ended, drop_now).await? {
            Sealing::Marked => {
                metrics::counter!(metric::SEALED_RECORDINGS).increment(1);
                metrics::counter!(metric::SEALED_BYTES).increment(upload.bytes);
                tracing::debug!(conversation = %uuid::Uuid::from_u128(key), bytes = upload.bytes,
                    "recording sealed");
                // Only a quicker way for readers to find it: without the name, they list.
                if let Err(err) = self.tier.name_newest(key, upload.version).await {
                    tracing::debug!(conversation = %uuid::Uuid::from_u128(key), error = %err,
                        "sealed copy not named the newest; readers list to find it");
                }
                self.stop_if(Step::Marked).await;
                if let Some(keep) = self.settings.local_retention.filter(|k| !k.is_zero()) {
                    let at = store.clock().now_ms() + keep.as_millis() as u64;
                    self.lock().drops.push(Reverse((at, key, ended)));
                }
            }
            // Deleted, reopened or replaced while it was uploaded: the copy is no one's.
            Sealing::Stale => self.tier.delete_version(key, upload.version).await?,
        }
        Ok(())
    }

    /// Queues every ended recording the store has not sealed, and schedules the drops of
    /// sealed ones still kept locally.
    async fn rescan(&self) -> Result<()> {
        let store = self.deck.store();
        let mut after = None;
        loop {
            let (keys, next) = store.unsealed(after, SCAN_PAGE).await?;
            self.lock().pending.extend(keys);
            match next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        if let Some(keep) = self.settings.local_retention {
            let kept = store.sealed_locally().await?;
            let mut work = self.lock();
            work.drops.clear();
            for (key, mark) in kept {
                let at = mark.sealed_ms + keep.as_millis() as u64;
                work.drops
                    .push(Reverse((at, key, (mark.generation, mark.finished_ms))));
            }
        }
        Ok(())
    }

    /// How long until the next local copy is due to go.
    fn next_drop_in(&self) -> Option<Duration> {
        let now = self.deck.store().clock().now_ms();
        let work = self.lock();
        let Reverse((at, _, _)) = work.drops.peek()?;
        Some(Duration::from_millis(at.saturating_sub(now)))
    }

    /// For crash tests: waits forever after `step` when `TAPEDECK_TEST_SEAL_STOP` names it.
    async fn stop_if(&self, step: Step) {
        if self.stop_after.as_deref() == Some(step.name()) {
            tracing::warn!(step = step.name(), "seal stopped for a test");
            std::future::pending::<()>().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SealerQueue> {
        self.work.lock().unwrap_or_else(|e| e.into_inner())
    }
}
