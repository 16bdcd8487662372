//! Drives one target through one scenario: producers (open or closed loop) with live
//! subscribers, or load-then-replay; counts acks, measures latency, disk writes and memory.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinSet;

use crate::procfs;
use crate::report::{self, Latency, Outcome};
use crate::targets::{Producer, Subscriber, Target};
use crate::workload::{LiveWorkload, ReplayWorkload, decode_token, encode_token};

/// How long a phase may run past its duration (finishing recordings, subscribers draining)
/// before it is abandoned.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// How long a subscriber may lag behind its producer's completion.
const SUBSCRIBER_LIMIT: Duration = Duration::from_secs(60);

/// Nanoseconds since the run's start, shared by producers and subscribers.
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.0).as_nanos() as u64
    }
}

/// Counters shared by every task of a phase.
#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    acked: AtomicU64,
    received: AtomicU64,
    expected: AtomicU64,
    sequence_errors: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Counters {
    fn error(&self, err: &anyhow::Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|e| e.into_inner());
        if first.is_none() {
            *first = Some(format!("{err:#}"));
        }
    }
}

/// Identifies this run's recordings, so an `--addr` server can be reused across runs.
fn run_tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("bench-{:x}", nanos % (1 << 48))
}

fn progress_bar(label: &str, seconds: u64) -> ProgressBar {
    let bar = ProgressBar::new(seconds);
    let style = ProgressStyle::with_template("{prefix:>28} [{bar:30}] {pos:>3}/{len}s {msg}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(label.to_string());
    bar
}

/// Latencies a producer collected: send → subscriber receive, and send → ack (targets that
/// ack each token).
struct Latencies {
    delivery: Histogram<u64>,
    ack: Histogram<u64>,
}

impl Latencies {
    fn new() -> Self {
        Self {
            delivery: report::histogram(),
            ack: report::histogram(),
        }
    }

    fn add(&mut self, other: &Latencies) {
        let _ = self.delivery.add(&other.delivery);
        let _ = self.ack.add(&other.ack);
    }
}

/// Runs a live workload against `target`; `label` is `scenario/target` for progress output.
pub async fn run_live<T: Target>(
    target: Arc<T>,
    workload: &LiveWorkload,
    scenario: &str,
    target_name: &str,
) -> Outcome {
    let pid = target.data_pid();
    let written_before = procfs::write_bytes(pid);
    let cpu_before = Cpu::now(pid);
    let counters = Arc::new(Counters::default());
    let clock = Clock(Instant::now());
    let start = Instant::now();
    let deadline = start + workload.duration;
    let tag = run_tag();

    let bar = progress_bar(
        &format!("{scenario}/{target_name}"),
        workload.duration.as_secs(),
    );
    let ticker = {
        let (bar, counters) = (bar.clone(), counters.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let elapsed = start.elapsed().as_secs_f64();
                bar.set_position(elapsed as u64);
                let acked = counters.acked.load(Ordering::Relaxed);
                bar.set_message(format!(
                    "sent {} acked {} ({:.0}/s) errors {}{}",
                    counters.sent.load(Ordering::Relaxed),
                    acked,
                    acked as f64 / elapsed.max(0.001),
                    counters.errors.load(Ordering::Relaxed),
                    if Instant::now() > deadline {
                        " draining"
                    } else {
                        ""
                    }
                ));
            }
        })
    };

    let mut producers = JoinSet::new();
    for id in 0..workload.producers {
        producers.spawn(produce(
            target.clone(),
            id,
            workload.clone(),
            clock,
            deadline,
            counters.clone(),
            tag.clone(),
        ));
    }
    let mut latency = Latencies::new();
    let drained = tokio::time::timeout_at(
        (deadline + DRAIN_LIMIT).into(),
        collect(&mut producers, &mut latency),
    )
    .await;
    if drained.is_err() {
        producers.abort_all();
        counters.error(&anyhow!(
            "producers still running {DRAIN_LIMIT:?} after the deadline; abandoned"
        ));
    }
    let elapsed = start.elapsed();
    let cpu = Cpu::now(pid).since(&cpu_before);
    ticker.abort();
    bar.finish_and_clear();

    let acked = counters.acked.load(Ordering::Relaxed);
    let written = procfs::write_bytes(pid)
        .zip(written_before)
        .map(|(after, before)| after.saturating_sub(before));
    let memory = pid.and_then(|pid| procfs::memory(Some(pid)));
    let first_error = counters
        .first_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Outcome {
        scenario: scenario.into(),
        target: target_name.into(),
        durable_acks: target.durable(),
        sent_tokens: counters.sent.load(Ordering::Relaxed),
        acked_tokens: acked,
        elapsed_s: elapsed.as_secs_f64(),
        acked_tokens_per_s: acked as f64 / elapsed.as_secs_f64(),
        latency: Latency::of(&latency.delivery),
        ack_latency: Latency::of(&latency.ack),
        received_tokens: counters.received.load(Ordering::Relaxed),
        expected_received: counters.expected.load(Ordering::Relaxed),
        sequence_errors: counters.sequence_errors.load(Ordering::Relaxed),
        load_s: None,
        replay_mb_per_s: None,
        replay_bytes: None,
        replay_server_cores: None,
        replay_bench_cores: None,
        disk_bytes_per_token: written
            .filter(|_| acked > 0)
            .map(|w| w as f64 / acked as f64),
        server_rss_mib: memory.map(|m| m.rss_kib as f64 / 1024.0),
        server_peak_rss_mib: memory.map(|m| m.peak_kib as f64 / 1024.0),
        server_cpu_us_per_token: cpu.server_us_per(acked),
        bench_cpu_us_per_token: cpu.bench_us_per(acked),
        other_processes_cores: cpu.others_cores(elapsed.as_secs_f64()),
        errors: counters.errors.load(Ordering::Relaxed),
        first_error,
    }
}

/// CPU used by the server process (if any), by this process, and by the whole machine.
struct Cpu {
    server: Option<f64>,
    bench: Option<f64>,
    machine: Option<f64>,
}

impl Cpu {
    fn now(pid: Option<u32>) -> Cpu {
        Cpu {
            server: pid.and_then(|pid| procfs::cpu_seconds(Some(pid))),
            bench: procfs::cpu_seconds(None),
            machine: procfs::machine_busy_seconds(),
        }
    }

    fn since(&self, before: &Cpu) -> Cpu {
        let diff = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a - b);
        Cpu {
            server: diff(self.server, before.server),
            bench: diff(self.bench, before.bench),
            machine: diff(self.machine, before.machine),
        }
    }

    /// Cores' worth of CPU that processes other than the bench and its server used over
    /// `seconds`: how busy the machine was with other work.
    fn others_cores(&self, seconds: f64) -> Option<f64> {
        let ours = self.bench.unwrap_or(0.0) + self.server.unwrap_or(0.0);
        self.machine.map(|m| ((m - ours) / seconds).max(0.0))
    }

    fn server_us_per(&self, tokens: u64) -> Option<f64> {
        self.server
            .filter(|_| tokens > 0)
            .map(|s| s * 1e6 / tokens as f64)
    }

    fn bench_us_per(&self, tokens: u64) -> Option<f64> {
        self.bench
            .filter(|_| tokens > 0)
            .map(|s| s * 1e6 / tokens as f64)
    }
}

async fn collect(producers: &mut JoinSet<Latencies>, latency: &mut Latencies) {
    while let Some(joined) = producers.join_next().await {
        if let Ok(latencies) = joined {
            latency.add(&latencies);
        }
    }
}

/// One producer: records one recording after another until the deadline.
async fn produce<T: Target>(
    target: Arc<T>,
    id: usize,
    workload: LiveWorkload,
    clock: Clock,
    deadline: Instant,
    counters: Arc<Counters>,
    tag: String,
) -> Latencies {
    let mut latency = Latencies::new();
    if let Some(rate) = workload.rate {
        // Spread the producers' ticks over one interval instead of all firing together.
        let phase = (id as f64 * 0.618_034).fract() / rate;
        tokio::time::sleep(Duration::from_secs_f64(phase)).await;
    }
    let mut n = 0;
    while Instant::now() < deadline {
        let name = format!("{tag}-p{id}-r{n}");
        n += 1;
        match record_one(&*target, id, &name, &workload, clock, deadline, &counters).await {
            Ok(latencies) => latency.add(&latencies),
            Err(err) => {
                counters.error(&err);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    latency
}

/// Records one recording with its subscribers attached from the start.
async fn record_one<T: Target>(
    target: &T,
    id: usize,
    name: &str,
    workload: &LiveWorkload,
    clock: Clock,
    deadline: Instant,
    counters: &Arc<Counters>,
) -> Result<Latencies> {
    let mut latency = Latencies::new();
    let mut producer = target.record(id, name).await?;
    let mut followers = JoinSet::new();
    for s in 0..workload.subscribers {
        let subscriber = target
            .subscribe(id + s, name)
            .await
            .context("subscribing")?;
        followers.spawn(follow(
            subscriber,
            clock,
            workload.token_bytes,
            counters.clone(),
        ));
    }
    let interval = workload
        .rate
        .map(|rate| Duration::from_secs_f64(1.0 / rate));
    let mut next = Instant::now();
    let mut sent = 0u64;
    for seq in 0..workload.tokens_per_recording {
        let sent_at = match interval {
            Some(interval) => {
                if next > Instant::now() {
                    tokio::time::sleep_until(next.into()).await;
                }
                // Open loop: latency counts from when the token was due, so a producer held up
                // by a slow ack is not excused from the delay (no coordinated omission).
                let due = next;
                next += interval;
                due
            }
            None => Instant::now(),
        };
        if Instant::now() >= deadline {
            break;
        }
        let token = encode_token(clock.ns(sent_at), seq as u32, workload.token_bytes);
        let sending = Instant::now();
        let acked = producer.send(token).await?;
        if acked > 0 {
            latency
                .ack
                .saturating_record(sending.elapsed().as_micros() as u64);
        }
        sent += 1;
        counters.sent.fetch_add(1, Ordering::Relaxed);
        counters.acked.fetch_add(acked, Ordering::Relaxed);
    }
    let acked = producer.finish().await?;
    counters.acked.fetch_add(acked, Ordering::Relaxed);
    counters
        .expected
        .fetch_add(sent * workload.subscribers as u64, Ordering::Relaxed);
    let drained = tokio::time::timeout(SUBSCRIBER_LIMIT, async {
        while let Some(joined) = followers.join_next().await {
            match joined {
                Ok(Ok(histogram)) => {
                    let _ = latency.delivery.add(&histogram);
                }
                Ok(Err(err)) => counters.error(&err.context("subscriber")),
                Err(err) => counters.error(&anyhow!("subscriber task failed: {err}")),
            }
        }
    })
    .await;
    if drained.is_err() {
        bail!("subscribers of {name} did not see its end within {SUBSCRIBER_LIMIT:?}");
    }
    Ok(latency)
}

/// One live subscriber: reads to the end, timing every token against its send time.
async fn follow<S: Subscriber>(
    mut subscriber: S,
    clock: Clock,
    token_bytes: usize,
    counters: Arc<Counters>,
) -> Result<Histogram<u64>> {
    let mut latency = report::histogram();
    let mut carry: Vec<u8> = Vec::new();
    let mut expected_seq = 0u32;
    while let Some(bytes) = subscriber.next().await? {
        let now = clock.ns(Instant::now());
        carry.extend_from_slice(&bytes);
        let whole = carry.len() / token_bytes * token_bytes;
        for token in carry[..whole].chunks(token_bytes) {
            let (sent, seq) = decode_token(token).context("malformed token")?;
            if seq != expected_seq {
                counters.sequence_errors.fetch_add(1, Ordering::Relaxed);
            }
            expected_seq = seq.wrapping_add(1);
            latency.saturating_record(now.saturating_sub(sent) / 1000);
        }
        counters
            .received
            .fetch_add((whole / token_bytes) as u64, Ordering::Relaxed);
        carry.drain(..whole);
    }
    if !carry.is_empty() {
        bail!("the recording ended inside a token");
    }
    Ok(latency)
}

/// Loads completed recordings into `target`, then replays them all; measures MB/s.
pub async fn run_replay<T: Target>(
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
    let first_error = counters
        .first_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
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
