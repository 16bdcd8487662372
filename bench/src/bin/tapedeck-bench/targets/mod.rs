//! The systems under test behind one trait, so every one of them runs the same workload:
//! tapedeck (current and legacy API), Redis Streams, SQLite and a bare fsync'd log.
mod fsync_log;
mod live;
mod redis_streams;
mod sqlite;
mod tapedeck;

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub(crate) use fsync_log::FsyncLog;
pub(crate) use redis_streams::{Appendfsync, RedisStreams};
pub(crate) use sqlite::{Commit, Sqlite};
pub(crate) use tapedeck::{Api, Tapedeck};

/// A system that stores recordings of tokens and lets readers follow and replay them.
pub(crate) trait Target: Send + Sync + 'static {
    type Producer: Producer;
    type Subscriber: Subscriber;

    /// Starts recording `name` on client connection `lane`.
    fn record(
        &self,
        lane: usize,
        name: &str,
    ) -> impl Future<Output = Result<Self::Producer>> + Send;

    /// Follows recording `name` from its start until it ends. Returns once the subscription
    /// is in place, so tokens sent afterwards reach it live.
    fn subscribe(
        &self,
        lane: usize,
        name: &str,
    ) -> impl Future<Output = Result<Self::Subscriber>> + Send;

    /// Reads the whole of completed recording `name`; returns its bytes.
    fn replay(&self, lane: usize, name: &str) -> impl Future<Output = Result<u64>> + Send;

    /// The process whose disk writes and memory are the target's: `None` for this process.
    fn data_pid(&self) -> Option<u32>;

    /// Whether an acknowledged token survives a crash of the machine right after the ack.
    fn durable(&self) -> bool {
        true
    }
}

/// The producer of one recording.
pub(crate) trait Producer: Send + 'static {
    /// Sends one token. Returns how many tokens this call confirmed as stored (acked).
    fn send(&mut self, token: String) -> impl Future<Output = Result<u64>> + Send;

    /// Completes the recording; returns how many tokens this call confirmed as stored.
    fn finish(self) -> impl Future<Output = Result<u64>> + Send;

    /// Sends many tokens as fast as the target's client allows (pipelined where it can be),
    /// to load data that is then read back; returns how many were confirmed as stored.
    fn load(&mut self, tokens: Vec<String>) -> impl Future<Output = Result<u64>> + Send {
        async move {
            let mut acked = 0;
            for token in tokens {
                acked += self.send(token).await?;
            }
            Ok(acked)
        }
    }
}

/// One live reader of a recording.
pub(crate) trait Subscriber: Send + 'static {
    /// The next bytes of the recording (whole tokens, possibly several), or `None` once the
    /// recording has ended and everything was read.
    fn next(&mut self) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send;
}

/// The targets this bench knows, by the name used on the command line and in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TargetKind {
    /// tapedeck over gRPC, `Record` (client stream) + `Replay`.
    Tapedeck,
    /// tapedeck over gRPC, legacy `StreamResponseTokens`: one ack per token after its commit.
    TapedeckAck,
    /// As `tapedeck`, with access control on and an API key on every call.
    TapedeckAuth,
    /// As `tapedeck`, one instance of a cluster: the Redis locator on.
    TapedeckRedis,
    /// Redis Streams, `appendonly yes`, `appendfsync always`.
    RedisAlways,
    /// Redis Streams, `appendonly yes`, `appendfsync everysec` (acks before the fsync).
    RedisEverysec,
    /// SQLite WAL, `synchronous=FULL`, one transaction per token.
    SqliteFull,
    /// SQLite WAL, `synchronous=FULL`, one transaction for everything waiting (group commit).
    SqliteGroup,
    /// Append + fdatasync of one file, group commit: the disk's ceiling.
    FsyncLog,
}

impl TargetKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TargetKind::Tapedeck => "tapedeck",
            TargetKind::TapedeckAck => "tapedeck-ack",
            TargetKind::TapedeckAuth => "tapedeck-auth",
            TargetKind::TapedeckRedis => "tapedeck-redis",
            TargetKind::RedisAlways => "redis-always",
            TargetKind::RedisEverysec => "redis-everysec",
            TargetKind::SqliteFull => "sqlite-full",
            TargetKind::SqliteGroup => "sqlite-group",
            TargetKind::FsyncLog => "fsync-log",
        }
    }
}

/// Where the targets find their programs and put their data.
#[derive(Debug, Clone)]
pub(crate) struct Environment {
    /// The `tapedeck` release binary to spawn.
    pub tapedeck_bin: PathBuf,
    /// A running tapedeck to use instead of spawning one.
    pub tapedeck_addr: Option<SocketAddr>,
    /// Pid of the server at `tapedeck_addr`, for its disk writes and memory.
    pub tapedeck_pid: Option<u32>,
    /// The `redis-server` program.
    pub redis_server: PathBuf,
    /// Parent of every temporary data directory.
    pub work_dir: PathBuf,
    /// The `weed` binary of SeaweedFS, for the tier scenario and `--tier`.
    pub weed: PathBuf,
    /// Whether each spawned tapedeck seals into a SeaweedFS of its own (`--tier`).
    pub tier: bool,
    /// Arguments every spawned tapedeck gets after the bench's own (the curves scenario raises
    /// the retention and the live-recording limit with them); none by default.
    pub tapedeck_args: Vec<String>,
}

/// A child process killed (and reaped) when dropped.
pub(crate) struct ChildGuard {
    child: Child,
}

impl ChildGuard {
    pub(crate) fn new(child: Child) -> Self {
        Self { child }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the process with SIGTERM and waits for it to exit.
    pub(crate) fn terminate(&mut self) -> Result<()> {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32)
            .context("the process has no pid")?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)?;
        self.child.wait()?;
        Ok(())
    }

    /// Fails if the process has already exited.
    pub(crate) fn check_running(&mut self, what: &str) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{what} exited early with {status}");
        }
        Ok(())
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on right now.
pub(crate) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// Waits until `ready` succeeds, checking that `child` is still running, for up to 15 s.
pub(crate) async fn wait_ready<F, Fut>(
    child: &mut ChildGuard,
    what: &str,
    mut ready: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        child.check_running(what)?;
        match ready().await {
            Ok(()) => return Ok(()),
            Err(err) if Instant::now() > deadline => {
                return Err(err.context(format!("{what} did not become ready")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// A fresh temporary directory under `parent`.
pub(crate) fn temp_dir(parent: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    std::fs::create_dir_all(parent)?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .with_context(|| format!("creating a temp dir in {}", parent.display()))
}
