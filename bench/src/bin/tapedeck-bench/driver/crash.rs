//! A tapedeck on a data dir the caller keeps across its runs: spawned, bulk-loaded with
//! completed recordings, SIGKILLed (by dropping it), and timed as it starts again. The restart
//! and curves scenarios share it.
use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;
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
use crate::targets::{Api, ChildGuard, Environment, Producer, Tapedeck, Target, free_port};
use crate::workload::{ReplayWorkload, encode_token};

/// How long a start may take before the scenario gives up on it.
const START_LIMIT: Duration = Duration::from_secs(120);
/// Idle time before a started server's memory is read.
const SETTLE: Duration = Duration::from_secs(1);

/// One start of the server on an existing data dir.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Start {
    /// From spawning the process to its first answered call.
    pub serving_s: f64,
    /// Resident memory once idle for [`SETTLE`].
    pub rss_mib: f64,
}

/// A recording loaded earlier, and its length: read back whole after each start.
pub(crate) struct Check {
    pub name: String,
    pub bytes: u64,
}

/// The name of the `i`th recording a load with `prefix` wrote.
pub(crate) fn name(prefix: &str, i: usize) -> String {
    format!("{prefix}-{i}")
}

/// Starts the server on `data`, loads 30 recordings of 1,000 1 KiB tokens (just under the
/// 32 MiB of log at which tapedeck checkpoints by default: the longest log a crash can leave)
/// and SIGKILLs it. Each call records the same 30 names, so the store does not grow by them.
pub(crate) async fn crash_with_a_log(
    env: &Environment,
    data: &Path,
    workload: &ReplayWorkload,
) -> Result<()> {
    let more = ReplayWorkload {
        recordings: 30,
        tokens_per_recording: 1_000,
        token_bytes: 1_024,
        ..workload.clone()
    };
    let (server, addr) = spawn(env, data).await?;
    let loading = Load {
        prefix: "more",
        names: 0..more.recordings,
        label: "restart load",
    };
    load(env, addr, server.pid(), &more, &loading).await?;
    drop(server);
    Ok(())
}

/// Spawns the server on `data` and waits until it answers; returns it and its address.
pub(crate) async fn spawn(env: &Environment, data: &Path) -> Result<(ChildGuard, SocketAddr)> {
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
        .args(&env.tapedeck_args)
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
pub(crate) async fn timed_start(env: &Environment, data: &Path, check: &Check) -> Result<Start> {
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

/// Which recordings a load writes: `prefix-N` for each N of `names`, shown as `label`.
pub(crate) struct Load {
    pub prefix: &'static str,
    pub names: Range<usize>,
    pub label: &'static str,
}

/// Loads `loading`'s recordings, each of the workload's tokens, through the server at `addr`
/// (pid `pid`), `workload.load_concurrency` at a time; returns the seconds it took.
pub(crate) async fn load(
    env: &Environment,
    addr: SocketAddr,
    pid: u32,
    workload: &ReplayWorkload,
    loading: &Load,
) -> Result<f64> {
    let env = Environment {
        tapedeck_addr: Some(addr),
        tapedeck_pid: Some(pid),
        ..env.clone()
    };
    let target =
        Arc::new(Tapedeck::start(&env, Api::Record, workload.connections, None, false).await?);
    let bar = progress_bar(loading.label, loading.names.len() as u64);
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(loading.names.start));
    let mut loaders = JoinSet::new();
    for lane in 0..workload.load_concurrency.max(1) {
        let (target, next, bar) = (target.clone(), next.clone(), bar.clone());
        let (end, prefix) = (loading.names.end, loading.prefix);
        let (tokens, token_bytes) = (workload.tokens_per_recording, workload.token_bytes);
        loaders.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
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

/// Bytes of the files in `dir` (not recursive): their apparent sizes, and the disk their
/// allocated blocks take.
pub(crate) fn dir_bytes(dir: &Path) -> Result<(u64, u64)> {
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
