//! `tapedeck-ds-bench`: tapedeck's HTTP face against two other Durable Streams servers, and
//! S2's self-hosted server (`s2 lite`, over its own REST API) if `--s2` names it, all with
//! acknowledgements that wait for the disk, in one run: appends/s with 1,000 writers, with 32
//! writers on one stream, and at a fixed rate (100 streams × 10/s); SSE append→receive latency
//! with 200 streams × 50 messages/s; catch-up read MB/s (not S2: see [`servers::skips`]); and
//! fan-out (100 streams × 100 SSE readers: latency, memory per idle reader, CPU, errors).
//! Prints one table per measure, each server's peak memory, and tapedeck's ratio to each peer.
mod fan_out;
#[path = "../tapedeck-bench/open_files.rs"]
mod open_files;
// Shared with tapedeck-bench, which uses the rest of it.
#[allow(dead_code)]
#[path = "../tapedeck-bench/procfs.rs"]
mod procfs;
mod scenarios;
mod servers;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;

use servers::{Binaries, Kind};

/// Runs the Durable Streams comparison (see BENCHMARKS.md).
#[derive(Parser)]
struct Cli {
    /// The tapedeck binary.
    #[arg(long, default_value = "target/release/tapedeck")]
    tapedeck: PathBuf,
    /// Electric's `durable-streams-server` (`cargo install durable-streams@0.1.5`).
    #[arg(long)]
    electric: PathBuf,
    /// `durable-streams-server` 0.3.0 (`cargo install durable-streams-server@0.3.0`).
    #[arg(long)]
    ds_server: PathBuf,
    /// S2's `s2` (`cargo install --locked s2-cli@0.43.4`), run as `s2 lite`; without it S2 is
    /// not measured.
    #[arg(long)]
    s2: Option<PathBuf>,
    /// Where the servers keep their data (a directory on the disk being measured).
    #[arg(long, default_value = "target/ds-bench")]
    work_dir: PathBuf,
    /// Seconds measured per run, after the warm-up.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Concurrent writers of the append measure.
    #[arg(long, default_value_t = 1000)]
    writers: usize,
    /// Streams (and SSE readers) of the latency measure.
    #[arg(long, default_value_t = 200)]
    streams: usize,
    /// Messages a second per stream in the latency measure.
    #[arg(long, default_value_t = 50)]
    rate: u32,
    /// Measure only tapedeck (for profiling it; no ratios).
    #[arg(long)]
    tapedeck_only: bool,
    /// Times each catch-up reader reads the whole stream from the start.
    #[arg(long, default_value_t = 25)]
    catch_up_passes: usize,
    /// Streams of the fan-out measure.
    #[arg(long, default_value_t = 100)]
    fan_out_streams: usize,
    /// SSE readers on each stream of the fan-out measure.
    #[arg(long, default_value_t = 100)]
    fan_out_readers: usize,
    /// Messages a second per stream in the fan-out measure (below one is slower: 100,000
    /// readers are `--fan-out-streams 1000 --fan-out-readers 100 --fan-out-rate 0.2`, which
    /// needs an open-file limit over 100,000 for the bench and the server, unless they share
    /// connections: `--fan-out-per-connection`).
    #[arg(long, default_value_t = 2.0)]
    fan_out_rate: f64,
    /// Fan-out readers on one connection: 1 gives each reader a connection of its own over
    /// HTTP/1.1, as a browser's `EventSource` has there; more puts that many readers on each
    /// HTTP/2 connection (cleartext, prior knowledge), as a browser's `EventSource`s to one
    /// origin share one under HTTP/2. With 100, 100,000 readers take 1,000 connections, within
    /// an open-file limit of 20,000.
    /// At most 100: a server limits the streams open on one HTTP/2 connection (hyper's default
    /// is 200), and a reader past its limit would wait instead of being served.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    fan_out_per_connection: u32,
    /// Writers of the one-stream measure, all appending to one stream.
    #[arg(long, default_value_t = 32)]
    one_stream_writers: usize,
    /// Streams of the fixed-rate measure.
    #[arg(long, default_value_t = 100)]
    fixed_rate_streams: usize,
    /// Appends a second per stream in the fixed-rate measure.
    #[arg(long, default_value_t = 10)]
    fixed_rate: u32,
    /// Which measures to run: appends, one-stream, fixed-rate, sse, catch-up, fan-out.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "appends,one-stream,fixed-rate,sse,catch-up,fan-out"
    )]
    measures: Vec<String>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    std::fs::create_dir_all(&cli.work_dir).context("making the work dir")?;
    // The fan-out measure holds 10,000 connections on each side; the servers inherit this.
    crate::open_files::raise_to_maximum()?;
    // Absolute: a server may run in its data dir.
    let absolute = |path: &PathBuf| {
        std::fs::canonicalize(path).with_context(|| format!("no binary at {}", path.display()))
    };
    let bins = Binaries {
        tapedeck: absolute(&cli.tapedeck)?,
        electric: absolute(&cli.electric)?,
        ds_server: absolute(&cli.ds_server)?,
        s2: cli.s2.as_ref().map(absolute).transpose()?,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run(&cli, &bins))
}

const ALL: [Kind; 4] = [Kind::Tapedeck, Kind::Electric, Kind::DsAcid, Kind::S2];
const WARMUP: Duration = Duration::from_secs(2);

/// The servers `measure` runs on, tapedeck first; says which peers it leaves out, and why.
fn kinds_for(cli: &Cli, bins: &Binaries, measure: &str) -> Vec<Kind> {
    let mut kinds = Vec::new();
    for kind in ALL {
        let measured = match kind {
            Kind::Tapedeck => true,
            Kind::S2 => !cli.tapedeck_only && bins.s2.is_some(),
            Kind::Electric | Kind::DsAcid => !cli.tapedeck_only,
        };
        if !measured {
            continue;
        }
        if let Some(why) = servers::skips(kind, measure) {
            eprintln!("   {:<24} skipped: {why}", kind.name());
            continue;
        }
        kinds.push(kind);
    }
    kinds
}

async fn run(cli: &Cli, bins: &Binaries) -> Result<()> {
    let measure = Duration::from_secs(cli.seconds);
    let run_id = std::process::id();
    let wants = |name: &str| cli.measures.iter().any(|m| m == name);

    if wants("appends") {
        eprintln!(
            "== appends: {} writers, 64-byte appends, each on its own stream, {}s",
            cli.writers, cli.seconds
        );
        let load = AppendLoad::BackToBack {
            writers: cli.writers,
            streams: cli.writers,
        };
        let kinds = kinds_for(cli, bins, "appends");
        append_measure(cli, &kinds, bins, &format!("a{run_id}"), load).await?;
    }
    if wants("one-stream") {
        let writers = cli.one_stream_writers;
        eprintln!(
            "== one stream: {writers} writers appending 64 bytes back to back to one stream, {}s",
            cli.seconds
        );
        let load = AppendLoad::BackToBack {
            writers,
            streams: 1,
        };
        let kinds = kinds_for(cli, bins, "one-stream");
        append_measure(cli, &kinds, bins, &format!("o{run_id}"), load).await?;
    }
    if wants("fixed-rate") {
        let (streams, rate) = (cli.fixed_rate_streams, cli.fixed_rate);
        eprintln!(
            "== fixed rate: {streams} streams × {rate} appends/s, no reader, {}s",
            cli.seconds
        );
        let load = AppendLoad::FixedRate { streams, rate };
        let kinds = kinds_for(cli, bins, "fixed-rate");
        append_measure(cli, &kinds, bins, &format!("r{run_id}"), load).await?;
    }
    if wants("sse") {
        eprintln!(
            "== SSE latency: {} streams × {} messages/s, one SSE reader each, {}s",
            cli.streams, cli.rate, cli.seconds
        );
        let mut latencies = Vec::new();
        for kind in kinds_for(cli, bins, "sse") {
            let server = servers::start(kind, bins, &cli.work_dir).await?;
            let run = format!("l{run_id}");
            let result = scenarios::sse_latency(
                &server.base,
                server.api,
                &run,
                cli.streams,
                cli.rate,
                WARMUP,
                measure,
            )
            .await?;
            eprintln!(
                "   {:<24} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  ({} sent, {} received)  peak rss {:>5.0} MiB",
                kind.name(),
                result.p50_ms,
                result.p99_ms,
                result.max_ms,
                result.sent,
                result.received,
                peak_rss_mib(&server)
            );
            latencies.push((kind, result));
        }
        // tapedeck / peer, as every other measure prints it: below 1 is tapedeck ahead.
        let base = &latencies[0].1;
        for (kind, result) in &latencies[1..] {
            eprintln!(
                "   tapedeck / {}: p50 {:.2}x  p99 {:.2}x",
                kind.name(),
                base.p50_ms / result.p50_ms,
                base.p99_ms / result.p99_ms
            );
        }
    }
    if wants("catch-up") {
        let passes = cli.catch_up_passes;
        eprintln!(
            "== catch-up: one 8 MiB stream (64 KiB appends), 4 readers × {passes} reads from the start"
        );
        let mut reads = Vec::new();
        for kind in kinds_for(cli, bins, "catch-up") {
            let server = servers::start(kind, bins, &cli.work_dir).await?;
            let run = format!("c{run_id}");
            let mb_s =
                scenarios::catch_up(&server.base, &run, 8 << 20, 64 << 10, 4, passes).await?;
            eprintln!(
                "   {:<24} {:>9.0} MB/s  peak rss {:>5.0} MiB",
                kind.name(),
                mb_s,
                peak_rss_mib(&server)
            );
            reads.push((kind, mb_s));
        }
        let base = reads[0].1;
        for (kind, mb_s) in &reads[1..] {
            eprintln!("   tapedeck / {}: {:.2}x MB/s", kind.name(), base / mb_s);
        }
    }
    if wants("fan-out") {
        fan_out(cli, bins, run_id, measure).await?;
    }
    Ok(())
}

/// The fan-out measure on each server, with the ratios of its latency and cost.
async fn fan_out(cli: &Cli, bins: &Binaries, run_id: u32, measure: Duration) -> Result<()> {
    let (streams, per_stream, rate) = (cli.fan_out_streams, cli.fan_out_readers, cli.fan_out_rate);
    let per_connection = cli.fan_out_per_connection as usize;
    let connections = match per_connection {
        1 => "a connection each".to_string(),
        n => format!("{n} to an HTTP/2 connection"),
    };
    eprintln!(
        "== fan-out: {streams} streams × {per_stream} SSE readers each ({} readers, {connections}), {rate} messages/s per stream, {}s",
        streams * per_stream,
        cli.seconds
    );
    let mut results = Vec::new();
    let measured = match per_connection {
        1 => "fan-out",
        _ => "fan-out-http2",
    };
    for kind in kinds_for(cli, bins, measured) {
        let server = servers::start(kind, bins, &cli.work_dir).await?;
        let run = format!("f{run_id}");
        let result = fan_out::fan_out(
            &server.base,
            server.api,
            &run,
            streams,
            per_stream,
            per_connection,
            rate,
            WARMUP,
            measure,
            server.pid(),
        )
        .await?;
        eprintln!(
            "   {:<24} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>8.2} ms  rss {:>6.1} KiB/idle reader  cpu {:.2} cores  {} sent, {} of {} delivered, {} reader errors  peak rss {:>5.0} MiB",
            kind.name(),
            result.p50_ms,
            result.p99_ms,
            result.max_ms,
            result.rss_per_reader_kib,
            result.server_cores,
            result.sent,
            result.received,
            result.expected,
            result.reader_errors,
            peak_rss_mib(&server)
        );
        results.push((kind, result));
    }
    let base = &results[0].1;
    for (kind, result) in &results[1..] {
        eprintln!(
            "   tapedeck / {}: p50 {:.2}x  p99 {:.2}x  rss per reader {:.2}x  cpu {:.2}x",
            kind.name(),
            base.p50_ms / result.p50_ms,
            base.p99_ms / result.p99_ms,
            base.rss_per_reader_kib / result.rss_per_reader_kib,
            base.server_cores / result.server_cores
        );
    }
    Ok(())
}

/// How an append measure loads the servers.
#[derive(Clone, Copy)]
enum AppendLoad {
    /// `writers` writers, each appending as soon as its last append is acknowledged, spread
    /// over `streams` streams.
    BackToBack { writers: usize, streams: usize },
    /// `streams` streams appended to at `rate` appends a second each.
    FixedRate { streams: usize, rate: u32 },
}

/// One append measure on each server, with tapedeck's ratios to the others.
async fn append_measure(
    cli: &Cli,
    kinds: &[Kind],
    bins: &Binaries,
    run: &str,
    load: AppendLoad,
) -> Result<()> {
    let measure = Duration::from_secs(cli.seconds);
    let mut results = Vec::new();
    for &kind in kinds {
        let server = servers::start(kind, bins, &cli.work_dir).await?;
        let result = match load {
            AppendLoad::BackToBack { writers, streams } => {
                let (base, api) = (&server.base, server.api);
                scenarios::appends(base, api, run, writers, streams, 64, WARMUP, measure).await?
            }
            AppendLoad::FixedRate { streams, rate } => {
                let (base, api) = (&server.base, server.api);
                scenarios::fixed_rate(base, api, run, streams, rate, WARMUP, measure).await?
            }
        };
        eprintln!(
            "   {:<24} {:>9.0} appends/s   ack p50 {:>7.2} ms  p99 {:>7.2} ms  peak rss {:>5.0} MiB",
            kind.name(),
            result.appends_per_s,
            result.ack_p50_ms,
            result.ack_p99_ms,
            peak_rss_mib(&server)
        );
        results.push((kind, result));
    }
    let base = &results[0].1;
    for (kind, result) in &results[1..] {
        eprintln!(
            "   tapedeck / {}: {:.2}x appends/s  ack p50 {:.2}x  p99 {:.2}x",
            kind.name(),
            base.appends_per_s / result.appends_per_s,
            base.ack_p50_ms / result.ack_p50_ms,
            base.ack_p99_ms / result.ack_p99_ms
        );
    }
    Ok(())
}

/// The highest resident memory `server` has had (it is started fresh for each measure).
fn peak_rss_mib(server: &servers::Server) -> f64 {
    procfs::memory(Some(server.pid())).map_or(f64::NAN, |m| m.peak_kib as f64 / 1024.0)
}
