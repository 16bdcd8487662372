//! The contenders: Durable Streams servers started as processes on a fresh data dir and a free
//! loopback port, each with acknowledgements that wait for the disk.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

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
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Tapedeck => "tapedeck",
            Kind::Electric => "electric-ds 0.1.5 (wal)",
            Kind::DsAcid => "ds-server 0.3.0 (acid)",
        }
    }
}

/// Where the binaries are.
pub(crate) struct Binaries {
    pub(crate) tapedeck: PathBuf,
    pub(crate) electric: PathBuf,
    pub(crate) ds_server: PathBuf,
}

/// A running server; killed when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
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

/// Starts `kind` with its data under `work_dir`, and waits until it answers.
pub(crate) async fn start(kind: Kind, bins: &Binaries, work_dir: &Path) -> Result<Server> {
    let data = tempfile::tempdir_in(work_dir).context("making a data dir")?;
    let port = free_port()?;
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
    };
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", kind.name()))?;
    let server = Server {
        child,
        base: format!("http://127.0.0.1:{port}/v1/stream"),
        _data: data,
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let probe = format!("{}/bench-ready-probe", server.base);
        if let Ok(response) = client.head(&probe).send().await
            && (response.status().as_u16() == 404 || response.status().is_success())
        {
            return Ok(server);
        }
        if Instant::now() > deadline {
            bail!("{} did not answer within 30 s", kind.name());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
