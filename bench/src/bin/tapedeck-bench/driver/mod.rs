//! Drives one target through one scenario and measures it: [`live`] runs producers (open or
//! closed loop) with live subscribers, [`replay`] loads completed recordings and reads them back;
//! [`restart`], [`tier`] and [`curves`] run on their own ([`crash`] holds what the restart and
//! curves scenarios share).
//! This file holds what both share: the clock, counters, CPU accounting and progress bars.
mod crash;
mod curves;
mod live;
mod replay;
mod restart;
mod tier;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};

pub(crate) use curves::{CurvesWorkload, run_curves, table as curves_table};
pub(crate) use live::run_live;
pub(crate) use replay::run_replay;
pub(crate) use restart::{run_restart, table as restart_table};
pub(crate) use tier::{TierSet, TierWorkload, run_tier, table as tier_table};

use crate::procfs;
use crate::report;

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

/// Counters and latencies shared by every task of a phase.
#[derive(Default)]
struct Counters {
    latency: Latencies,
    sent: AtomicU64,
    acked: AtomicU64,
    received: AtomicU64,
    expected: AtomicU64,
    sequence_errors: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Counters {
    /// The first error counted, as text.
    fn first_error(&self) -> Option<String> {
        self.first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

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

/// Latencies the producers and subscribers of one run collect, shared by all of them: send →
/// subscriber receive, send → ack (targets that ack each token), and completion sent → acked.
///
/// One set for the run, not one per producer: a histogram at these bounds is about 225 KB, and
/// a set per producer and per recording had the load generator zeroing gigabytes at 10,000
/// producers (most of its CPU, starving the server it drove). Each producer and subscriber
/// gathers a recording's samples in a small buffer and adds them here once, at its end.
struct Latencies {
    delivery: Mutex<Histogram<u64>>,
    ack: Mutex<Histogram<u64>>,
    completion: Mutex<Histogram<u64>>,
}

impl Default for Latencies {
    fn default() -> Self {
        Self {
            delivery: Mutex::new(report::histogram()),
            ack: Mutex::new(report::histogram()),
            completion: Mutex::new(report::histogram()),
        }
    }
}

/// Adds `samples` (µs) to `histogram`.
fn record_all(histogram: &Mutex<Histogram<u64>>, samples: &[u64]) {
    let mut histogram = histogram.lock().unwrap_or_else(|e| e.into_inner());
    for &sample in samples {
        histogram.saturating_record(sample);
    }
}

/// Percentiles of `histogram`, if it has any samples.
fn latency_of(histogram: &Mutex<Histogram<u64>>) -> Option<report::Latency> {
    report::Latency::of(&histogram.lock().unwrap_or_else(|e| e.into_inner()))
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
