//! The restart scenario: what an operator waits for after a crash. A tapedeck is filled with
//! completed recordings (bulk load: MB/s, peak memory, file size against the data), SIGKILLed,
//! and started again. Then, twice, more recordings are loaded (just under a checkpoint's worth
//! at the default `--checkpoint-size`, the longest log a crash can leave) and it is SIGKILLed:
//! it is started again with the page cache as the kill left it ("hot"), and the second time
//! after dropping the page cache ("cold"). Last it is stopped cleanly and started again
//! ("clean"). Each start is timed until it answers a call, the last recording of the first
//! load is read back whole, and its memory is read once it has been idle for a second.
use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;
use serde::Serialize;

use super::crash::{
    Check, Load, Start, crash_with_a_log, dir_bytes, load, name, spawn, timed_start,
};
use crate::procfs;
use crate::targets::{ChildGuard, Environment, temp_dir};
use crate::workload::ReplayWorkload;

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
    let loading = Load {
        prefix: "restart",
        names: 0..workload.recordings,
        label: "restart load",
    };
    let load_s = load(env, addr, pid, workload, &loading).await?;
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

/// Stops the server with SIGTERM and waits for it to exit.
fn terminate(mut server: ChildGuard) -> Result<()> {
    server.terminate()
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
