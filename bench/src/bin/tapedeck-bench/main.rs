//! `tapedeck-bench`: an end-to-end load generator that runs the same workload against tapedeck
//! and the stores users would pick instead (Redis Streams, SQLite, a bare fsync'd log), in one
//! run, and prints one table per scenario with tapedeck/peer ratios (`--json` for machines).
//!
//! Scenarios: (a) live, open loop: producers at a fixed token rate with live subscribers;
//! (b) closed loop: producers as fast as acks allow; (c) catch-up replay of completed
//! recordings; `custom` takes every workload flag. `restart`, `tier` (the object-store
//! tier: sealing and replay from SeaweedFS) and `curves` (cost against size, drawn as SVG
//! charts) run on their own, tapedeck only.
mod cli;
mod disk;
mod driver;
mod open_files;
mod procfs;
mod report;
mod seaweed;
mod targets;
mod workload;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;

use cli::Cli;
use report::Outcome;
use targets::{Api, Appendfsync, Commit, Environment, FsyncLog, RedisStreams, Sqlite, Tapedeck};
use targets::{Target, TargetKind};
use workload::{MIN_TOKEN_BYTES, Scenario};

fn main() -> Result<()> {
    let cli = Cli::parse();
    if let Some(path) = &cli.report {
        return print_report(path);
    }
    if let Some(bytes) = cli.token_bytes
        && bytes < MIN_TOKEN_BYTES
    {
        bail!("--token-bytes must be at least {MIN_TOKEN_BYTES}");
    }
    let env = cli.environment()?;
    let plan = cli.scenarios();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let started = chrono_now();
    let clock = Instant::now();
    let disk = disk::probe(&env.work_dir)?;
    let disk_line = match &disk {
        Some(d) => format!(
            "disk: append + fdatasync p50 {:.2} ms, p99 {:.2} ms ({:.0}/s back to back)",
            d.fdatasync.p50_ms, d.fdatasync.p99_ms, d.syncs_per_s
        ),
        None => "disk: not probed".to_string(),
    };
    eprintln!("{disk_line}");
    let outcomes = runtime.block_on(async {
        let mut outcomes = Vec::new();
        for (scenario, kinds) in &plan {
            eprintln!("== {}: {}", scenario.name(), describe(scenario));
            for &kind in kinds {
                match run_one(&env, scenario, kind).await {
                    Ok(outcome) => {
                        eprintln!("   {}", summary_line(&outcome));
                        outcomes.push(outcome);
                    }
                    Err(err) => eprintln!("   {}: failed to run: {err:#}", kind.name()),
                }
            }
        }
        outcomes
    });
    let restart = cli.restart().map(|workload| {
        eprintln!("== restart: load, SIGKILL, timed restarts");
        runtime.block_on(driver::run_restart(&env, &workload))
    });
    let restart = match restart {
        Some(Ok(outcome)) => Some(outcome),
        Some(Err(err)) => {
            eprintln!("   restart: failed to run: {err:#}");
            None
        }
        None => None,
    };
    let tier = cli.tier().map(|workload| {
        eprintln!("== tier: sealing into SeaweedFS, replay from it against local replay");
        runtime.block_on(driver::run_tier(&env, &env.weed, &workload))
    });
    let tier = match tier {
        Some(Ok(outcome)) => Some(outcome),
        Some(Err(err)) => {
            eprintln!("   tier: failed to run: {err:#}");
            None
        }
        None => None,
    };
    let curves = cli.curves().map(|workload| {
        eprintln!(
            "== curves: cost against size, charts in {}",
            workload.charts.display()
        );
        runtime.block_on(driver::run_curves(&env, &workload))
    });
    let curves = match curves {
        Some(Ok(outcome)) => Some(outcome),
        Some(Err(err)) => {
            eprintln!("   curves: failed to run: {err:#}");
            None
        }
        None => None,
    };
    runtime.shutdown_timeout(Duration::from_secs(5));

    let mut tables = report::tables(&outcomes);
    if let Some(outcome) = &restart {
        tables.push_str(&driver::restart_table(outcome));
    }
    if let Some(outcome) = &tier {
        tables.push_str(&driver::tier_table(outcome));
    }
    if let Some(outcome) = &curves {
        tables.push_str(&driver::curves_table(outcome));
    }
    if env.tier {
        tables.push_str("\ntapedeck sealed ended recordings into SeaweedFS (--tier)\n");
    }
    let footer = format!(
        "\n{disk_line}\nrun started {started}, took {:.0} s\n",
        clock.elapsed().as_secs_f64()
    );
    if cli.json {
        eprintln!("{tables}{footer}");
        let document = serde_json::json!({
            "started": started,
            "seconds": clock.elapsed().as_secs_f64(),
            "disk": disk,
            "scenarios": plan.iter().map(|(s, _)| describe_json(s)).collect::<Vec<_>>(),
            "outcomes": outcomes,
            "restart": restart,
            "tier": tier,
            "curves": curves,
            "tier_on": env.tier,
        });
        println!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        println!("{tables}{footer}");
    }
    Ok(())
}

/// Prints the tables of a saved `--json` document.
fn print_report(path: &std::path::Path) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let document: serde_json::Value = serde_json::from_str(&text)?;
    let outcomes: Vec<Outcome> = serde_json::from_value(document["outcomes"].clone())
        .context("the document has no outcomes")?;
    println!("{}", report::tables(&outcomes));
    if let Some(started) = document["started"].as_str() {
        println!("run started {started}");
    }
    Ok(())
}

/// The API key of the `tapedeck-auth` target.
const BENCH_API_KEY: &str = "bench-key-0123456789abcdef";

/// Starts a fresh `kind` and runs `scenario` on it; the target is torn down afterwards.
async fn run_one(env: &Environment, scenario: &Scenario, kind: TargetKind) -> Result<Outcome> {
    let connections = match scenario {
        Scenario::Live { workload, .. } => workload.connections,
        Scenario::Replay { workload, .. } => workload.connections,
    };
    match kind {
        TargetKind::Tapedeck => {
            let target = Tapedeck::start(env, Api::Record, connections, None, false).await?;
            Ok(drive(target, scenario, kind).await)
        }
        TargetKind::TapedeckAck => {
            let target = Tapedeck::start(env, Api::PerTokenAck, connections, None, false).await?;
            Ok(drive(target, scenario, kind).await)
        }
        TargetKind::TapedeckAuth => {
            let key = Some(BENCH_API_KEY);
            let target = Tapedeck::start(env, Api::Record, connections, key, false).await?;
            Ok(drive(target, scenario, kind).await)
        }
        TargetKind::TapedeckRedis => {
            let target = Tapedeck::start(env, Api::Record, connections, None, true).await?;
            Ok(drive(target, scenario, kind).await)
        }
        TargetKind::RedisAlways => {
            let target = RedisStreams::start(env, Appendfsync::Always, connections).await?;
            Ok(drive(target, scenario, kind).await)
        }
        TargetKind::RedisEverysec => {
            let target = RedisStreams::start(env, Appendfsync::Everysec, connections).await?;
            Ok(drive(target, scenario, kind).await)
        }
        TargetKind::SqliteFull => {
            let target = Arc::new(Sqlite::start(env, Commit::PerToken)?);
            Ok(drive(target, scenario, kind).await)
        }
        TargetKind::SqliteGroup => {
            let target = Arc::new(Sqlite::start(env, Commit::Group)?);
            Ok(drive(target, scenario, kind).await)
        }
        TargetKind::FsyncLog => {
            let target = Arc::new(FsyncLog::start(env)?);
            Ok(drive(target, scenario, kind).await)
        }
    }
}

async fn drive<T: Target>(target: T, scenario: &Scenario, kind: TargetKind) -> Outcome {
    let target = Arc::new(target);
    match scenario {
        Scenario::Live { name, workload } => {
            driver::run_live(target, workload, name, kind.name()).await
        }
        Scenario::Replay { name, workload } => {
            driver::run_replay(target, workload, name, kind.name()).await
        }
    }
}

fn describe(scenario: &Scenario) -> String {
    match scenario {
        Scenario::Live { workload: w, .. } => format!(
            "{} producers × {}, {} B tokens, {} tokens/recording, {} subscriber(s)/recording, {:.0} s, {} connections",
            w.producers,
            w.rate
                .map_or("closed loop".to_string(), |r| format!("{r} tok/s")),
            w.token_bytes,
            w.tokens_per_recording,
            w.subscribers,
            w.duration.as_secs_f64(),
            w.connections
        ),
        Scenario::Replay { workload: w, .. } => format!(
            "{} completed recordings × {} tokens × {} B, loaded by {} producers, replayed {} at a time",
            w.recordings,
            w.tokens_per_recording,
            w.token_bytes,
            w.load_concurrency,
            w.replay_concurrency
        ),
    }
}

fn describe_json(scenario: &Scenario) -> serde_json::Value {
    match scenario {
        Scenario::Live { name, workload } => {
            serde_json::json!({ "name": name, "kind": "live", "workload": workload })
        }
        Scenario::Replay { name, workload } => {
            serde_json::json!({ "name": name, "kind": "replay", "workload": workload })
        }
    }
}

fn summary_line(o: &Outcome) -> String {
    let mut line = format!(
        "{:<15} acked {:>9} in {:>5.1} s = {:>8.0} tok/s",
        o.target, o.acked_tokens, o.elapsed_s, o.acked_tokens_per_s
    );
    if let Some(l) = &o.latency {
        line.push_str(&format!(
            "  p50 {:.2} p99 {:.2} p99.9 {:.2} ms",
            l.p50_ms, l.p99_ms, l.p999_ms
        ));
    }
    if let Some(l) = &o.ack_latency {
        line.push_str(&format!("  ack p50 {:.2} p99 {:.2} ms", l.p50_ms, l.p99_ms));
    }
    if let Some(mbps) = o.replay_mb_per_s {
        line.push_str(&format!("  replay {mbps:.1} MB/s"));
        if let Some(cores) = o.replay_server_cores {
            line.push_str(&format!(" (server {cores:.2} cores"));
        } else {
            line.push_str(" (");
        }
        if let Some(cores) = o.replay_bench_cores {
            line.push_str(&format!(" bench {cores:.2} cores)"));
        }
    }
    if let Some(b) = o.disk_bytes_per_token {
        line.push_str(&format!("  disk {b:.0} B/tok"));
    }
    if let Some(cpu) = o.server_cpu_us_per_token {
        line.push_str(&format!("  server cpu {cpu:.1} µs/tok"));
    }
    if let Some(cpu) = o.bench_cpu_us_per_token {
        line.push_str(&format!("  bench cpu {cpu:.1} µs/tok"));
    }
    if let Some(rss) = o.server_peak_rss_mib {
        line.push_str(&format!("  rss {rss:.0} MiB"));
    }
    if let Some(others) = o.other_processes_cores {
        line.push_str(&format!("  others {others:.2} cores"));
    }
    if o.errors > 0 {
        line.push_str(&format!("  errors {}", o.errors));
    }
    line
}

/// The current UTC time as `YYYY-MM-DD HH:MM:SS UTC`.
fn chrono_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}
