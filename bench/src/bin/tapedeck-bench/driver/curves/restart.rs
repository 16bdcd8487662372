//! The restart curve: crash restart time, and the memory the restarted server settles at,
//! against stored data. One data dir is loaded in steps up to each size, in the restart
//! scenario's recordings (1,000 tokens of 1 KiB) so the two compare; at each size the server is
//! SIGKILLed, started once, crashed again with just under a checkpoint's worth of log (the
//! longest a crash can leave), and the next start is timed: the restart scenario's hot start.
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::chart::{self, Chart, Series};
use super::growth::{Expectation, Growth, Verdict, verdict};
use crate::driver::crash::{self, Check, Load, Start};
use crate::targets::{Environment, temp_dir};
use crate::workload::{self, ReplayWorkload};

/// Tokens in each loaded recording, as in the restart scenario.
const TOKENS_PER_RECORDING: usize = 1_000;
/// Bytes of each token, as in the restart scenario.
const TOKEN_BYTES: usize = 1_024;
const GIB: f64 = (1u64 << 30) as f64;

const RESTART_TIME: Expectation = Expectation {
    growth: Growth::Flat,
    why: "a crash leaves at most one checkpoint's log to replay (--checkpoint-size) and quick \
          repair spares redb a walk of its file; only the scan of the recordings' rows for \
          live ones grows with the data, ~1,000 rows a GiB here",
};
const RESTART_RSS: Expectation = Expectation {
    growth: Growth::Flat,
    why: "redb's cache is capped (--cache-size), the file is reopened after the log's replay \
          to drop what that read, and nothing else held in memory is per stored byte",
};

/// One size of the curve.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Point {
    /// The size asked for, in GiB of token text.
    pub gib: f64,
    /// Recordings stored, and their bytes of token text (the 30 MiB of the last crash's log
    /// come on top).
    pub recordings: usize,
    pub stored_bytes: u64,
    /// The load of this step: MB (10^6 bytes) of token text per second.
    pub load_mb_s: f64,
    /// Disk the data dir's files take.
    pub data_dir_disk_bytes: u64,
    pub start: Start,
}

/// The measured curve.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Curve {
    pub points: Vec<Point>,
    pub verdicts: Vec<Verdict>,
}

/// Loads, crashes and restarts one data dir at each of `sizes_gib` (ascending).
pub(crate) async fn run(env: &Environment, sizes_gib: &[f64]) -> Result<Curve> {
    let root = temp_dir(&env.work_dir, "tapedeck-curve-restart-")?;
    let data = root.path().join("data");
    let base = workload::standard_replay();
    let workload = ReplayWorkload {
        recordings: 0,
        tokens_per_recording: TOKENS_PER_RECORDING,
        token_bytes: TOKEN_BYTES,
        replay_concurrency: 1,
        ..base
    };
    let recording_bytes = (TOKENS_PER_RECORDING * TOKEN_BYTES) as u64;
    let mut points = Vec::new();
    let mut loaded = 0;
    for &gib in sizes_gib {
        let target = ((gib * GIB) / recording_bytes as f64).ceil().max(1.0) as usize;
        let (server, addr) = crash::spawn(env, &data).await?;
        let loading = Load {
            prefix: "curve",
            names: loaded..target.max(loaded),
            label: "restart curve load",
        };
        let load_s = crash::load(env, addr, server.pid(), &workload, &loading).await?;
        let step_bytes = (loading.names.len() as u64 * recording_bytes) as f64;
        loaded = loaded.max(target);
        drop(server);
        // The first start replays what the kill left; the timed one, a checkpoint's worth.
        let (server, _) = crash::spawn(env, &data).await?;
        drop(server);
        crash::crash_with_a_log(env, &data, &workload).await?;
        let check = Check {
            name: crash::name("curve", loaded - 1),
            bytes: recording_bytes,
        };
        let start = crash::timed_start(env, &data, &check).await?;
        let (_, data_dir_disk_bytes) = crash::dir_bytes(&data)?;
        eprintln!(
            "   restart curve: {gib} GiB: serving after {:.3} s, {:.1} MiB RSS",
            start.serving_s, start.rss_mib
        );
        points.push(Point {
            gib,
            recordings: loaded,
            stored_bytes: loaded as u64 * recording_bytes,
            load_mb_s: step_bytes / 1e6 / load_s.max(1e-9),
            data_dir_disk_bytes,
            start,
        });
    }
    let time: Vec<_> = points.iter().map(|p| (p.gib, p.start.serving_s)).collect();
    let rss: Vec<_> = points.iter().map(|p| (p.gib, p.start.rss_mib)).collect();
    let verdicts = vec![
        verdict("crash restart time", "s", "GiB", &time, &RESTART_TIME),
        verdict(
            "RSS after a crash restart",
            "MiB",
            "GiB",
            &rss,
            &RESTART_RSS,
        ),
    ];
    Ok(Curve { points, verdicts })
}

/// The curve's table.
pub(crate) fn table(curve: &Curve) -> String {
    let mut out = format!(
        "\n### curve: crash restart against stored data ({TOKENS_PER_RECORDING} × {TOKEN_BYTES} B \
         recordings)\n\n| stored GiB | recordings | data dir on disk GiB | load MB/s | \
         serving after SIGKILL s | RSS after it MiB |\n|---:|---:|---:|---:|---:|---:|\n"
    );
    for p in &curve.points {
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.1} | {:.3} | {:.1} |\n",
            p.gib,
            p.recordings,
            p.data_dir_disk_bytes as f64 / GIB,
            p.load_mb_s,
            p.start.serving_s,
            p.start.rss_mib
        ));
    }
    for v in &curve.verdicts {
        out.push_str(&format!("\n- {}", v.line));
    }
    out.push('\n');
    out
}

/// Draws `restart-time.svg` and `restart-rss.svg` in `dir`.
pub(crate) fn draw(curve: &Curve, dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let series = |label: &str, points: Vec<(f64, f64)>| Series {
        label: label.to_string(),
        points,
        dashed: false,
        color: 0,
    };
    let time = Chart {
        title: "tapedeck: crash restart time against stored data",
        x_label: "stored token text (GiB, log scale)",
        y_label: "SIGKILL to serving (s)",
        series: vec![series(
            "serving after SIGKILL, a checkpoint's log to replay",
            curve
                .points
                .iter()
                .map(|p| (p.gib, p.start.serving_s))
                .collect(),
        )],
        notes: vec![curve.verdicts[0].line.clone()],
    };
    let rss = Chart {
        title: "tapedeck: memory after a crash restart against stored data",
        x_label: "stored token text (GiB, log scale)",
        y_label: "RSS after 1 s idle (MiB)",
        series: vec![series(
            "RSS after the restart",
            curve
                .points
                .iter()
                .map(|p| (p.gib, p.start.rss_mib))
                .collect(),
        )],
        notes: vec![curve.verdicts[1].line.clone()],
    };
    let paths = vec![dir.join("restart-time.svg"), dir.join("restart-rss.svg")];
    chart::draw(&time, &paths[0])?;
    chart::draw(&rss, &paths[1])?;
    Ok(paths)
}
