//! Power cuts on the simulated disk (`sim_disk`): for each seed, a random workload of starts,
//! appends (small and large), ends, deletes, checkpoints and collections runs against the
//! store until the disk loses power at a random one of its changes; the store is opened again on
//! what the disk kept, and checked against what it acknowledged:
//! - every acknowledged chunk is there, in order;
//! - nothing that was never written is (what is there is a prefix of what was sent);
//! - no recording is `completed` unless its producer asked for it, and one whose end was
//!   acknowledged is;
//! - the store opens again (it never panics, and a power cut is no damage).
//!
//! `TAPEDECK_SIM_SEED=N` replays seed N alone; `TAPEDECK_SIM_CUTS=N` runs N seeds (the default
//! keeps the test command quick). The workload runs one call at a time, so a seed replays the
//! same calls, and the disk cuts at the same one. A disk that skips a kind of sync (as if it
//! were missing from the code) must be caught within the default number of seeds.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{TestStore, id, options};
use crate::clock::ManualClock;
use crate::sim_disk::{Faults, SimDisk, SkippedSync};
use crate::status::Status;
use crate::{Store, StoreOptions};

/// Seeds run by the test command, unless `TAPEDECK_SIM_CUTS` says otherwise.
const DEFAULT_CUTS: u64 = 10_000;
/// Calls of one workload, at most (it stops early once the power is cut).
const CALLS: usize = 40;
/// About as many changes as the workload makes to the disk: the cut is drawn below it, so that
/// most cuts land within the workload.
const CHANGES_PER_WORKLOAD: u64 = 150;
/// About as many changes as opening the store on an empty disk makes (the database file, the
/// log, the 4 MiB disk reserve in 64 KiB writes).
const CHANGES_TO_OPEN: u64 = 100;
/// How long one call may take before the run is called stuck.
const STUCK: Duration = Duration::from_secs(20);

/// One recording, as the workload sent it and as the store acknowledged it.
#[derive(Debug, Default)]
struct Sent {
    /// Every chunk sent, in order.
    chunks: Vec<String>,
    /// How many of them were acknowledged.
    acked: usize,
    /// Whether the start was acknowledged.
    started: bool,
    /// How it was asked to end, and whether that was acknowledged.
    end: Option<(Status, bool)>,
    /// Whether a delete (or a collection after its expiry) was asked for.
    removal_asked: bool,
    /// Whether a call of its producer failed: the store may then have ended it itself.
    failed: bool,
}

/// The data directory on the simulated disk.
fn db_path() -> PathBuf {
    PathBuf::from("/sim/data/tapedeck.redb")
}

fn sim_options(clock: &ManualClock, disk: &SimDisk) -> StoreOptions {
    StoreOptions {
        files: Arc::new(disk.clone()),
        // Checkpoints every few commits, so that cuts land around them too.
        checkpoint_bytes: 16 * 1024,
        commit_interval: Duration::ZERO,
        ..options(clock)
    }
}

/// A chunk's text: unique to its recording and place, of `len` bytes at least.
fn text(name: &str, index: usize, len: usize) -> String {
    let mut text = format!("{name}#{index};");
    while text.len() < len {
        text.push_str("abcdefghijklmnopqrstuvwxyz");
    }
    text
}

/// The disk under a run, besides its power cut.
#[derive(Debug, Clone, Copy)]
enum DiskFaults {
    /// Does what it is asked.
    Sound,
    /// Syncs fail with EIO now and then, and writes with ENOSPC.
    Failing,
    /// Answers one kind of sync without doing it.
    Skipping(SkippedSync),
}

/// What one seed found wrong, if anything.
type Found = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(format!($($why)+));
        }
    };
}

/// Runs seed `seed`'s workload on a disk with `faults` (its cut drawn here), cuts the power,
/// opens the store again and checks it.
async fn one_cut(seed: u64, disk_faults: DiskFaults) -> Found {
    let mut rng = StdRng::seed_from_u64(seed);
    // One seed in ten cuts the power while the store makes its files; the others once it runs.
    let while_opening = rng.random_range(0..10) == 0;
    let failing = matches!(disk_faults, DiskFaults::Failing);
    let faults = Faults {
        skip: match disk_faults {
            DiskFaults::Skipping(skip) => Some(skip),
            _ => None,
        },
        sync_eio: if failing { 0.02 } else { 0.0 },
        write_enospc: if failing { 0.01 } else { 0.0 },
        cut_at_change: while_opening.then(|| rng.random_range(1..=CHANGES_TO_OPEN)),
        capacity: None,
    };
    let disk = SimDisk::new(seed, faults);
    let clock = ManualClock::new(super::T0);
    let store = match Store::open(&db_path(), sim_options(&clock, &disk)) {
        Ok(store) => TestStore::new(store, 100),
        // The power went while the file was being made: nothing was acknowledged.
        Err(_) if disk.after_cut().is_some() || failing => return Ok(()),
        Err(err) => return Err(format!("the store did not open on a fresh disk: {err}")),
    };
    if !while_opening {
        disk.cut_after(rng.random_range(1..=CHANGES_PER_WORKLOAD));
    }
    let mut sent: HashMap<String, Sent> = HashMap::new();
    let stuck = tokio::time::timeout(STUCK * CALLS as u32, async {
        workload(&mut rng, &store, &clock, &mut sent, failing).await
    })
    .await;
    ensure!(stuck.is_ok(), "the workload got stuck");
    let after = disk.power_cut();
    ensure!(
        tokio::time::timeout(STUCK, store.close()).await.is_ok(),
        "the store did not close after the power cut"
    );
    let store = match Store::open(&db_path(), sim_options(&clock, &after)) {
        Ok(store) => TestStore::new(store, 100),
        Err(err) => {
            return Err(format!(
                "the store did not open after the power cut: {err} (files: {:?})",
                after.file_names()
            ));
        }
    };
    let checked = check(&store, &sent).await;
    store.close().await;
    checked
}

/// Runs random calls until one fails (the power is cut), unless told to go on after errors,
/// or [`CALLS`] are made.
async fn workload(
    rng: &mut StdRng,
    store: &TestStore,
    clock: &ManualClock,
    sent: &mut HashMap<String, Sent>,
    go_on_after_errors: bool,
) {
    let mut live = Vec::new();
    let mut ended: Vec<String> = Vec::new();
    for call in 0..CALLS {
        let roll = rng.random_range(0..100);
        let going = match roll {
            _ if live.is_empty() || (roll < 10 && live.len() < 4) => {
                let name = format!("r{call}");
                let entry = sent.entry(name.clone()).or_default();
                match store.start(&id(&name)).await {
                    Ok(producer) => {
                        entry.started = true;
                        live.push((name, producer));
                        true
                    }
                    // The start may still have been stored, and ended `failed` by the store
                    // with the commit that failed.
                    Err(_) => {
                        entry.failed = true;
                        false
                    }
                }
            }
            10..70 => {
                let at = rng.random_range(0..live.len());
                let (name, producer) = &mut live[at];
                let entry = sent
                    .get_mut(name.as_str())
                    .unwrap_or_else(|| unreachable!());
                // Mostly small chunks (the journal); now and then one past 8 KiB (straight to
                // `chunks`).
                let len = if rng.random_range(0..10) == 0 {
                    9_000
                } else {
                    rng.random_range(1..200)
                };
                let chunk = text(name, entry.chunks.len(), len);
                let appended = match producer.append(&chunk).await {
                    Ok(committed) => {
                        entry.chunks.push(chunk);
                        match committed.await {
                            Ok(Ok(_)) => {
                                entry.acked = entry.chunks.len();
                                true
                            }
                            _ => false,
                        }
                    }
                    Err(_) => false,
                };
                entry.failed |= !appended;
                appended
            }
            70..82 => {
                let at = rng.random_range(0..live.len());
                let (name, producer) = live.swap_remove(at);
                let status = if rng.random_bool(0.8) {
                    Status::Completed
                } else {
                    Status::Failed
                };
                let entry = sent
                    .get_mut(name.as_str())
                    .unwrap_or_else(|| unreachable!());
                entry.end = Some((status, false));
                // Answered with the recording's progress: ended so, or already otherwise. After
                // a failed call the store may have ended it `failed` itself, and says so even
                // where it could not store it (it then stays `recording`, and resumable): only
                // an end of a recording nothing failed in counts as acknowledged.
                let answer = producer.finish(status, None).await;
                let done =
                    !entry.failed && matches!(answer, Ok(progress) if progress.status == status);
                entry.end = Some((status, done));
                entry.failed |= !done;
                ended.push(name);
                done
            }
            82..88 if !ended.is_empty() => {
                let name = ended.swap_remove(rng.random_range(0..ended.len()));
                let entry = sent
                    .get_mut(name.as_str())
                    .unwrap_or_else(|| unreachable!());
                entry.removal_asked = true;
                store.delete(id(&name).key()).await.is_ok()
            }
            88..94 => store.checkpoint().await.is_ok(),
            94..97 => {
                // Past every ended recording's retention: the sweep collects them.
                clock.advance(3_600_000);
                ended.clear();
                // Those the store may have ended itself go too.
                for entry in sent.values_mut() {
                    entry.removal_asked |= entry.end.is_some() || entry.failed;
                }
                store.collect_expired().await.is_ok()
            }
            _ => true,
        };
        if !going && !go_on_after_errors {
            return;
        }
    }
}

/// Checks the store opened after the cut against what was sent and acknowledged.
async fn check(store: &TestStore, sent: &HashMap<String, Sent>) -> Found {
    let mut names: Vec<_> = sent.keys().collect();
    names.sort();
    for name in names {
        let entry = &sent[name];
        let key = id(name).key();
        let meta = store
            .meta(key)
            .await
            .map_err(|err| format!("{name}: its row cannot be read: {err}"))?;
        let Some(meta) = meta else {
            ensure!(
                entry.removal_asked || (entry.acked == 0 && !entry.started),
                "{name}: gone after the cut, with {} chunks acknowledged",
                entry.acked
            );
            continue;
        };
        if meta.status == Status::Deleted {
            ensure!(entry.removal_asked, "{name}: deleted, though no one asked");
            continue;
        }
        let chunks = store
            .read_chunks(key, meta.generation, 0, usize::MAX)
            .await
            .map_err(|err| format!("{name}: its chunks cannot be read: {err}"))?;
        let texts: Vec<String> = chunks
            .iter()
            .map(|chunk| String::from_utf8_lossy(&chunk.data).into_owned())
            .collect();
        ensure!(
            texts.len() >= entry.acked,
            "{name}: {} chunks after the cut, {} acknowledged",
            texts.len(),
            entry.acked
        );
        ensure!(
            texts.len() <= entry.chunks.len() && texts[..] == entry.chunks[..texts.len()],
            "{name}: holds chunks that were never sent in that order: {:?}",
            texts
                .iter()
                .zip(&entry.chunks)
                .position(|(found, sent)| found != sent)
        );
        let asked = entry.end.map(|(status, _)| status);
        ensure!(
            meta.status != Status::Completed || asked == Some(Status::Completed),
            "{name}: completed, though its producer never asked"
        );
        // A recording whose producer's call failed may have been ended by the store itself.
        let ended_by_store =
            entry.failed && matches!(meta.status, Status::Failed | Status::Interrupted);
        match entry.end {
            Some((status, true)) => ensure!(
                meta.status == status,
                "{name}: its end ({status:?}) was acknowledged, yet it is {:?}",
                meta.status
            ),
            Some((status, false)) => ensure!(
                meta.status == status || meta.status == Status::Recording || ended_by_store,
                "{name}: asked to end {status:?}, found {:?}",
                meta.status
            ),
            None => ensure!(
                meta.status == Status::Recording || ended_by_store,
                "{name}: never asked to end, found {:?}",
                meta.status
            ),
        }
    }
    Ok(())
}

/// The seeds to run: `TAPEDECK_SIM_SEED` alone, or `TAPEDECK_SIM_CUTS` (else `default`) of
/// them from a base that `TAPEDECK_SIM_SEED_BASE` may move.
fn seeds(default: u64) -> std::ops::Range<u64> {
    let number = |name: &str| {
        std::env::var(name).ok().map(|value| {
            value
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{name} must be a whole number, not {value:?}"))
        })
    };
    if let Some(seed) = number("TAPEDECK_SIM_SEED") {
        return seed..seed + 1;
    }
    let base = number("TAPEDECK_SIM_SEED_BASE").unwrap_or(0);
    base..base + number("TAPEDECK_SIM_CUTS").unwrap_or(default)
}

/// Runs `seeds` on a disk with `faults`, several at a time; the first seed that found something, with
/// what it found, if any did.
async fn run_seeds(seeds: std::ops::Range<u64>, faults: DiskFaults) -> Option<(u64, String)> {
    const AT_ONCE: u64 = 8;
    let mut next = seeds.start;
    while next < seeds.end {
        let batch: Vec<_> = (next..(next + AT_ONCE).min(seeds.end))
            .map(|seed| tokio::spawn(async move { (seed, one_cut(seed, faults).await) }))
            .collect();
        next += AT_ONCE;
        let mut found = None;
        for task in batch {
            let (seed, result) = match task.await {
                Ok(done) => done,
                Err(panic) => return Some((u64::MAX, format!("a seed panicked: {panic}"))),
            };
            if let Err(why) = result {
                found = found.or(Some((seed, why)));
            }
        }
        if found.is_some() {
            return found;
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_chunk_survives_a_power_cut() {
    let seeds = seeds(DEFAULT_CUTS);
    let started = Instant::now();
    let count = seeds.end - seeds.start;
    if let Some((seed, why)) = run_seeds(seeds, DiskFaults::Sound).await {
        panic!("seed {seed} (replay with TAPEDECK_SIM_SEED={seed}): {why}");
    }
    println!(
        "{count} power cuts in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The same, on a disk whose syncs fail with EIO now and then (what they were to make durable
/// never lands) and whose writes fail with ENOSPC: the workload goes on after each error, and
/// still nothing acknowledged may be lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_chunk_survives_failing_syncs_a_full_disk_and_a_power_cut() {
    let seeds = seeds(DEFAULT_CUTS / 5);
    let started = Instant::now();
    let count = seeds.end - seeds.start;
    if let Some((seed, why)) = run_seeds(seeds, DiskFaults::Failing).await {
        panic!("seed {seed} (replay with TAPEDECK_SIM_SEED={seed}): {why}");
    }
    println!(
        "{count} power cuts on a failing disk in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Runs seeds on a disk that skips `skip` until one finds a loss; returns that seed.
async fn caught(skip: SkippedSync) -> u64 {
    let seeds = seeds(DEFAULT_CUTS);
    let started = Instant::now();
    match run_seeds(seeds.clone(), DiskFaults::Skipping(skip)).await {
        Some((seed, why)) => {
            println!(
                "{skip:?} syncs skipped: seed {seed} caught it after {:.2} s: {why}",
                started.elapsed().as_secs_f64()
            );
            seed
        }
        None => panic!(
            "{} power cuts missed the skipped {skip:?} syncs",
            seeds.end - seeds.start
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_sync_of_the_log_is_caught() {
    caught(SkippedSync::Log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_sync_of_the_database_is_caught() {
    caught(SkippedSync::Database).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_sync_of_the_directory_is_caught() {
    caught(SkippedSync::Directory).await;
}
