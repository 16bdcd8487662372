//! Results: latency histograms (HDR), one `Outcome` per scenario × target, the summary tables
//! with tapedeck/peer ratios, and the JSON document for machines.
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest latency the histograms hold, in µs; larger values are clamped to it.
const MAX_LATENCY_US: u64 = 120_000_000;

/// A latency histogram in microseconds.
pub(crate) fn histogram() -> Histogram<u64> {
    // Bounds and precision are constants that hdrhistogram accepts.
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// Percentiles of one histogram, in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Latency {
    pub samples: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub(crate) fn of(histogram: &Histogram<u64>) -> Option<Latency> {
        if histogram.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(Latency {
            samples: histogram.len(),
            p50_ms: ms(histogram.value_at_quantile(0.50)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            p999_ms: ms(histogram.value_at_quantile(0.999)),
            max_ms: ms(histogram.max()),
        })
    }
}

/// What one target did in one scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Outcome {
    pub scenario: String,
    pub target: String,
    /// Whether an ack means the token survives a machine crash.
    pub durable_acks: bool,
    /// Tokens the producers sent.
    pub sent_tokens: u64,
    /// Tokens the target confirmed as stored.
    pub acked_tokens: u64,
    /// From the first token to the last ack, in seconds.
    pub elapsed_s: f64,
    /// `acked_tokens / elapsed_s`.
    pub acked_tokens_per_s: f64,
    /// Producer send (scheduled time, in open loop) → subscriber receive.
    pub latency: Option<Latency>,
    /// Producer send → ack, for targets that ack every token.
    pub ack_latency: Option<Latency>,
    /// Producer's completion sent → its ack, which a target sends once the recording (every
    /// token of it) is stored: for tapedeck's `Record`, the call's answer.
    #[serde(default)]
    pub completion_latency: Option<Latency>,
    /// Tokens subscribers received, and how many they should have.
    pub received_tokens: u64,
    pub expected_received: u64,
    /// Tokens received out of sequence (gap or duplicate).
    pub sequence_errors: u64,
    /// Loading the recordings of a replay scenario, in seconds.
    pub load_s: Option<f64>,
    /// Catch-up replay of completed recordings, in MB (10^6 bytes) per second.
    pub replay_mb_per_s: Option<f64>,
    pub replay_bytes: Option<u64>,
    /// Cores' worth of CPU the server process and this process used while replaying.
    pub replay_server_cores: Option<f64>,
    pub replay_bench_cores: Option<f64>,
    /// `write_bytes` of the process owning the data, per acked token.
    pub disk_bytes_per_token: Option<f64>,
    /// Resident memory (VmRSS) of the server process at the end of the phase, in MiB; none
    /// for in-process targets.
    pub server_rss_mib: Option<f64>,
    /// Peak resident memory (VmHWM) of the server process, in MiB.
    pub server_peak_rss_mib: Option<f64>,
    /// CPU time of the process owning the data per acked token, in µs (server processes only).
    pub server_cpu_us_per_token: Option<f64>,
    /// CPU time of this process (the load generator, plus the store for in-process targets)
    /// per acked token, in µs.
    pub bench_cpu_us_per_token: Option<f64>,
    /// Cores' worth of CPU used by other processes on the machine during the phase (during
    /// loading, for replay): a busy machine makes every number worse.
    pub other_processes_cores: Option<f64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// The standard comparison: every target against tapedeck, as tapedeck/peer.
struct Measure {
    name: &'static str,
    /// `true` when higher is better.
    higher_better: bool,
    value: fn(&Outcome) -> Option<f64>,
}

const MEASURES: &[Measure] = &[
    Measure {
        name: "acked tok/s",
        higher_better: true,
        value: |o| (o.acked_tokens > 0).then_some(o.acked_tokens_per_s),
    },
    Measure {
        name: "p50 ms",
        higher_better: false,
        value: |o| o.latency.as_ref().map(|l| l.p50_ms),
    },
    Measure {
        name: "p99 ms",
        higher_better: false,
        value: |o| o.latency.as_ref().map(|l| l.p99_ms),
    },
    Measure {
        name: "p99.9 ms",
        higher_better: false,
        value: |o| o.latency.as_ref().map(|l| l.p999_ms),
    },
    Measure {
        name: "ack p99 ms",
        higher_better: false,
        value: |o| o.ack_latency.as_ref().map(|l| l.p99_ms),
    },
    Measure {
        name: "replay MB/s",
        higher_better: true,
        value: |o| o.replay_mb_per_s,
    },
    Measure {
        name: "disk B/tok",
        higher_better: false,
        value: |o| o.disk_bytes_per_token,
    },
    Measure {
        name: "server CPU µs/tok",
        higher_better: false,
        value: |o| o.server_cpu_us_per_token,
    },
    Measure {
        name: "peak RSS MiB",
        higher_better: false,
        value: |o| o.server_peak_rss_mib,
    },
];

/// tapedeck/peer, readable at any size: `1.23×`, `0.05×`, `1/1523×`.
fn ratio(tapedeck: f64, peer: f64) -> String {
    let r = tapedeck / peer;
    if r >= 0.1 {
        format!("{r:.2}×")
    } else if r >= 0.01 {
        format!("{r:.3}×")
    } else {
        format!("1/{:.0}×", 1.0 / r)
    }
}

fn cell(value: Option<f64>) -> String {
    match value {
        None => "-".into(),
        Some(v) if v >= 1000.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// The tables of every scenario in `outcomes`, as plain text (GitHub-flavoured Markdown).
pub(crate) fn tables(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let mut scenarios: Vec<&str> = outcomes.iter().map(|o| o.scenario.as_str()).collect();
    scenarios.dedup();
    for scenario in scenarios {
        let rows: Vec<&Outcome> = outcomes.iter().filter(|o| o.scenario == scenario).collect();
        let measures: Vec<&Measure> = MEASURES
            .iter()
            .filter(|m| rows.iter().any(|o| (m.value)(o).is_some()))
            .collect();
        let _ = writeln!(out, "\n### {scenario}\n");
        let mut header = String::from("| target |");
        let mut rule = String::from("|---|");
        for m in &measures {
            let _ = write!(header, " {} |", m.name);
            rule.push_str("---:|");
        }
        header.push_str(" delivered | errors | others' CPU |");
        rule.push_str("---:|---:|---:|");
        let _ = writeln!(out, "{header}\n{rule}");
        for o in &rows {
            let mut line = format!("| {}{} |", o.target, if o.durable_acks { "" } else { "*" });
            for m in &measures {
                let _ = write!(line, " {} |", cell((m.value)(o)));
            }
            let delivered = if o.expected_received == 0 {
                "-".to_string()
            } else {
                let gaps = if o.sequence_errors > 0 {
                    format!(", {} out of order", o.sequence_errors)
                } else {
                    String::new()
                };
                format!("{}/{}{gaps}", o.received_tokens, o.expected_received)
            };
            let others = o
                .other_processes_cores
                .map_or("-".to_string(), |c| format!("{c:.2} cores"));
            let _ = writeln!(line, " {delivered} | {} | {others} |", o.errors);
            out.push_str(&line);
        }
        if rows.iter().any(|o| !o.durable_acks) {
            let _ = writeln!(
                out,
                "\n\\* acks before the data is fsync'd: not durable (up to ~1 s lost on a crash)."
            );
        }
        if let Some(tapedeck) = rows.iter().find(|o| o.target == "tapedeck") {
            let _ = writeln!(
                out,
                "\nRatio tapedeck/peer (tok/s, MB/s: >1 is tapedeck ahead; ms, B/tok, MiB: <1 is tapedeck ahead):\n"
            );
            let measures: Vec<&&Measure> = measures
                .iter()
                .filter(|m| (m.value)(tapedeck).is_some())
                .collect();
            let mut header = String::from("| peer |");
            let mut rule = String::from("|---|");
            for m in &measures {
                let _ = write!(
                    header,
                    " {} {} |",
                    m.name,
                    if m.higher_better { "↑" } else { "↓" }
                );
                rule.push_str("---:|");
            }
            let _ = writeln!(out, "{header}\n{rule}");
            for peer in rows.iter().filter(|o| o.target != "tapedeck") {
                let mut line = format!("| {} |", peer.target);
                for m in &measures {
                    let ratio = match ((m.value)(tapedeck), (m.value)(peer)) {
                        (Some(t), Some(p)) if p > 0.0 && t > 0.0 => ratio(t, p),
                        _ => "-".into(),
                    };
                    let _ = write!(line, " {ratio} |");
                }
                let _ = writeln!(out, "{line}");
            }
        }
        for o in rows.iter().filter(|o| o.first_error.is_some()) {
            let _ = writeln!(
                out,
                "\n{}: first error: {}",
                o.target,
                o.first_error.as_deref().unwrap_or_default()
            );
        }
    }
    out
}
