//! The curves scenario, tapedeck only: cost against size. Crash restart time and memory against
//! stored data, read latency against stored recordings, memory against live recordings, and
//! `Record` throughput and ack latency against producers; each as a table and SVG charts, with
//! a line saying whether it grows flat, logarithmically or linearly, and why.
mod chart;
mod growth;
mod live;
mod producers;
mod reads;
mod restart;
mod stored;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::targets::Environment;

/// Sizes of each curve; an empty list leaves that curve out.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CurvesWorkload {
    /// GiB of token text stored at each point of the restart curve (cumulative).
    pub restart_gib: Vec<f64>,
    /// Completed recordings stored at each point of the stored curve (cumulative).
    pub stored_recordings: Vec<usize>,
    /// Open `Record` streams at each point of the live curve.
    pub live_recordings: Vec<usize>,
    /// Closed-loop producers at each point of the producers curve.
    pub producers: Vec<usize>,
    /// How long each point of the producers curve runs.
    #[serde(serialize_with = "seconds")]
    pub producer_duration: Duration,
    /// Tokens in each recording of the producers curve.
    pub tokens_per_recording: usize,
    /// Where the SVG files go (created if missing).
    pub charts: PathBuf,
}

/// What the scenario measured: each curve that ran, and the charts drawn.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CurvesOutcome {
    pub restart: Option<restart::Curve>,
    pub stored: Option<stored::Curve>,
    pub live: Option<live::Curve>,
    pub producers: Option<producers::Curve>,
    pub charts: Vec<PathBuf>,
}

/// Runs every curve with sizes, each on servers of its own; a curve that fails is reported and
/// left out, and the others still run.
///
/// Fails when the open-file limit cannot be raised or the charts' directory cannot be made.
pub(crate) async fn run_curves(
    env: &Environment,
    workload: &CurvesWorkload,
) -> Result<CurvesOutcome> {
    // The live curve holds a socket per 100 streams on each side; the servers inherit this.
    crate::open_files::raise_to_maximum()?;
    std::fs::create_dir_all(&workload.charts)
        .with_context(|| format!("making {}", workload.charts.display()))?;
    let env = curves_env(env, workload);

    let restart = match workload.restart_gib.as_slice() {
        [] => None,
        sizes => reported("restart", restart::run(&env, sizes).await),
    };
    let stored = match workload.stored_recordings.as_slice() {
        [] => None,
        sizes => reported("stored", stored::run(&env, sizes).await),
    };
    let live = match workload.live_recordings.as_slice() {
        [] => None,
        sizes => reported("live", live::run(&env, sizes).await),
    };
    let producers = match workload.producers.as_slice() {
        [] => None,
        sizes => {
            let duration = workload.producer_duration;
            let tokens = workload.tokens_per_recording;
            reported(
                "producers",
                producers::run(&env, sizes, duration, tokens).await,
            )
        }
    };

    let dir = &workload.charts;
    let mut charts = Vec::new();
    let drawn = [
        restart.as_ref().map(|c| restart::draw(c, dir)),
        stored.as_ref().map(|c| stored::draw(c, dir)),
        live.as_ref().map(|c| live::draw(c, dir)),
        producers.as_ref().map(|c| producers::draw(c, dir)),
    ];
    for paths in drawn.into_iter().flatten() {
        match paths {
            Ok(paths) => charts.extend(paths),
            Err(err) => eprintln!("   curves: a chart failed: {err:#}"),
        }
    }
    Ok(CurvesOutcome {
        restart,
        stored,
        live,
        producers,
        charts,
    })
}

/// `env` for the curves' servers: a retention longer than a full run (the default 30 minutes
/// would let the sweeper collect the first recordings of the stored curve while it loads),
/// and room for every live recording the live and producers curves hold at once.
fn curves_env(env: &Environment, workload: &CurvesWorkload) -> Environment {
    let most_live = workload
        .live_recordings
        .iter()
        .chain(&workload.producers)
        .copied()
        .max()
        .unwrap_or(0);
    let mut env = env.clone();
    env.tapedeck_args.extend([
        "--retention=1d".to_string(),
        format!("--max-live-recordings={}", (most_live * 2).max(10_000)),
    ]);
    env
}

fn reported<T>(curve: &str, measured: Result<T>) -> Option<T> {
    measured
        .map_err(|err| eprintln!("   {curve} curve: failed to run: {err:#}"))
        .ok()
}

/// The scenario's tables, and where its charts are.
pub(crate) fn table(outcome: &CurvesOutcome) -> String {
    let mut out = String::new();
    if let Some(curve) = &outcome.restart {
        out.push_str(&restart::table(curve));
    }
    if let Some(curve) = &outcome.stored {
        out.push_str(&stored::table(curve));
    }
    if let Some(curve) = &outcome.live {
        out.push_str(&live::table(curve));
    }
    if let Some(curve) = &outcome.producers {
        out.push_str(&producers::table(curve));
    }
    if !outcome.charts.is_empty() {
        out.push_str("\ncharts:\n");
        for path in &outcome.charts {
            out.push_str(&format!("  {}\n", path.display()));
        }
    }
    out
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}
