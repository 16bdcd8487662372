//! The `tapedeck` binary: parses the command line (flags with `TAPEDECK_*` env fallbacks),
//! starts logging, and runs the server until SIGINT or SIGTERM, or a client command.
//!
//! # Layout
//! - `args/`: the commands and their flags, checked and turned into a `Config`.
//! - `cli/`: the client commands, `token`, and the offline `db` tools.
//! - `values.rs`: the values flags take (durations, sizes, addresses, grants), for both.
//! - `observe.rs`: the log subscriber, the start-up configuration line, the metrics exporter;
//!   `traces.rs`: traces over OTLP (the `otlp` feature).

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use args::{Command, Refusal};
use tapedeck::Config;

/// mimalloc instead of glibc's malloc: under many connections glibc's arenas contend on their
/// locks and grow and trim the heap (`mprotect`) over and over; profiled in BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod args;
mod cli;
mod observe;
#[cfg(feature = "otlp")]
mod traces;
mod values;

fn main() -> ExitCode {
    // Transparent huge pages keep whole 2 MiB pages resident for the allocator's partly used
    // spans: about 35 MiB more under 1,000 producers (BENCHMARKS.md), for no measured speed.
    // Best effort: a kernel without the setting just keeps its default.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let serve_args = match args::parse() {
        Ok(Command::Serve(args)) => args,
        Ok(Command::Token(args)) => {
            return cli::token::run(args).unwrap_or_else(|message| args::usage_error(&message));
        }
        Ok(Command::Client(command)) => return cli::run(command),
        Ok(Command::Db(command)) => return cli::db::run(command),
        // --help and --version print as usual; a bad command line gets one line.
        Err(Refusal::Shown(help)) => help.exit(),
        Err(Refusal::Usage(message)) => return args::usage_error(&message),
    };
    let settings = match serve_args.settings() {
        Ok(settings) => settings,
        Err(message) => return args::usage_error(&message),
    };
    let served = tokio::runtime::Runtime::new()
        .context("starting the async runtime")
        .and_then(|runtime| {
            // The trace exporter is built inside the runtime, and flushed once serving ends.
            let exporting = {
                let _inside = runtime.enter();
                observe::init_tracing(settings.log_format)?
            };
            let served = serve(&runtime, settings.config, settings.metrics_listen);
            drop(exporting);
            served
        });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Exactly one line, saying what is wrong and what to do; nothing else is printed.
            eprintln!("tapedeck: error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// Binds the port first, so that a busy port leaves the database untouched; then opens the
/// store and serves on `runtime` until SIGINT or SIGTERM.
fn serve(
    runtime: &tokio::runtime::Runtime,
    config: Config,
    metrics_listen: Option<SocketAddr>,
) -> anyhow::Result<()> {
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.server.listen)
            .await
            .map_err(|source| {
                tapedeck::Error::Setup(tapedeck::error::Setup::Bind {
                    addr: config.server.listen,
                    what: "gRPC",
                    flag: "--listen",
                    env: "TAPEDECK_LISTEN",
                    source,
                })
            })?;
        let http_listener =
            match config.server.http_listen {
                Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(
                    |source| {
                        tapedeck::Error::Setup(tapedeck::error::Setup::Bind {
                            addr,
                            what: "the HTTP face",
                            flag: "--http-listen",
                            env: "TAPEDECK_HTTP_LISTEN",
                            source,
                        })
                    },
                )?),
                None => None,
            };
        observe::install_metrics(metrics_listen)?;
        let store = tapedeck::server::open_store(&config)?;
        // Opening after a crash replays the write-ahead log, and the allocator would keep the
        // memory that took (it is free again now) for the life of the process.
        // SAFETY: mi_collect only returns free memory of the allocator's heaps to the system.
        unsafe { libmimalloc_sys::mi_collect(true) };
        // Logged once the start can no longer be refused: a refusal is one line, alone.
        observe::log_config(&config);
        let run = tapedeck::server::run(listener, http_listener, store, &config, shutdown_signal());
        run.await?;
        Ok(())
    })
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed here, not when the future is
/// first polled: the server logs that it listens before it polls this future, and a signal
/// that comes at once must still stop it cleanly rather than kill it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            match (interrupt, terminate) {
                (Ok(mut interrupt), Ok(mut terminate)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
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
    // An error may quote text from elsewhere (an id, a server's message): shown inert.
    cli::escape::for_terminal(&line)
}
