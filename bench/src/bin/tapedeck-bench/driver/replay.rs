//! The replay scenario: completed recordings are loaded as fast as each target's client allows,
//! then read back whole by concurrent readers; MB/s and the CPU it took are measured.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::anyhow;
use tokio::task::JoinSet;

use super::{Clock, Counters, Cpu, DRAIN_LIMIT, progress_bar, run_tag};
use crate::procfs;
use crate::report::Outcome;
use crate::targets::{Producer, Target};
use crate::workload::{ReplayWorkload, encode_token};

/// Loads completed recordings into `target`, then replays them all; measures MB/s.
pub(crate) async fn run_replay<T: Target>(
    target: Arc<T>,
    workload: &ReplayWorkload,
    scenario: &str,
    target_name: &str,
) -> Outcome {
    let pid = target.data_pid();
    let counters = Arc::new(Counters::default());
    let tag = run_tag();
    let clock = Clock(Instant::now());
    let written_before = procfs::write_bytes(pid);
    let cpu_before = Cpu::now(pid);

    // Load: `load_concurrency` producers, closed loop, each recording whole recordings.
    let bar = progress_bar(&format!("{scenario}/{target_name} load"), 0);
    bar.set_length(workload.recordings as u64);
    let load_start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut loaders = JoinSet::new();
    for lane in 0..workload.load_concurrency.max(1) {
        let (target, next, counters, tag, bar) = (
            target.clone(),
            next.clone(),
            counters.clone(),
            tag.clone(),
            bar.clone(),
        );
        let (tokens, token_bytes, recordings) = (
            workload.tokens_per_recording,
            workload.token_bytes,
            workload.recordings,
        );
        loaders.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= recordings {
                    return;
                }
                let load = async {
                    let mut producer = target.record(lane, &format!("{tag}-{i}")).await?;
                    let now = clock.ns(Instant::now());
                    let batch = (0..tokens)
                        .map(|seq| encode_token(now, seq as u32, token_bytes))
                        .collect();
                    let acked = producer.load(batch).await?;
                    counters.sent.fetch_add(tokens as u64, Ordering::Relaxed);
                    counters.acked.fetch_add(acked, Ordering::Relaxed);
                    let acked = producer.finish().await?;
                    counters.acked.fetch_add(acked, Ordering::Relaxed);
                    anyhow::Ok(())
                };
                if let Err(err) = load.await {
                    counters.error(&err.context("loading"));
                }
                bar.inc(1);
            }
        });
    }
    let loaded = tokio::time::timeout(DRAIN_LIMIT * 3, async {
        while loaders.join_next().await.is_some() {}
    })
    .await;
    if loaded.is_err() {
        loaders.abort_all();
        counters.error(&anyhow!("loading did not finish in {:?}", DRAIN_LIMIT * 3));
    }
    let load_s = load_start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let acked = counters.acked.load(Ordering::Relaxed);
    let written = procfs::write_bytes(pid)
        .zip(written_before)
        .map(|(after, before)| after.saturating_sub(before));
    let cpu = Cpu::now(pid).since(&cpu_before);

    // Replay: `replay_concurrency` readers, each taking the next recording.
    let expected = (workload.tokens_per_recording * workload.token_bytes) as u64;
    let bar = progress_bar(&format!("{scenario}/{target_name} replay"), 0);
    bar.set_length(workload.recordings as u64);
    let replay_start = Instant::now();
    let replay_cpu_before = Cpu::now(pid);
    let next = Arc::new(AtomicUsize::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut readers = JoinSet::new();
    for lane in 0..workload.replay_concurrency.max(1) {
        let (target, next, counters, tag, bar, bytes) = (
            target.clone(),
            next.clone(),
            counters.clone(),
            tag.clone(),
            bar.clone(),
            bytes.clone(),
        );
        let recordings = workload.recordings;
        readers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= recordings {
                    return;
                }
                match target.replay(lane, &format!("{tag}-{i}")).await {
                    Ok(read) if read == expected => {
                        bytes.fetch_add(read, Ordering::Relaxed);
                    }
                    Ok(read) => {
                        bytes.fetch_add(read, Ordering::Relaxed);
                        counters.error(&anyhow!(
                            "recording {i}: replayed {read} bytes, expected {expected}"
                        ));
                    }
                    Err(err) => counters.error(&err.context("replaying")),
                }
                bar.inc(1);
            }
        });
    }
    let replayed = tokio::time::timeout(DRAIN_LIMIT, async {
        while readers.join_next().await.is_some() {}
    })
    .await;
    if replayed.is_err() {
        readers.abort_all();
        counters.error(&anyhow!("replay did not finish in {DRAIN_LIMIT:?}"));
    }
    let replay_s = replay_start.elapsed().as_secs_f64();
    let replay_cpu = Cpu::now(pid).since(&replay_cpu_before);
    bar.finish_and_clear();
    let replay_bytes = bytes.load(Ordering::Relaxed);
    let memory = pid.and_then(|pid| procfs::memory(Some(pid)));
    let first_error = counters.first_error();
    Outcome {
        scenario: scenario.into(),
        target: target_name.into(),
        durable_acks: target.durable(),
        sent_tokens: counters.sent.load(Ordering::Relaxed),
        acked_tokens: acked,
        elapsed_s: load_s,
        acked_tokens_per_s: acked as f64 / load_s,
        latency: None,
        ack_latency: None,
        completion_latency: None,
        received_tokens: 0,
        expected_received: 0,
        sequence_errors: 0,
        load_s: Some(load_s),
        replay_mb_per_s: Some(replay_bytes as f64 / replay_s / 1e6),
        replay_bytes: Some(replay_bytes),
        replay_server_cores: replay_cpu.server.map(|s| s / replay_s),
        replay_bench_cores: replay_cpu.bench.map(|s| s / replay_s),
        disk_bytes_per_token: written
            .filter(|_| acked > 0)
            .map(|w| w as f64 / acked as f64),
        server_rss_mib: memory.map(|m| m.rss_kib as f64 / 1024.0),
        server_peak_rss_mib: memory.map(|m| m.peak_kib as f64 / 1024.0),
        server_cpu_us_per_token: cpu.server_us_per(acked),
        bench_cpu_us_per_token: cpu.bench_us_per(acked),
        other_processes_cores: cpu.others_cores(load_s),
        errors: counters.errors.load(Ordering::Relaxed),
        first_error,
    }
}
