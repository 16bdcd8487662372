//! The `tapedeck` binary: parses the command line (flags with `TAPEDECK_*` env fallbacks),
//! starts logging, and runs the server until SIGINT or SIGTERM.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use tapedeck::Config;

#[derive(Parser)]
#[command(
    name = "tapedeck",
    version,
    about = "Durable recorder and replayer of streamed LLM responses"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the gRPC recorder until SIGINT/SIGTERM.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "TAPEDECK_LISTEN", default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
    /// Directory of the database file.
    #[arg(long, env = "TAPEDECK_DATA_DIR", default_value = "./tapedeck-data")]
    data_dir: PathBuf,
    /// How long finished recordings stay replayable (e.g. 30m, 2h, 90s).
    #[arg(long, env = "TAPEDECK_RETENTION", default_value = "30m", value_parser = parse_duration)]
    retention: Duration,
    /// How often expired and idle recordings are collected.
    #[arg(long, env = "TAPEDECK_GC_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    gc_interval: Duration,
    /// A live recording with no token for this long is ended as interrupted.
    #[arg(long, env = "TAPEDECK_IDLE_TIMEOUT", default_value = "1h", value_parser = parse_duration)]
    idle_timeout: Duration,
    /// Largest chunk (e.g. 1MiB, 512KiB, 4096).
    #[arg(long, env = "TAPEDECK_MAX_CHUNK_BYTES", default_value = "1MiB", value_parser = parse_size)]
    max_chunk_bytes: u64,
    /// Largest recording.
    #[arg(long, env = "TAPEDECK_MAX_RECORDING_BYTES", default_value = "64MiB", value_parser = parse_size)]
    max_recording_bytes: u64,
    /// Most recordings live at once.
    #[arg(long, env = "TAPEDECK_MAX_LIVE_RECORDINGS", default_value_t = 10_000)]
    max_live_recordings: usize,
    /// How long shutdown waits for streams to end and the store to close.
    #[arg(long, env = "TAPEDECK_SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    shutdown_timeout: Duration,
    /// Log format.
    #[arg(long, env = "TAPEDECK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let Command::Serve(args) = Cli::parse().command;
    init_tracing(args.log_format);
    let config = Config {
        listen: args.listen,
        data_dir: args.data_dir,
        retention: args.retention,
        gc_interval: args.gc_interval,
        idle_timeout: args.idle_timeout,
        max_chunk_bytes: args.max_chunk_bytes as usize,
        max_recording_bytes: args.max_recording_bytes,
        max_live_recordings: args.max_live_recordings,
        shutdown_timeout: args.shutdown_timeout,
    };
    match serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Exactly one line, saying what is wrong and what to do; nothing else is printed.
            eprintln!("tapedeck: error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping causes its message already spells out.
fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line.replace(['\n', '\r'], " ")
}

fn serve(config: Config) -> anyhow::Result<()> {
    use anyhow::Context;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let store = tapedeck::server::open_store(&config)?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|err| {
                anyhow::anyhow!(
                    "cannot listen on {}: {err}; is another process using it? choose another \
                     address with --listen",
                    config.listen
                )
            })?;
        tapedeck::server::run(listener, store, &config, shutdown_signal()).await?;
        Ok(())
    })
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => return interrupt.await.unwrap_or(()),
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Parses `90s`, `30m`, `1h`, `2d`, `250ms`, or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 90s, 30m or 1h"))?;
    let seconds = match unit.trim() {
        "ms" => return Ok(Duration::from_millis(number)),
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        other => {
            return Err(format!(
                "unknown duration unit `{other}`; use ms, s, m, h or d"
            ));
        }
    };
    Ok(Duration::from_secs(number * seconds))
}

/// Parses `1MiB`, `512KiB`, `1GiB`, `64MB`, or plain bytes.
fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a size like 4096, 512KiB or 1MiB"))?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(format!("unknown size unit `{other}`; use KiB, MiB or GiB")),
    };
    Ok(number * factor)
}
