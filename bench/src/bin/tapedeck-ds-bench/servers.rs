//! The contenders: Durable Streams servers, and S2's self-hosted server, started as processes on
//! a fresh data dir and a free loopback port, each with acknowledgements that wait for the disk.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::scenarios::{Api, S2_BASIN};

/// Which server a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// tapedeck's HTTP face: every append committed (redb, fsync) before its response.
    Tapedeck,
    /// Electric's `durable-streams-server` (crate `durable-streams` 0.1.5), `--durability wal`:
    /// appends acknowledged once their WAL record is fsynced.
    Electric,
    /// `durable-streams-server` 0.3.0 in `acid` mode (redb, `Durability::Immediate`).
    DsAcid,
    /// S2's self-hosted server, `s2 lite` (crate `s2-cli` 0.43.4), on a local directory: SlateDB
    /// on `object_store`'s local file system with fsync (since 0.41.2); an append is
    /// acknowledged, and shown to readers, once the WAL file that holds it is written and
    /// fsynced. Spoken to over S2's own REST API ([`Api::S2`]).
    S2,
}

/// Measures a peer is left out of, and why.
pub(crate) fn skips(kind: Kind, measure: &str) -> Option<&'static str> {
    match (kind, measure) {
        // S2's reads are paginated: one answers at most 1,000 records or 1 MiB, where a Durable
        // Streams server sizes its catch-up answers itself, so the MB/s would measure S2's page
        // size more than its reads.
        (Kind::S2, "catch-up") => {
            Some("its reads are paginated, so catch-up MB/s would not compare")
        }
        // Electric 0.1.5 answers an HTTP/2 client's cleartext preface with GOAWAY
        // (FRAME_SIZE_ERROR): it speaks HTTP/1.1 only, without TLS.
        (Kind::Electric, "fan-out-http2") => Some("it speaks no cleartext HTTP/2"),
        // Everything else is fair to S2: the appends (back to back on many streams or one, and
        // at a fixed rate) are one record per request, acknowledged once fsynced, as on the
        // others; the SSE measures (latency, fan-out) follow each stream from its tail over
        // S2's SSE read session, which sends records once they are durable, as the others do.
        _ => None,
    }
}

/// `SL8_FLUSH_INTERVAL` for `s2 lite`: SlateDB's WAL flush timer (a duration string: "5ms",
/// "0s"; 5 ms by default with `--local-root`, 50 ms on S3). The flush task ticks at that
/// interval, measured from the start of the last flush, and a tick writes and fsyncs one WAL
/// file holding every write since the last; a flush that takes longer than the interval is
/// followed by the next at once. Appends wait for the flush that holds them, there is no flush
/// on demand.
///
/// tapedeck starts a commit (one fsync) as soon as the last one is done, with no timer; after a
/// commit of several operations it may wait at most as long as that commit took, capped at
/// 4 ms. The nearest S2 gets is no timer at all: with 0 the next flush starts as soon as the
/// last is done, on the next tick of tokio's 1 ms timer wheel (a zero sleep still waits for
/// it), so S2 flushes at most about every millisecond when idle and back to back under load.
/// Its 5 ms default would add up to 5 ms to every acknowledgement, which tapedeck's policy
/// does not.
const S2_FLUSH_INTERVAL: &str = "0ms";

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Tapedeck => "tapedeck",
            Kind::Electric => "electric-ds 0.1.5 (wal)",
            Kind::DsAcid => "ds-server 0.3.0 (acid)",
            Kind::S2 => "s2 lite 0.43.4 (fsync)",
        }
    }

    /// How the bench speaks to it.
    pub(crate) fn api(self) -> Api {
        match self {
            Kind::Tapedeck | Kind::Electric | Kind::DsAcid => Api::DurableStreams,
            Kind::S2 => Api::S2,
        }
    }
}

/// Where the binaries are.
pub(crate) struct Binaries {
    pub(crate) tapedeck: PathBuf,
    pub(crate) electric: PathBuf,
    pub(crate) ds_server: PathBuf,
    /// `s2` of `s2-cli` 0.43.4, if S2 is measured.
    pub(crate) s2: Option<PathBuf>,
}

/// A running server; killed when dropped.
pub(crate) struct Server {
    child: Child,
    /// The URL under which its streams are named.
    pub(crate) base: String,
    pub(crate) api: Api,
    _data: tempfile::TempDir,
}

impl Server {
    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A port free on every address, for a server that listens on 0.0.0.0 (`s2 lite` has no host
/// flag): one free on 127.0.0.1 may still be held on another loopback address, as the fan-out's
/// readers' ports are (127.1.0.x, in TIME_WAIT) after a run, and binding 0.0.0.0 to it fails.
fn free_port_on_all_addresses() -> Result<u16> {
    let listener = std::net::TcpListener::bind("0.0.0.0:0")?;
    Ok(listener.local_addr()?.port())
}

/// Starts `kind` with its data under `work_dir`, and waits until it answers.
pub(crate) async fn start(kind: Kind, bins: &Binaries, work_dir: &Path) -> Result<Server> {
    let data = tempfile::tempdir_in(work_dir).context("making a data dir")?;
    let port = match kind {
        Kind::S2 => free_port_on_all_addresses()?,
        Kind::Tapedeck | Kind::Electric | Kind::DsAcid => free_port()?,
    };
    let dir = data.path();
    let mut command = match kind {
        Kind::Tapedeck => {
            let mut c = Command::new(&bins.tapedeck);
            let grpc = format!("127.0.0.1:{}", free_port()?);
            c.args(["serve", "--listen", &grpc, "--http-listen"])
                .arg(format!("127.0.0.1:{port}"))
                .arg("--data-dir")
                .arg(dir)
                // The fan-out measure holds up to 100,000 connections; the default allows 4,096.
                .args(["--http-max-connections", "200000"]);
            c.env("RUST_LOG", "warn");
            c
        }
        Kind::Electric => {
            let mut c = Command::new(&bins.electric);
            c.args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--durability", "wal", "--data-dir"])
                .arg(dir);
            c
        }
        Kind::DsAcid => {
            let mut c = Command::new(&bins.ds_server);
            c.current_dir(dir)
                .env("DS_SERVER__BIND_ADDRESS", format!("127.0.0.1:{port}"))
                .env("DS_STORAGE__MODE", "acid")
                .env("DS_STORAGE__DATA_DIR", dir.join("streams"))
                .env("DS_LIMITS__MAX_MEMORY_BYTES", (4u64 << 30).to_string())
                .env("DS_LIMITS__MAX_STREAM_BYTES", (1u64 << 30).to_string())
                .env("DS_OBSERVABILITY__RUST_LOG", "warn");
            c
        }
        Kind::S2 => {
            let mut c = Command::new(bins.s2.as_ref().context("S2 is measured without --s2")?);
            // It listens on 0.0.0.0 (no host flag); the bench talks to 127.0.0.1. No access
            // token: `s2 lite` checks none.
            c.args(["lite", "--port", &port.to_string(), "--local-root"])
                .arg(dir)
                .env("SL8_FLUSH_INTERVAL", S2_FLUSH_INTERVAL)
                // Its default, info, logs a line per request.
                .env("RUST_LOG", "warn");
            c
        }
    };
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", kind.name()))?;
    let base = match kind.api() {
        Api::DurableStreams => format!("http://127.0.0.1:{port}/v1/stream"),
        Api::S2 => format!("http://127.0.0.1:{port}/v1/streams"),
    };
    let mut server = Server {
        child,
        base,
        api: kind.api(),
        _data: data,
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = match server.api {
            Api::DurableStreams => {
                let probe = format!("{}/bench-ready-probe", server.base);
                client.head(&probe).send().await.is_ok_and(|response| {
                    response.status().as_u16() == 404 || response.status().is_success()
                })
            }
            // Ready once it has made the basin every stream goes in.
            Api::S2 => {
                let basin = format!("http://127.0.0.1:{port}/v1/basins/{S2_BASIN}");
                client
                    .put(&basin)
                    .send()
                    .await
                    .is_ok_and(|response| response.status().is_success())
            }
        };
        if ready {
            return Ok(server);
        }
        if let Some(status) = server.child.try_wait()? {
            bail!("{} exited while starting: {status}", kind.name());
        }
        if Instant::now() > deadline {
            bail!("{} did not answer within 30 s", kind.name());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
