//! The object-store tier scenario: how fast ended recordings are sealed into SeaweedFS, and
//! how replay from the object store compares with local replay of the same recordings.
//!
//! One `weed mini` and two tapedecks on it: A records the recordings (sets of N completed
//! recordings of a given size); sealing is timed from A's `--metrics-listen` counter
//! `tapedeck_sealed_recordings_total`. Then every recording is replayed from A (local disk)
//! and from B, an instance on an empty data dir that finds them in the object store: first
//! some one at a time (first-byte latency without queueing), then all of them, several at a
//! time (MB/s, and first-byte latency under that load).
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use hdrhistogram::Histogram;
use serde::Serialize;
use tapedeck::pb::ReplayRequest;
use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tonic::transport::{Channel, Endpoint};

use super::progress_bar;
use crate::procfs;
use crate::report;
use crate::seaweed::Seaweed;
use crate::targets::{
    Api, ChildGuard, Environment, Producer, Tapedeck, Target, free_port, temp_dir, wait_ready,
};
use crate::workload::encode_token;

/// How long sealing may take after the last recording ended before the scenario gives up.
const SEAL_LIMIT: Duration = Duration::from_secs(120);
/// How often the sealed counter is read while waiting.
const POLL: Duration = Duration::from_millis(10);
/// Recordings replayed one at a time, from each instance, per set.
const SERIAL_REPLAYS: usize = 100;

/// One set of completed recordings of one size.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TierSet {
    pub recordings: usize,
    pub tokens_per_recording: usize,
    pub token_bytes: usize,
}

impl TierSet {
    fn recording_bytes(&self) -> u64 {
        (self.tokens_per_recording * self.token_bytes) as u64
    }
}

/// What the tier scenario runs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TierWorkload {
    pub sets: Vec<TierSet>,
    /// Recordings loaded at once.
    pub load_concurrency: usize,
    /// Recordings replayed at once in the throughput pass.
    pub replay_concurrency: usize,
    /// Client connections to each instance.
    pub connections: usize,
}

/// What the tier scenario measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TierOutcome {
    pub sets: Vec<SetOutcome>,
    pub replay_concurrency: usize,
}

/// One set's numbers.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SetOutcome {
    pub set: TierSet,
    /// Bytes of token text in the set.
    pub bytes: u64,
    pub load_s: f64,
    pub load_mb_s: f64,
    /// From the first recording's end (its `SUCCESS`) until all were sealed.
    pub seal_s: f64,
    /// Token text sealed per second over `seal_s`.
    pub seal_mb_s: f64,
    /// From the last recording's end until all were sealed.
    pub sealed_after_last_end_s: f64,
    /// Bytes of objects written (`tapedeck_sealed_bytes_total`).
    pub sealed_object_bytes: u64,
    /// CPU of A and of weed while sealing, in cores (over `seal_s`, counted from the load's
    /// start: the load's CPU is in it).
    pub tapedeck_cores: Option<f64>,
    pub weed_cores: Option<f64>,
    pub local: Replays,
    pub object_store: Replays,
}

/// Replays of a set from one instance.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Replays {
    /// One at a time.
    pub serial: Pass,
    /// `replay_concurrency` at a time, every recording of the set.
    pub concurrent: Pass,
}

/// One replay pass.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Pass {
    pub recordings: usize,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_s: f64,
    /// From sending `Replay` to the first message with content.
    pub first_byte: Option<report::Latency>,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// Runs the scenario: `weed` at `weed_bin`, tapedecks of `env`.
pub(crate) async fn run_tier(
    env: &Environment,
    weed_bin: &Path,
    workload: &TierWorkload,
) -> Result<TierOutcome> {
    let seaweed = Seaweed::start(weed_bin, &env.work_dir).await?;
    let root = temp_dir(&env.work_dir, "tapedeck-tier-")?;
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let (a, a_addr) = spawn(env, &root.path().join("a"), &seaweed, Some(metrics)).await?;
    let (_b, b_addr) = spawn(env, &root.path().join("b"), &seaweed, None).await?;
    let a_env = Environment {
        tapedeck_addr: Some(a_addr),
        tapedeck_pid: Some(a.pid()),
        ..env.clone()
    };
    let loader =
        Arc::new(Tapedeck::start(&a_env, Api::Record, workload.connections, None, false).await?);
    let a_channels = channels(a_addr, workload.connections).await?;
    let b_channels = channels(b_addr, workload.connections).await?;
    let http = reqwest::Client::new();
    let mut sets = Vec::new();
    for (n, set) in workload.sets.iter().enumerate() {
        let prefix = format!("tier{n}");
        let before = Counters::read(&http, metrics).await?;
        let cpu_before = (cpu(a.pid()), cpu(seaweed.pid()));
        let load_start = Instant::now();
        let ends = load(&loader, set, workload.load_concurrency, &prefix).await?;
        let load_s = load_start.elapsed().as_secs_f64();
        let after = wait_sealed(&http, metrics, before.sealed + set.recordings as u64).await?;
        let all_sealed = Instant::now();
        let seal_cores = |now: Option<f64>, then: Option<f64>| {
            now.zip(then)
                .map(|(n, t)| (n - t) / all_sealed.duration_since(load_start).as_secs_f64())
        };
        let tapedeck_cores = seal_cores(cpu(a.pid()), cpu_before.0);
        let weed_cores = seal_cores(cpu(seaweed.pid()), cpu_before.1);
        let bytes = set.recording_bytes() * set.recordings as u64;
        let seal_s = all_sealed.duration_since(ends.first).as_secs_f64();
        let names: Vec<String> = (0..set.recordings)
            .map(|i| format!("{prefix}-{i}"))
            .collect();
        let serial = &names[..names.len().min(SERIAL_REPLAYS)];
        let expected = set.recording_bytes();
        let label = |source: &str| format!("tier {prefix} {source}");
        let local_serial = replay(&a_channels, serial, expected, 1, &label("local 1×")).await;
        let store_serial = replay(&b_channels, serial, expected, 1, &label("store 1×")).await;
        let c = workload.replay_concurrency;
        let local_all = replay(&a_channels, &names, expected, c, &label("local")).await;
        let store_all = replay(&b_channels, &names, expected, c, &label("store")).await;
        let outcome = SetOutcome {
            set: set.clone(),
            bytes,
            load_s,
            load_mb_s: bytes as f64 / 1e6 / load_s,
            seal_s,
            seal_mb_s: bytes as f64 / 1e6 / seal_s,
            sealed_after_last_end_s: all_sealed.duration_since(ends.last).as_secs_f64(),
            sealed_object_bytes: after.sealed_bytes - before.sealed_bytes,
            tapedeck_cores,
            weed_cores,
            local: Replays {
                serial: local_serial,
                concurrent: local_all,
            },
            object_store: Replays {
                serial: store_serial,
                concurrent: store_all,
            },
        };
        eprintln!("   {}", summary(&outcome));
        sets.push(outcome);
    }
    Ok(TierOutcome {
        sets,
        replay_concurrency: workload.replay_concurrency,
    })
}

/// Spawns a tapedeck on `data` sealing into `seaweed`, and waits until it answers.
async fn spawn(
    env: &Environment,
    data: &Path,
    seaweed: &Seaweed,
    metrics: Option<SocketAddr>,
) -> Result<(ChildGuard, SocketAddr)> {
    if !env.tapedeck_bin.exists() {
        bail!(
            "{} not found: build it with `cargo build --release` or pass --tapedeck-bin",
            env.tapedeck_bin.display()
        );
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let log = std::fs::File::create(data.with_extension("log"))?;
    let child = Command::new(&env.tapedeck_bin)
        .arg("serve")
        .arg("--listen")
        .arg(addr.to_string())
        .args(["--http-listen", "off"])
        .arg("--data-dir")
        .arg(data)
        .arg("--object-store")
        .arg(seaweed.url("bench"))
        .args(metrics.map(|m| format!("--metrics-listen={m}")))
        .envs(seaweed.env())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("spawning {}", env.tapedeck_bin.display()))?;
    let mut child = ChildGuard::new(child);
    wait_ready(&mut child, "tapedeck", || async {
        let channel = Endpoint::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        ResponseRecorderServiceClient::new(channel)
            .is_enabled(())
            .await?;
        Ok(())
    })
    .await?;
    Ok((child, addr))
}

async fn channels(addr: SocketAddr, n: usize) -> Result<Vec<Channel>> {
    let mut channels = Vec::new();
    for _ in 0..n.max(1) {
        channels.push(
            Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect()
                .await
                .with_context(|| format!("connecting to {addr}"))?,
        );
    }
    Ok(channels)
}

/// When the first and the last recording of a load ended (their `SUCCESS` arrived).
struct Ends {
    first: Instant,
    last: Instant,
}

/// Records `set` through `target`, `concurrency` recordings at a time, named `prefix-N`.
async fn load(
    target: &Arc<Tapedeck>,
    set: &TierSet,
    concurrency: usize,
    prefix: &str,
) -> Result<Ends> {
    let bar = progress_bar(&format!("tier {prefix} load"), set.recordings as u64);
    let next = Arc::new(AtomicUsize::new(0));
    let ends: Arc<Mutex<Option<Ends>>> = Arc::default();
    let mut loaders = JoinSet::new();
    for lane in 0..concurrency.max(1) {
        let (target, next, bar, ends) = (target.clone(), next.clone(), bar.clone(), ends.clone());
        let (set, prefix) = (set.clone(), prefix.to_string());
        loaders.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= set.recordings {
                    return anyhow::Ok(());
                }
                let mut producer = target.record(lane, &format!("{prefix}-{i}")).await?;
                let batch = (0..set.tokens_per_recording)
                    .map(|seq| encode_token(0, seq as u32, set.token_bytes))
                    .collect();
                producer.load(batch).await?;
                producer.finish().await?;
                let now = Instant::now();
                let mut ends = ends.lock().await;
                match ends.as_mut() {
                    Some(ends) => ends.last = ends.last.max(now),
                    None => {
                        *ends = Some(Ends {
                            first: now,
                            last: now,
                        })
                    }
                }
                bar.inc(1);
            }
        });
    }
    while let Some(loaded) = loaders.join_next().await {
        loaded??;
    }
    bar.finish_and_clear();
    let ends = ends.lock().await.take();
    ends.ok_or_else(|| anyhow!("the set has no recordings"))
}

/// A's tier counters.
struct Counters {
    sealed: u64,
    sealed_bytes: u64,
}

impl Counters {
    /// Reads them from the metrics endpoint at `addr` (a counter not yet registered is 0).
    async fn read(http: &reqwest::Client, addr: SocketAddr) -> Result<Counters> {
        let text = http
            .get(format!("http://{addr}/metrics"))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let value = |name: &str| {
            text.lines()
                .find_map(|line| {
                    let (metric, value) = line.split_once(' ')?;
                    (metric == name).then(|| value.trim().parse::<f64>().ok())?
                })
                .map_or(0, |v| v as u64)
        };
        Ok(Counters {
            sealed: value("tapedeck_sealed_recordings_total"),
            sealed_bytes: value("tapedeck_sealed_bytes_total"),
        })
    }
}

/// Reads the counters until `sealed` recordings are sealed; returns them then.
async fn wait_sealed(http: &reqwest::Client, addr: SocketAddr, sealed: u64) -> Result<Counters> {
    let started = Instant::now();
    loop {
        let counters = Counters::read(http, addr).await?;
        if counters.sealed >= sealed {
            return Ok(counters);
        }
        if started.elapsed() > SEAL_LIMIT {
            bail!(
                "{} of {sealed} recordings sealed after {SEAL_LIMIT:?}",
                counters.sealed
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Replays `names` whole, `concurrency` at a time, over `channels`; each must hold `expected`
/// bytes.
async fn replay(
    channels: &[Channel],
    names: &[String],
    expected: u64,
    concurrency: usize,
    label: &str,
) -> Pass {
    let bar = progress_bar(label, names.len() as u64);
    let names: Arc<Vec<String>> = Arc::new(names.to_vec());
    let next = Arc::new(AtomicUsize::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error: Arc<Mutex<Option<String>>> = Arc::default();
    let latencies: Arc<Mutex<Histogram<u64>>> = Arc::new(Mutex::new(report::histogram()));
    let started = Instant::now();
    let mut readers = JoinSet::new();
    for lane in 0..concurrency.max(1) {
        let channel = channels[lane % channels.len()].clone();
        let (names, next, bytes, errors, first_error, latencies, bar) = (
            names.clone(),
            next.clone(),
            bytes.clone(),
            errors.clone(),
            first_error.clone(),
            latencies.clone(),
            bar.clone(),
        );
        readers.spawn(async move {
            let mut client = ResponseRecorderServiceClient::new(channel);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(name) = names.get(i) else {
                    return;
                };
                let outcome = read_whole(&mut client, name).await;
                let failure = match outcome {
                    Ok((read, first)) => {
                        bytes.fetch_add(read, Ordering::Relaxed);
                        if let Some(first) = first {
                            latencies
                                .lock()
                                .await
                                .saturating_record(first.as_micros().max(1) as u64);
                        }
                        (read != expected)
                            .then(|| format!("{name}: replayed {read} bytes, not {expected}"))
                    }
                    Err(err) => Some(format!("{name}: {err:#}")),
                };
                if let Some(failure) = failure {
                    errors.fetch_add(1, Ordering::Relaxed);
                    first_error.lock().await.get_or_insert(failure);
                }
                bar.inc(1);
            }
        });
    }
    while readers.join_next().await.is_some() {}
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let bytes = bytes.load(Ordering::Relaxed);
    let latencies = latencies.lock().await;
    let first_error = first_error.lock().await.clone();
    Pass {
        recordings: names.len(),
        bytes,
        seconds,
        mb_s: bytes as f64 / 1e6 / seconds,
        first_byte: report::Latency::of(&latencies),
        errors: errors.load(Ordering::Relaxed),
        first_error,
    }
}

/// Replays `name` from its start; returns its bytes and when the first of them arrived.
async fn read_whole(
    client: &mut ResponseRecorderServiceClient<Channel>,
    name: &str,
) -> Result<(u64, Option<Duration>)> {
    let sent = Instant::now();
    let mut stream = client
        .replay(ReplayRequest {
            conversation_id: name.as_bytes().to_vec(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let (mut bytes, mut first) = (0, None);
    while let Some(message) = stream.message().await? {
        if first.is_none() && !message.content.is_empty() {
            first = Some(sent.elapsed());
        }
        bytes += message.content.len() as u64;
    }
    Ok((bytes, first))
}

fn cpu(pid: u32) -> Option<f64> {
    procfs::cpu_seconds(Some(pid))
}

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn p50(pass: &Pass) -> f64 {
    pass.first_byte.as_ref().map_or(f64::NAN, |l| l.p50_ms)
}

fn p99(pass: &Pass) -> f64 {
    pass.first_byte.as_ref().map_or(f64::NAN, |l| l.p99_ms)
}

fn summary(o: &SetOutcome) -> String {
    let (local, store) = (&o.local.concurrent, &o.object_store.concurrent);
    format!(
        "{} × {}: load {:.1} MB/s, sealed {:.1} MB/s ({:.2} s after the last end), replay local {:.1} / store {:.1} MB/s, first byte p50 {:.2} / {:.2} ms{}",
        o.set.recordings,
        size(o.set.recording_bytes()),
        o.load_mb_s,
        o.seal_mb_s,
        o.sealed_after_last_end_s,
        local.mb_s,
        store.mb_s,
        p50(&o.local.serial),
        p50(&o.object_store.serial),
        match local.errors + store.errors + o.local.serial.errors + o.object_store.serial.errors {
            0 => String::new(),
            n => format!(", errors {n}"),
        }
    )
}

/// The scenario's tables, one per set.
pub(crate) fn table(outcome: &TierOutcome) -> String {
    let mut out = String::new();
    for o in &outcome.sets {
        out.push_str(&format!(
            "\n### tier: {} completed recordings × {} ({} tokens × {} B), sealed into SeaweedFS\n\n",
            o.set.recordings,
            size(o.set.recording_bytes()),
            o.set.tokens_per_recording,
            o.set.token_bytes
        ));
        let cores = |c: Option<f64>| c.map_or("-".to_string(), |c| format!("{c:.2}"));
        out.push_str(&format!(
            "load {:.1} MB/s ({:.2} s); sealed {:.1} MB/s of text ({:.2} s from the first end, \
             {:.2} s after the last; {:.1} MB of objects); CPU while loading and sealing: \
             tapedeck {} cores, weed {} cores\n\n",
            o.load_mb_s,
            o.load_s,
            o.seal_mb_s,
            o.seal_s,
            o.sealed_after_last_end_s,
            o.sealed_object_bytes as f64 / 1e6,
            cores(o.tapedeck_cores),
            cores(o.weed_cores),
        ));
        out.push_str("| replay | local (A) | object store (B) | store / local |\n");
        out.push_str("|---|---:|---:|---:|\n");
        let mut row = |name: String, local: f64, store: f64, digits: usize| {
            out.push_str(&format!(
                "| {name} | {local:.digits$} | {store:.digits$} | {:.2}× |\n",
                store / local
            ));
        };
        let (ls, ss) = (&o.local.serial, &o.object_store.serial);
        let (lc, sc) = (&o.local.concurrent, &o.object_store.concurrent);
        let one = format!("{} one at a time", ls.recordings);
        let all = format!("{} {} at a time", lc.recordings, outcome.replay_concurrency);
        row(format!("{one}: MB/s"), ls.mb_s, ss.mb_s, 1);
        row(format!("{one}: first byte p50 ms"), p50(ls), p50(ss), 2);
        row(format!("{one}: first byte p99 ms"), p99(ls), p99(ss), 2);
        row(format!("{all}: MB/s"), lc.mb_s, sc.mb_s, 1);
        row(format!("{all}: first byte p50 ms"), p50(lc), p50(sc), 2);
        row(format!("{all}: first byte p99 ms"), p99(lc), p99(sc), 2);
        let errors = ls.errors + ss.errors + lc.errors + sc.errors;
        if errors > 0 {
            let first = [ls, ss, lc, sc]
                .iter()
                .find_map(|p| p.first_error.clone())
                .unwrap_or_default();
            out.push_str(&format!("\nerrors: {errors} (first: {first})\n"));
        }
    }
    out
}
