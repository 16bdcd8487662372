//! The producers curve: `Record` throughput and ack latency against closed-loop producers. Each
//! size is scenario (b) — producers recording one recording after another as fast as the
//! stream takes tokens, no subscribers — on a fresh server, with its producer count and a
//! shorter duration. `Record` acks a recording once, after its completion is committed, so the
//! latency is that ack's: completion sent → `SUCCESS`.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::chart::{self, Chart, Series};
use super::growth::{Expectation, Growth, Verdict, verdict};
use crate::driver::run_live;
use crate::report::Latency;
use crate::targets::{Api, Environment, Tapedeck};
use crate::workload::{LiveWorkload, standard_closed};

const THROUGHPUT: Expectation = Expectation {
    growth: Growth::Flat,
    why: "group commit: one disk sync carries every waiting producer's tokens, so once a few \
          producers keep the pipeline busy the server's CPU, not their number, sets the rate",
};
const ACK_P99: Expectation = Expectation {
    growth: Growth::Linear,
    why: "a closed loop past saturation: by Little's law each recording waits producers ÷ \
          throughput, so with the rate flat the wait grows with the producers",
};

/// One size of the curve.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Point {
    pub producers: usize,
    pub acked_tokens_per_s: f64,
    /// Completion sent → `Record`'s answer.
    pub ack: Option<Latency>,
    pub server_cpu_us_per_token: Option<f64>,
    pub server_peak_rss_mib: Option<f64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// The measured curve.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Curve {
    pub tokens_per_recording: usize,
    pub duration_s: f64,
    pub points: Vec<Point>,
    pub verdicts: Vec<Verdict>,
}

/// Runs (b) on a fresh server with each of `sizes` producers for `duration`, recordings of
/// `tokens_per_recording` tokens.
pub(crate) async fn run(
    env: &Environment,
    sizes: &[usize],
    duration: Duration,
    tokens_per_recording: usize,
) -> Result<Curve> {
    let mut points = Vec::new();
    for &producers in sizes {
        let workload = LiveWorkload {
            producers,
            duration,
            tokens_per_recording,
            ..standard_closed()
        };
        let target = Tapedeck::start(env, Api::Record, workload.connections, None, false).await?;
        let outcome = run_live(Arc::new(target), &workload, "curves-producers", "tapedeck").await;
        let ack_p99 = outcome
            .completion_latency
            .as_ref()
            .map_or(0.0, |l| l.p99_ms);
        eprintln!(
            "   producers curve: {producers} producers: {:.0} tok/s, ack p99 {ack_p99:.1} ms{}",
            outcome.acked_tokens_per_s,
            match outcome.errors {
                0 => String::new(),
                n => format!(", {n} errors"),
            }
        );
        points.push(Point {
            producers,
            acked_tokens_per_s: outcome.acked_tokens_per_s,
            ack: outcome.completion_latency,
            server_cpu_us_per_token: outcome.server_cpu_us_per_token,
            server_peak_rss_mib: outcome.server_peak_rss_mib,
            errors: outcome.errors,
            first_error: outcome.first_error,
        });
    }
    let throughput: Vec<_> = points
        .iter()
        .map(|p| (p.producers as f64, p.acked_tokens_per_s))
        .collect();
    let p99: Vec<_> = points
        .iter()
        .filter_map(|p| p.ack.as_ref().map(|l| (p.producers as f64, l.p99_ms)))
        .collect();
    let verdicts = vec![
        verdict(
            "Record throughput",
            "tok/s",
            "producers",
            &throughput,
            &THROUGHPUT,
        ),
        verdict("Record ack p99", "ms", "producers", &p99, &ACK_P99),
    ];
    Ok(Curve {
        tokens_per_recording,
        duration_s: duration.as_secs_f64(),
        points,
        verdicts,
    })
}

/// The curve's table.
pub(crate) fn table(curve: &Curve) -> String {
    let mut out = format!(
        "\n### curve: Record against closed-loop producers ({} tokens a recording, {:.0} s a \
         point; ack = completion sent → SUCCESS)\n\n| producers | acked tok/s | ack p50 ms | \
         ack p99 ms | server CPU µs/tok | server peak RSS MiB | errors |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n",
        curve.tokens_per_recording, curve.duration_s
    );
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    for p in &curve.points {
        out.push_str(&format!(
            "| {} | {:.0} | {} | {} | {} | {} | {} |\n",
            p.producers,
            p.acked_tokens_per_s,
            opt(p.ack.as_ref().map(|l| l.p50_ms), 1),
            opt(p.ack.as_ref().map(|l| l.p99_ms), 1),
            opt(p.server_cpu_us_per_token, 1),
            opt(p.server_peak_rss_mib, 0),
            p.errors
        ));
    }
    for v in &curve.verdicts {
        out.push_str(&format!("\n- {}", v.line));
    }
    if let Some(error) = curve.points.iter().find_map(|p| p.first_error.as_ref()) {
        out.push_str(&format!("\n- first error: {error}"));
    }
    out.push('\n');
    out
}

/// Draws `producers-throughput.svg` and `producers-ack.svg` in `dir`.
pub(crate) fn draw(curve: &Curve, dir: &Path) -> Result<Vec<PathBuf>> {
    let x = |p: &Point| p.producers as f64;
    let throughput = Chart {
        title: "tapedeck: Record throughput against closed-loop producers",
        x_label: "producers (log scale)",
        y_label: "acknowledged tokens per second",
        series: vec![Series {
            label: "acked tok/s".into(),
            points: curve
                .points
                .iter()
                .map(|p| (x(p), p.acked_tokens_per_s))
                .collect(),
            dashed: false,
            color: 0,
        }],
        notes: vec![curve.verdicts[0].line.clone()],
    };
    let latency = |label: &str, dashed: bool, pick: fn(&Latency) -> f64| Series {
        label: label.to_string(),
        points: curve
            .points
            .iter()
            .filter_map(|p| p.ack.as_ref().map(|l| (x(p), pick(l))))
            .collect(),
        dashed,
        color: 1,
    };
    let ack = Chart {
        title: "tapedeck: Record ack latency against closed-loop producers",
        x_label: "producers (log scale)",
        y_label: "completion sent → SUCCESS (ms)",
        series: vec![
            latency("p99", false, |l| l.p99_ms),
            latency("p50", true, |l| l.p50_ms),
        ],
        notes: vec![curve.verdicts[1].line.clone()],
    };
    let paths = vec![
        dir.join("producers-throughput.svg"),
        dir.join("producers-ack.svg"),
    ];
    chart::draw(&throughput, &paths[0])?;
    chart::draw(&ack, &paths[1])?;
    Ok(paths)
}
