//! The `tapedeck` binary: parses the command line (flags with `TAPEDECK_*` env fallbacks),
//! starts logging, and runs the server until SIGINT or SIGTERM.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use flags::{
    Bytes, HttpListen, parse_advertised, parse_chunk_size, parse_commit_interval, parse_duration,
    parse_grant, parse_http_listen, parse_listen, parse_positive_duration, parse_positive_size,
};
use tapedeck::Config;
use tapedeck::access::{AccessConfig, ApiKey, Claims, Role, Secret};
use tapedeck::config::LocatorConfig;
use tapedeck::config::TlsFiles;

/// mimalloc instead of glibc's malloc: under many connections glibc's arenas contend on their
/// locks and grow and trim the heap (`mprotect`) over and over; profiled in BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cli;
mod flags;

/// Exit code of a command line that cannot be run as given (clap's own, for usage errors).
const USAGE_EXIT: u8 = 2;

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
    Serve(Box<ServeArgs>),
    /// Print a signed grant (an HS256 JWT) for a user, as an agent app would issue it.
    Token(TokenArgs),
    /// Talk to a running server (record, replay, ls, inspect, rm, cancel, check).
    #[command(flatten)]
    Client(cli::ClientCommand),
    /// Offline tools on a stopped server's data dir: stats, check, compact.
    #[command(subcommand)]
    Db(cli::db::DbCommand),
}

#[derive(clap::Args)]
struct TokenArgs {
    /// The shared secret the server checks grants with (its --jwt-secret).
    #[arg(long, env = "TAPEDECK_JWT_SECRET", hide_env_values = true)]
    jwt_secret: String,
    /// Who the grant is for (`sub`).
    #[arg(long)]
    subject: String,
    /// A conversation and the role on it, `ID=reader` or `ID=writer`; `*=reader` for all
    /// (repeatable).
    #[arg(long = "conversation", value_name = "ID=ROLE", value_parser = parse_grant)]
    conversations: Vec<(String, Role)>,
    /// How long the grant is valid.
    #[arg(long, value_parser = parse_positive_duration, default_value = "15m")]
    ttl: humantime::Duration,
    /// Issuer (`iss`), if the server checks one.
    #[arg(long)]
    issuer: Option<String>,
    /// Audience (`aud`), if the server checks one.
    #[arg(long)]
    audience: Option<String>,
}

/// Every default comes from `Config::default()`, written once in `src/config.rs`.
#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on: an IP address or a host name, with a port.
    #[arg(long, env = "TAPEDECK_LISTEN", default_value_t = Config::default().listen,
          value_parser = parse_listen)]
    listen: SocketAddr,
    /// Address of the HTTP face (the Durable Streams protocol, for browsers and plain-HTTP
    /// agents), or `off`.
    #[arg(long, env = "TAPEDECK_HTTP_LISTEN", value_parser = parse_http_listen,
          default_value_t = HttpListen(Config::default().http_listen))]
    http_listen: HttpListen,
    /// Longest a request to the HTTP face may take to arrive, its head and then its body
    /// (more than zero); an idle keep-alive connection is closed after it too.
    #[arg(long, env = "TAPEDECK_HTTP_REQUEST_TIMEOUT", value_parser = parse_positive_duration,
          default_value_t = humantime::Duration::from(Config::default().http_bounds.request_timeout))]
    http_request_timeout: humantime::Duration,
    /// Most connections the HTTP face serves at once (more than zero); one more is answered
    /// 503 and closed.
    #[arg(long, env = "TAPEDECK_HTTP_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u32).range(1..),
          default_value_t = Config::default().http_bounds.max_connections as u32)]
    http_max_connections: u32,
    /// Directory of the database file.
    #[arg(long, env = "TAPEDECK_DATA_DIR", default_value_os_t = Config::default().data_dir)]
    data_dir: PathBuf,
    /// How long finished recordings stay replayable (e.g. 30m, 1.5h, 90s, 2d).
    #[arg(long, env = "TAPEDECK_RETENTION", value_parser = parse_duration,
          default_value_t = humantime::Duration::from(Config::default().retention))]
    retention: humantime::Duration,
    /// Longest retention a producer may choose for its own recording (retention_seconds).
    #[arg(long, env = "TAPEDECK_MAX_RETENTION", value_parser = parse_duration,
          default_value_t = humantime::Duration::from(Config::default().max_retention))]
    max_retention: humantime::Duration,
    /// How long a collected recording's tombstone answers "expired" instead of "unknown".
    #[arg(long, env = "TAPEDECK_TOMBSTONE_RETENTION", value_parser = parse_duration,
          default_value_t = humantime::Duration::from(Config::default().tombstone_retention))]
    tombstone_retention: humantime::Duration,
    /// How long a recording whose producer went away waits for it to resume before it ends as
    /// interrupted (0 ends it at once).
    #[arg(long, env = "TAPEDECK_PRODUCER_GRACE", value_parser = parse_duration,
          default_value_t = humantime::Duration::from(Config::default().producer_grace))]
    producer_grace: humantime::Duration,
    /// What a new recording does to a conversation's live one: supersede it, or be refused
    /// with ALREADY_EXISTS.
    #[arg(long, env = "TAPEDECK_ON_CONFLICT", value_enum, default_value_t = Conflict::Supersede)]
    on_conflict: Conflict,
    /// How often expired and idle recordings are collected (more than zero).
    #[arg(long, env = "TAPEDECK_GC_INTERVAL", value_parser = parse_positive_duration,
          default_value_t = humantime::Duration::from(Config::default().gc_interval))]
    gc_interval: humantime::Duration,
    /// A live recording with no token for this long is ended as interrupted (more than zero).
    #[arg(long, env = "TAPEDECK_IDLE_TIMEOUT", value_parser = parse_positive_duration,
          default_value_t = humantime::Duration::from(Config::default().idle_timeout))]
    idle_timeout: humantime::Duration,
    /// Largest chunk (e.g. 1MiB, 512KiB, 4096; KB and MB are powers of 1000).
    #[arg(long, env = "TAPEDECK_MAX_CHUNK_BYTES", value_parser = parse_chunk_size,
          default_value_t = Bytes(Config::default().max_chunk_bytes as u64))]
    max_chunk_bytes: Bytes,
    /// Largest recording.
    #[arg(long, env = "TAPEDECK_MAX_RECORDING_BYTES", value_parser = parse_positive_size,
          default_value_t = Bytes(Config::default().max_recording_bytes))]
    max_recording_bytes: Bytes,
    /// Most recordings live at once (more than zero).
    #[arg(long, env = "TAPEDECK_MAX_LIVE_RECORDINGS",
          value_parser = clap::value_parser!(u32).range(1..),
          default_value_t = Config::default().max_live_recordings as u32)]
    max_live_recordings: u32,
    /// Size of the write-ahead log that makes the next commit a checkpoint (redb synced, the
    /// log emptied); bounds what a restart after a crash replays.
    #[arg(long, env = "TAPEDECK_CHECKPOINT_SIZE", value_parser = parse_positive_size,
          default_value_t = Bytes(Config::default().checkpoint_bytes))]
    checkpoint_size: Bytes,
    /// Memory redb keeps pages of the file in (its own cache; reads beyond it come from the
    /// OS page cache): more speeds up catch-up reads of recent recordings.
    #[arg(long, env = "TAPEDECK_CACHE_SIZE", value_parser = parse_positive_size,
          default_value_t = Bytes(Config::default().cache_bytes))]
    cache_size: Bytes,
    /// Group commit: while commits hold several producers' tokens, the next commit starts at
    /// least this long after the last one did, so each disk sync carries more (less CPU and
    /// disk writes per token, a little more latency). `0s` commits as soon as it can.
    #[arg(long, env = "TAPEDECK_COMMIT_INTERVAL", value_parser = parse_commit_interval,
          default_value_t = humantime::Duration::from(Config::default().commit_interval))]
    commit_interval: humantime::Duration,
    /// How long shutdown waits for streams to end and the store to close.
    #[arg(long, env = "TAPEDECK_SHUTDOWN_TIMEOUT", value_parser = parse_duration,
          default_value_t = humantime::Duration::from(Config::default().shutdown_timeout))]
    shutdown_timeout: humantime::Duration,
    /// Log format.
    #[arg(long, env = "TAPEDECK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// An API key of a trusted service, `name=secret` (repeatable; the env var takes a
    /// comma-separated list). Any credential turns access control on.
    #[arg(
        long = "api-key",
        env = "TAPEDECK_API_KEYS",
        value_name = "NAME=SECRET",
        value_delimiter = ',',
        hide_env_values = true
    )]
    api_keys: Vec<String>,
    /// A file of API keys: one `name=secret` a line, `#` comments.
    #[arg(long, env = "TAPEDECK_API_KEYS_FILE")]
    api_keys_file: Option<PathBuf>,
    /// Shared secret of HS256 grants (bearer tokens).
    #[arg(long, env = "TAPEDECK_JWT_SECRET", hide_env_values = true)]
    jwt_secret: Option<String>,
    /// PEM public key of RS256, ES256 or EdDSA grants.
    #[arg(long, env = "TAPEDECK_JWT_PUBLIC_KEY")]
    jwt_public_key: Option<PathBuf>,
    /// The issuer (`iss`) grants must name.
    #[arg(long, env = "TAPEDECK_JWT_ISSUER")]
    jwt_issuer: Option<String>,
    /// The audience (`aud`) grants must name.
    #[arg(long, env = "TAPEDECK_JWT_AUDIENCE")]
    jwt_audience: Option<String>,
    /// Serve a non-loopback address with no credentials configured (anyone who can reach the
    /// port may then read and cancel every recording).
    #[arg(long, env = "TAPEDECK_ALLOW_UNAUTHENTICATED")]
    allow_unauthenticated: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9091). Default off.
    #[arg(long, env = "TAPEDECK_METRICS_LISTEN", value_parser = parse_listen)]
    metrics_listen: Option<SocketAddr>,
    /// Redis of the locator, `redis://[user:password@]host:port[/db]`: runs this instance as
    /// one of several behind one address (with --advertised-address).
    #[arg(long, env = "TAPEDECK_REDIS_URL", hide_env_values = true)]
    redis_url: Option<String>,
    /// The host:port other instances redirect clients to (required with --redis-url).
    #[arg(long, env = "TAPEDECK_ADVERTISED_ADDRESS", value_parser = parse_advertised)]
    advertised_address: Option<String>,
    /// PEM certificate chain: serve gRPC over TLS (with --tls-key).
    #[arg(long, env = "TAPEDECK_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "TAPEDECK_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM CA certificate: clients must present a certificate it signed (mutual TLS).
    #[arg(long, env = "TAPEDECK_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Conflict {
    Supersede,
    Reject,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    // Transparent huge pages keep whole 2 MiB pages resident for the allocator's partly used
    // spans: about 35 MiB more under 1,000 producers (BENCHMARKS.md), for no measured speed.
    // Best effort: a kernel without the setting just keeps its default.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print as usual; a bad command line gets one line.
        Err(err) if !err.use_stderr() => err.exit(),
        Err(err) => {
            let text = err.to_string();
            let first = text.lines().next().unwrap_or_default();
            return usage_error(&with_variable(&err, first.trim_start_matches("error: ")));
        }
    };
    let args = match cli.command {
        Command::Serve(args) => args,
        Command::Token(args) => return token(args),
        Command::Client(command) => return cli::run(command),
        Command::Db(command) => return cli::db::run(command),
    };
    let access = match access_config(&args) {
        Ok(access) => access,
        Err(err) => return usage_error(&err.to_string()),
    };
    let exposed = std::iter::once(args.listen)
        .chain(args.http_listen.0)
        .find(|addr| !addr.ip().is_loopback());
    if let Some(addr) = exposed
        && !access.is_enabled()
        && !args.allow_unauthenticated
    {
        return usage_error(&format!(
            "refusing to serve {addr} without access control: anyone who can reach it could \
             read and cancel every recording; configure --api-key, --jwt-secret or \
             --jwt-public-key, or pass --allow-unauthenticated"
        ));
    }
    if let Err(message) = check_locator_flags(&args) {
        return usage_error(message);
    }
    if args.retention > args.max_retention {
        return usage_error(&format!(
            "--retention {} is longer than --max-retention {}; raise --max-retention",
            args.retention, args.max_retention
        ));
    }
    init_tracing(args.log_format);
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.tls_client_ca.clone(),
        }),
        _ => None,
    };
    let config = Config {
        listen: args.listen,
        http_listen: args.http_listen.0,
        http_bounds: tapedeck::http::Bounds {
            request_timeout: args.http_request_timeout.into(),
            max_connections: args.http_max_connections as usize,
        },
        data_dir: args.data_dir,
        retention: args.retention.into(),
        max_retention: args.max_retention.into(),
        tombstone_retention: args.tombstone_retention.into(),
        producer_grace: args.producer_grace.into(),
        on_conflict: match args.on_conflict {
            Conflict::Supersede => tapedeck::config::OnConflict::Supersede,
            Conflict::Reject => tapedeck::config::OnConflict::Reject,
        },
        gc_interval: args.gc_interval.into(),
        idle_timeout: args.idle_timeout.into(),
        max_chunk_bytes: usize::try_from(args.max_chunk_bytes.0).unwrap_or(usize::MAX),
        max_recording_bytes: args.max_recording_bytes.0,
        max_live_recordings: args.max_live_recordings as usize,
        checkpoint_bytes: args.checkpoint_size.0,
        cache_bytes: args.cache_size.0,
        commit_interval: args.commit_interval.into(),
        shutdown_timeout: args.shutdown_timeout.into(),
        access,
        tls,
        locator: args.redis_url.zip(args.advertised_address).map(
            |(redis_url, advertised_address)| LocatorConfig {
                redis_url,
                advertised_address,
            },
        ),
    };
    match serve(config, args.metrics_listen) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Exactly one line, saying what is wrong and what to do; nothing else is printed.
            eprintln!("tapedeck: error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// The locator's flags come together. The URL is checked here rather than by clap, whose
/// errors repeat the value: a URL may hold a password.
fn check_locator_flags(args: &ServeArgs) -> Result<(), &'static str> {
    match (&args.redis_url, &args.advertised_address) {
        (Some(_), None) => Err(
            "--redis-url needs --advertised-address, the host:port other \
             instances send clients to",
        ),
        (None, Some(_)) => Err("--advertised-address is used only with --redis-url, which \
             turns the locator on"),
        (Some(url), Some(_))
            if redis::IntoConnectionInfo::into_connection_info(url.as_str()).is_err() =>
        {
            Err("--redis-url is not a Redis URL; use redis://[user:password@]host:port[/db]")
        }
        _ => Ok(()),
    }
}

/// `message`, clap's refusal of a setting, naming the setting's variable too: a value may come
/// from either, and clap names only the flag.
fn with_variable(err: &clap::Error, message: &str) -> String {
    use clap::CommandFactory;
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return message.to_string();
    };
    let Some(long) = arg
        .split_whitespace()
        .next()
        .and_then(|flag| flag.strip_prefix("--"))
    else {
        return message.to_string();
    };
    fn variable_of(command: &clap::Command, long: &str) -> Option<String> {
        command
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .and_then(|a| a.get_env())
            .map(|env| env.to_string_lossy().into_owned())
            .or_else(|| {
                command
                    .get_subcommands()
                    .find_map(|sub| variable_of(sub, long))
            })
    }
    match variable_of(&Cli::command(), long) {
        Some(env) if !message.contains(&env) => format!("{message} (--{long} or {env})"),
        _ => message.to_string(),
    }
}

/// Says what is wrong with the command line, on one line, and exits with code 2.
fn usage_error(message: &str) -> ExitCode {
    eprintln!("tapedeck: error: {message}");
    ExitCode::from(USAGE_EXIT)
}

/// The access settings of `args`. API keys are parsed here rather than by clap, whose error
/// would repeat the text given, secret included.
/// Every credential is checked here, before anything is opened: one that is set but empty
/// (an unset variable in a compose file) must not turn access control on and let anyone in.
fn access_config(args: &ServeArgs) -> tapedeck::Result<AccessConfig> {
    let mut api_keys = args
        .api_keys
        .iter()
        .map(|text| {
            ApiKey::parse(text).map_err(|err| name_setting(err, "--api-key (TAPEDECK_API_KEYS)"))
        })
        .collect::<tapedeck::Result<Vec<_>>>()?;
    if let Some(file) = &args.api_keys_file {
        let setting = "--api-keys-file (TAPEDECK_API_KEYS_FILE)";
        if file.as_os_str().is_empty() {
            return Err(tapedeck::Error::BadApiKey {
                reason: format!("{setting} is empty: name a file of API keys, or leave it unset"),
            });
        }
        api_keys.extend(ApiKey::read_file(file).map_err(|err| name_setting(err, setting))?);
    }
    let config = AccessConfig {
        api_keys,
        jwt_secret: args.jwt_secret.clone().map(Secret::new),
        jwt_public_key: args.jwt_public_key.clone(),
        jwt_issuer: args.jwt_issuer.clone(),
        jwt_audience: args.jwt_audience.clone(),
    };
    config.check()?;
    Ok(config)
}

/// `err`, an API key refusal, with the setting it came from in front of its reason.
fn name_setting(err: tapedeck::Error, setting: &str) -> tapedeck::Error {
    match err {
        tapedeck::Error::BadApiKey { reason } => tapedeck::Error::BadApiKey {
            reason: format!("{setting}: {reason}"),
        },
        other => other,
    }
}

/// `tapedeck token`: prints a signed grant on stdout.
fn token(args: TokenArgs) -> ExitCode {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let secret = Secret::new(args.jwt_secret);
    if let Err(err) = secret.check_jwt_secret() {
        return usage_error(&err.to_string());
    }
    let claims = Claims {
        sub: args.subject,
        exp: now.saturating_add(Duration::from(args.ttl).as_secs()),
        nbf: None,
        iss: args.issuer,
        aud: args.audience,
        conversations: args.conversations.into_iter().collect(),
    };
    match tapedeck::access::mint(&secret, &claims) {
        Ok(token) => {
            println!("{token}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("tapedeck: error: {err}");
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
    // An error may quote text from elsewhere (an id, a server's message): shown inert.
    cli::escape::for_terminal(&line)
}

/// Binds the port first, so that a busy port leaves the database untouched; then opens the
/// store and serves until SIGINT or SIGTERM.
fn serve(config: Config, metrics_listen: Option<SocketAddr>) -> anyhow::Result<()> {
    use anyhow::Context;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| tapedeck::Error::Bind {
                addr: config.listen,
                what: "gRPC",
                flag: "--listen",
                env: "TAPEDECK_LISTEN",
                source,
            })?;
        let http_listener =
            match config.http_listen {
                Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(
                    |source| tapedeck::Error::Bind {
                        addr,
                        what: "the HTTP face",
                        flag: "--http-listen",
                        env: "TAPEDECK_HTTP_LISTEN",
                        source,
                    },
                )?),
                None => None,
            };
        if let Some(addr) = metrics_listen {
            serve_metrics(addr)?;
        }
        let store = tapedeck::server::open_store(&config)?;
        // Opening after a crash replays the write-ahead log, and the allocator would keep the
        // memory that took (it is free again now) for the life of the process.
        // SAFETY: mi_collect only returns free memory of the allocator's heaps to the system.
        unsafe { libmimalloc_sys::mi_collect(true) };
        // Logged once the start can no longer be refused: a refusal is one line, alone.
        log_config(&config);
        let run = tapedeck::server::run(listener, http_listener, store, &config, shutdown_signal());
        run.await?;
        Ok(())
    })
}

/// Installs the Prometheus exporter, serving `/metrics` on `addr` from a task of its own.
fn serve_metrics(addr: SocketAddr) -> anyhow::Result<()> {
    use anyhow::Context;
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    // Bound here first so that a busy port is refused with the usual message.
    std::net::TcpListener::bind(addr).map_err(|source| tapedeck::Error::Bind {
        addr,
        what: "metrics",
        flag: "--metrics-listen",
        env: "TAPEDECK_METRICS_LISTEN",
        source,
    })?;
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            Matcher::Suffix("_seconds".into()),
            tapedeck::metrics::SECONDS_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(tapedeck::metrics::COMMIT_BATCH_OPS.into()),
            tapedeck::metrics::OPS_BUCKETS,
        )?
        .install()
        .with_context(|| {
            format!("cannot serve metrics on {addr} (--metrics-listen or TAPEDECK_METRICS_LISTEN)")
        })?;
    tapedeck::metrics::describe();
    tracing::info!(%addr, "serving Prometheus metrics at /metrics");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
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

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour escapes only for a person at a terminal, never in a file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// One line with every setting the server runs with.
fn log_config(config: &Config) {
    tracing::info!(
        listen = %config.listen,
        http_listen = ?config.http_listen,
        http_request_timeout = %humantime::format_duration(config.http_bounds.request_timeout),
        http_max_connections = config.http_bounds.max_connections,
        data_dir = %config.data_dir.display(),
        retention = %humantime::format_duration(config.retention),
        max_retention = %humantime::format_duration(config.max_retention),
        tombstone_retention = %humantime::format_duration(config.tombstone_retention),
        producer_grace = %humantime::format_duration(config.producer_grace),
        on_conflict = ?config.on_conflict,
        gc_interval = %humantime::format_duration(config.gc_interval),
        idle_timeout = %humantime::format_duration(config.idle_timeout),
        max_chunk_bytes = %Bytes(config.max_chunk_bytes as u64),
        max_recording_bytes = %Bytes(config.max_recording_bytes),
        max_live_recordings = config.max_live_recordings,
        checkpoint_size = %Bytes(config.checkpoint_bytes),
        cache_size = %Bytes(config.cache_bytes),
        commit_interval = %humantime::format_duration(config.commit_interval),
        shutdown_timeout = %humantime::format_duration(config.shutdown_timeout),
        api_keys = ?config.access.api_keys.iter().map(|k| &k.name).collect::<Vec<_>>(),
        jwt_secret = config.access.jwt_secret.is_some(),
        jwt_public_key = ?config.access.jwt_public_key,
        jwt_issuer = ?config.access.jwt_issuer,
        jwt_audience = ?config.access.jwt_audience,
        tls = config.tls.is_some(),
        mutual_tls = config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        redis = ?config.locator.as_ref().map(|l| l.redacted_url()),
        advertised_address = ?config.locator.as_ref().map(|l| &l.advertised_address),
        "starting with this configuration"
    );
}
