//! The restart scenario: what an operator waits for after a crash. A tapedeck is filled with
//! completed recordings (bulk load: MB/s, peak memory, file size against the data), SIGKILLed,
//! and started again. Then, twice, more recordings are loaded (just under a checkpoint's worth
//! at the default `--checkpoint-size`, the longest log a crash can leave) and it is SIGKILLed:
//! it is started again with the page cache as the kill left it ("hot"), and the second time
//! after dropping the page cache ("cold"). Last it is stopped cleanly and started again
//! ("clean"). Each start is timed until it answers a call, the last recording of the first
//! load is read back whole, and its memory is read once it has been idle for a second.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tapedeck::pb::ReplayRequest;
use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tokio::task::JoinSet;
use tonic::transport::Endpoint;

use super::progress_bar;
use crate::procfs;
use crate::targets::{
    Api, ChildGuard, Environment, Producer, Tapedeck, Target, free_port, temp_dir,
};
use crate::workload::{ReplayWorkload, encode_token};

/// How long a start may take before the scenario gives up on it.
const START_LIMIT: Duration = Duration::from_secs(120);
/// Idle time before a started server's memory is read.
const SETTLE: Duration = Duration::from_secs(1);

/// What the restart scenario measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RestartOutcome {
    pub tapedeck_bin: PathBuf,
    pub recordings: usize,
    pub tokens_per_recording: usize,
    pub token_bytes: usize,
    /// Bytes of token text loaded.
    pub live_bytes: u64,
    pub load_s: f64,
    pub load_mb_s: f64,
    pub load_tok_s: f64,
    /// The server's peak resident memory during the load.
    pub load_peak_rss_mib: f64,
    /// Bytes of the data dir's files once loaded (and killed): their apparent sizes.
    pub data_dir_bytes: u64,
    /// Bytes of disk the data dir's files take (their allocated blocks): redb grows a file
    /// under 4 GiB by doubling its length, and what it has not written yet is a hole.
    pub data_dir_disk_bytes: u64,
    pub hot: Start,
    /// `None` when the page cache could not be dropped (not root).
    pub cold: Option<Start>,
    pub clean: Start,
}

/// One start of the server on an existing data dir.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Start {
    /// From spawning the process to its first answered call.
    pub serving_s: f64,
    /// Resident memory once idle for [`SETTLE`].
    pub rss_mib: f64,
}

/// Runs the scenario with the tapedeck binary of `env`.
pub(crate) async fn run_restart(
    env: &Environment,
    workload: &ReplayWorkload,
) -> Result<RestartOutcome> {
    let root = temp_dir(&env.work_dir, "tapedeck-restart-")?;
    let data = root.path().join("data");
    let live_bytes =
        (workload.recordings * workload.tokens_per_recording * workload.token_bytes) as u64;

    // Load, then SIGKILL.
    let (server, addr) = spawn(env, &data).await?;
    let pid = server.pid();
    let load_s = load(env, addr, pid, workload, "restart").await?;
    let load_peak = procfs::memory(Some(pid)).map_or(0.0, |m| m.peak_kib as f64 / 1024.0);
    drop(server);
    let (data_dir_bytes, data_dir_disk_bytes) = dir_bytes(&data)?;

    let check = Check {
        name: name("restart", workload.recordings - 1),
        bytes: (workload.tokens_per_recording * workload.token_bytes) as u64,
    };
    // The first start after the load replays whatever log the kill left (more or less of a
    // checkpoint's worth); the timed ones below each replay just under a whole one.
    let (server, _) = spawn(env, &data).await?;
    drop(server);
    crash_with_a_log(env, &data, workload).await?;
    let hot = timed_start(env, &data, &check).await?;
    crash_with_a_log(env, &data, workload).await?;
    let cold = if drop_page_cache() {
        Some(timed_start(env, &data, &check).await?)
    } else {
        eprintln!("   restart: cannot drop the page cache (needs root): no cold start measured");
        None
    };
    // Clean: a start that stops with SIGTERM, then the timed start.
    let (server, _) = spawn(env, &data).await?;
    terminate(server)?;
    let clean = timed_start(env, &data, &check).await?;
    Ok(RestartOutcome {
        tapedeck_bin: env.tapedeck_bin.clone(),
        recordings: workload.recordings,
        tokens_per_recording: workload.tokens_per_recording,
        token_bytes: workload.token_bytes,
        live_bytes,
        load_s,
        load_mb_s: live_bytes as f64 / 1e6 / load_s,
        load_tok_s: (workload.recordings * workload.tokens_per_recording) as f64 / load_s,
        load_peak_rss_mib: load_peak,
        data_dir_bytes,
        data_dir_disk_bytes,
        hot,
        cold,
        clean,
    })
}

/// The recording loaded last, and its length: read back after each start.
struct Check {
    name: String,
    bytes: u64,
}

fn name(prefix: &str, i: usize) -> String {
    format!("{prefix}-{i}")
}

/// Starts the server on `data`, loads 30 recordings of 1,000 1 KiB tokens (just under the
/// 32 MiB of log at which tapedeck checkpoints by default: the longest log a crash can leave)
/// and SIGKILLs it.
async fn crash_with_a_log(env: &Environment, data: &Path, workload: &ReplayWorkload) -> Result<()> {
    let more = ReplayWorkload {
        recordings: 30,
        tokens_per_recording: 1_000,
        token_bytes: 1_024,
        ..workload.clone()
    };
    let (server, addr) = spawn(env, data).await?;
    load(env, addr, server.pid(), &more, "more").await?;
    drop(server);
    Ok(())
}

/// Spawns the server on `data` and waits until it answers; returns it and its address.
async fn spawn(env: &Environment, data: &Path) -> Result<(ChildGuard, SocketAddr)> {
    let (mut child, addr) = spawn_process(env, data)?;
    let started = Instant::now();
    while !answers(addr).await {
        child.check_running("tapedeck")?;
        if started.elapsed() > START_LIMIT {
            bail!("tapedeck did not answer within {START_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok((child, addr))
}

fn spawn_process(env: &Environment, data: &Path) -> Result<(ChildGuard, SocketAddr)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data.with_extension("log"))?;
    let child = Command::new(&env.tapedeck_bin)
        .arg("serve")
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--http-listen")
        .arg("off")
        .arg("--data-dir")
        .arg(data)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("spawning {}", env.tapedeck_bin.display()))?;
    Ok((ChildGuard::new(child), addr))
}

/// Whether the server at `addr` answers a call.
async fn answers(addr: SocketAddr) -> bool {
    let Ok(endpoint) = Endpoint::from_shared(format!("http://{addr}")) else {
        return false;
    };
    let Ok(channel) = endpoint.connect().await else {
        return false;
    };
    ResponseRecorderServiceClient::new(channel)
        .is_enabled(())
        .await
        .is_ok()
}

/// Starts the server on `data`, times it until it answers, checks that `check` replays
/// whole, reads its memory once idle, and SIGKILLs it.
async fn timed_start(env: &Environment, data: &Path, check: &Check) -> Result<Start> {
    let started = Instant::now();
    let (server, addr) = spawn(env, data).await?;
    let serving_s = started.elapsed().as_secs_f64();
    let replayed = replay_bytes(addr, &check.name).await?;
    if replayed != check.bytes {
        bail!(
            "{} replayed {replayed} bytes after the restart, not {}",
            check.name,
            check.bytes
        );
    }
    tokio::time::sleep(SETTLE).await;
    let rss_mib = procfs::memory(Some(server.pid())).map_or(0.0, |m| m.rss_kib as f64 / 1024.0);
    drop(server);
    Ok(Start { serving_s, rss_mib })
}

async fn replay_bytes(addr: SocketAddr, name: &str) -> Result<u64> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut stream = ResponseRecorderServiceClient::new(channel)
        .replay(ReplayRequest {
            conversation_id: name.as_bytes().to_vec(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut bytes = 0;
    while let Some(message) = stream.message().await? {
        bytes += message.content.len() as u64;
    }
    Ok(bytes)
}

/// Loads the workload's recordings through the server at `addr`, named `prefix-N`; returns the
/// seconds it took.
async fn load(
    env: &Environment,
    addr: SocketAddr,
    pid: u32,
    workload: &ReplayWorkload,
    prefix: &'static str,
) -> Result<f64> {
    let env = Environment {
        tapedeck_addr: Some(addr),
        tapedeck_pid: Some(pid),
        ..env.clone()
    };
    let target =
        Arc::new(Tapedeck::start(&env, Api::Record, workload.connections, None, false).await?);
    let bar = progress_bar("restart load", workload.recordings as u64);
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut loaders = JoinSet::new();
    for lane in 0..workload.load_concurrency.max(1) {
        let (target, next, bar) = (target.clone(), next.clone(), bar.clone());
        let (recordings, tokens, token_bytes) = (
            workload.recordings,
            workload.tokens_per_recording,
            workload.token_bytes,
        );
        loaders.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= recordings {
                    return anyhow::Ok(());
                }
                let mut producer = target.record(lane, &name(prefix, i)).await?;
                let batch = (0..tokens)
                    .map(|seq| encode_token(0, seq as u32, token_bytes))
                    .collect();
                producer.load(batch).await?;
                producer.finish().await?;
                bar.inc(1);
            }
        });
    }
    while let Some(loaded) = loaders.join_next().await {
        loaded??;
    }
    bar.finish_and_clear();
    Ok(started.elapsed().as_secs_f64())
}

/// Stops the server with SIGTERM and waits for it to exit.
fn terminate(mut server: ChildGuard) -> Result<()> {
    server.terminate()
}

/// Bytes of the files in `dir` (not recursive): their apparent sizes, and the disk their
/// allocated blocks take.
fn dir_bytes(dir: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let (mut apparent, mut on_disk) = (0, 0);
    for entry in std::fs::read_dir(dir)? {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            apparent += meta.len();
            on_disk += meta.blocks() * 512;
        }
    }
    Ok((apparent, on_disk))
}

/// Writes dirty pages out and drops the page cache; `false` if not allowed.
fn drop_page_cache() -> bool {
    let synced = Command::new("sync").status().is_ok_and(|s| s.success());
    synced && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// The scenario's table.
pub(crate) fn table(outcome: &RestartOutcome) -> String {
    let mut out = String::new();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    out.push_str(&format!(
        "\n### restart: {} recordings × {} tokens × {} B ({:.0} MiB of text), {}\n\n",
        outcome.recordings,
        outcome.tokens_per_recording,
        outcome.token_bytes,
        mib(outcome.live_bytes),
        outcome.tapedeck_bin.display()
    ));
    out.push_str("| measure | value | goal |\n|---|---:|---|\n");
    let mut row = |name: &str, value: String, goal: &str| {
        out.push_str(&format!("| {name} | {value} | {goal} |\n"));
    };
    row(
        "bulk load MB/s",
        format!("{:.1}", outcome.load_mb_s),
        "≥ 100",
    );
    row("bulk load tok/s", format!("{:.0}", outcome.load_tok_s), "");
    row(
        "peak RSS during the load MiB",
        format!("{:.0}", outcome.load_peak_rss_mib),
        "≤ Redis's in (b)",
    );
    let ratio = |bytes: u64| {
        let ratio = bytes as f64 / outcome.live_bytes as f64;
        format!("{ratio:.2}× ({:.0} MiB)", mib(bytes))
    };
    row(
        "data dir on disk / live data",
        ratio(outcome.data_dir_disk_bytes),
        "≤ 1.3×",
    );
    row(
        "data dir, apparent size / live data",
        ratio(outcome.data_dir_bytes),
        "",
    );
    row(
        "serving after SIGKILL, hot cache s",
        format!("{:.3}", outcome.hot.serving_s),
        "≤ 1",
    );
    let cold = outcome
        .cold
        .map_or("-".to_string(), |c| format!("{:.3}", c.serving_s));
    row("serving after SIGKILL, cold cache s", cold, "≤ 3");
    row(
        "serving after a clean stop s",
        format!("{:.3}", outcome.clean.serving_s),
        "",
    );
    row(
        "RSS after the crash restart MiB",
        format!("{:.1}", outcome.hot.rss_mib),
        "",
    );
    row(
        "RSS after a clean restart MiB",
        format!("{:.1}", outcome.clean.rss_mib),
        "",
    );
    row(
        "crash / clean restart RSS",
        format!(
            "{:.2}×",
            outcome.hot.rss_mib / outcome.clean.rss_mib.max(0.1)
        ),
        "≤ 2×",
    );
    out
}
