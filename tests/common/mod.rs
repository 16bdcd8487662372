//! Test harness: a real tapedeck server on 127.0.0.1:0 with a temp data dir, real tonic
//! clients, and helpers to record and replay.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tapedeck::Config;
use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tapedeck::pb::response_resumer_service_client::ResponseResumerServiceClient;
use tapedeck::pb::{RecordRequest, RecordResponse, ReplayRequest, ReplayResponse};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

/// How long any single wait in a test may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

pub type RecorderClient = ResponseRecorderServiceClient<Channel>;
pub type ResumerClient = ResponseResumerServiceClient<Channel>;

/// A server running in this process.
pub struct TestServer {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<tapedeck::Result<()>>,
}

/// A config for tests: everything default but the data dir and a short shutdown timeout.
pub fn test_config(data_dir: &Path) -> Config {
    Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        data_dir: data_dir.to_path_buf(),
        shutdown_timeout: Duration::from_secs(5),
        ..Config::default()
    }
}

impl TestServer {
    /// Starts a server on `config.data_dir`, listening on a free loopback port.
    pub async fn start(config: Config) -> TestServer {
        let store = tapedeck::server::open_store(&config).unwrap();
        Self::start_with_store(config, store).await
    }

    /// Starts a server with default settings on `data_dir`.
    pub async fn start_in(data_dir: &Path) -> TestServer {
        Self::start(test_config(data_dir)).await
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn recorder(&self) -> RecorderClient {
        ResponseRecorderServiceClient::connect(self.url())
            .await
            .unwrap()
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024)
    }

    pub async fn resumer(&self) -> ResumerClient {
        ResponseResumerServiceClient::connect(self.url())
            .await
            .unwrap()
    }

    /// Shuts the server down gracefully and waits until its database is closed.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), &mut self.task)
            .await
            .expect("server did not stop in time")
            .unwrap()
            .unwrap();
    }
}

/// A producer on the current API: messages go in through a channel, the answer comes back
/// when the call ends.
pub struct Recording {
    pub tx: mpsc::Sender<RecordRequest>,
    pub answer: JoinHandle<Result<RecordResponse, Status>>,
}

impl Recording {
    /// Opens a Record call whose first message carries only the id.
    pub async fn open(client: &RecorderClient, id: &[u8]) -> Recording {
        let (tx, rx) = mpsc::channel(1024);
        tx.send(RecordRequest {
            conversation_id: id.to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
        let mut client = client.clone();
        let answer = tokio::spawn(async move {
            client
                .record(ReceiverStream::new(rx))
                .await
                .map(|r| r.into_inner())
        });
        Recording { tx, answer }
    }

    pub async fn send(&self, content: &str) {
        self.tx
            .send(RecordRequest {
                content: content.to_string(),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    /// Sends `complete=true` and waits for the answer.
    pub async fn complete(self) -> Result<RecordResponse, Status> {
        let _ = self
            .tx
            .send(RecordRequest {
                complete: true,
                ..Default::default()
            })
            .await;
        self.answer().await
    }

    /// Waits for the call's answer without sending anything more.
    pub async fn answer(self) -> Result<RecordResponse, Status> {
        tokio::time::timeout(WAIT, self.answer)
            .await
            .expect("Record did not answer in time")
            .unwrap()
    }
}

/// Records `tokens` as one complete recording of `id` and checks it succeeded.
pub async fn record_all(client: &RecorderClient, id: &[u8], tokens: &[&str]) {
    let recording = Recording::open(client, id).await;
    for token in tokens {
        recording.send(token).await;
    }
    let answer = recording.complete().await.unwrap();
    assert_eq!(
        answer.status,
        tapedeck::pb::RecordStatus::Success as i32,
        "{answer:?}"
    );
}

/// Opens a replay from `offset`.
pub async fn replay_from(
    client: &RecorderClient,
    id: &[u8],
    offset: i64,
) -> Result<Streaming<ReplayResponse>, Status> {
    client
        .clone()
        .replay(ReplayRequest {
            conversation_id: id.to_vec(),
            resume_offset: offset,
        })
        .await
        .map(|r| r.into_inner())
}

/// What a replay returned by the time it closed.
#[derive(Debug)]
pub struct Replayed {
    pub text: String,
    pub offsets: Vec<i64>,
    /// The `tapedeck-status` trailer.
    pub status: Option<String>,
    pub end_offset: Option<u64>,
}

/// Reads a replay stream to its end (failing the test if it takes longer than [`WAIT`]).
pub async fn read_all(mut stream: Streaming<ReplayResponse>) -> Result<Replayed, Status> {
    let mut replayed = Replayed {
        text: String::new(),
        offsets: Vec::new(),
        status: None,
        end_offset: None,
    };
    tokio::time::timeout(WAIT, async {
        while let Some(message) = stream.message().await? {
            replayed.text.push_str(&message.content);
            replayed.offsets.push(message.offset);
        }
        if let Some(trailers) = stream.trailers().await? {
            replayed.status = trailers
                .get("tapedeck-status")
                .and_then(|v| v.to_str().ok())
                .map(String::from);
            replayed.end_offset = trailers
                .get("tapedeck-offset")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok());
        }
        Ok::<_, Status>(())
    })
    .await
    .expect("replay did not end in time")?;
    Ok(replayed)
}

/// Replays `id` from the start to its end.
pub async fn replay_text(client: &RecorderClient, id: &[u8]) -> Result<Replayed, Status> {
    read_all(replay_from(client, id, 0).await?).await
}

/// A loopback TCP proxy in front of a server whose connections can be cut at once, the way a
/// client process that dies or a network that drops would cut them.
pub struct CuttableProxy {
    pub addr: SocketAddr,
    cut: tokio_util::sync::CancellationToken,
}

impl CuttableProxy {
    pub async fn start(target: SocketAddr) -> CuttableProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = tokio_util::sync::CancellationToken::new();
        let stop = cut.clone();
        tokio::spawn(async move {
            loop {
                let (mut inbound, _) = tokio::select! {
                    accepted = listener.accept() => accepted.unwrap(),
                    () = stop.cancelled() => return,
                };
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut outbound = tokio::net::TcpStream::connect(target).await.unwrap();
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        // Dropping both sockets closes them mid-stream.
                        () = stop.cancelled() => {}
                    }
                });
            }
        });
        CuttableProxy { addr, cut }
    }

    pub async fn recorder(&self) -> RecorderClient {
        ResponseRecorderServiceClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }

    pub async fn resumer(&self) -> ResumerClient {
        ResponseResumerServiceClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }

    /// Closes every proxied connection.
    pub fn cut(&self) {
        self.cut.cancel();
    }
}

/// The real `tapedeck` binary, serving on a free loopback port; killed when dropped.
pub struct BinaryServer {
    pub addr: SocketAddr,
    /// `None` once the process has been reaped.
    child: Option<std::process::Child>,
}

impl BinaryServer {
    /// Starts `tapedeck serve` on `data_dir` and waits until it listens.
    pub fn spawn(data_dir: &Path, extra_args: &[&str]) -> BinaryServer {
        Self::start(data_dir, extra_args, None)
    }

    /// Starts the binary; reads its log until the listening line, then keeps draining it (into
    /// `keep`, if given) so the server never blocks on a full pipe.
    fn start(data_dir: &Path, extra_args: &[&str], keep: Option<LogLines>) -> BinaryServer {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
                "--data-dir",
            ])
            .arg(data_dir)
            .args(extra_args)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("cannot start the tapedeck binary");
        let stderr = child.stderr.take().unwrap();
        let (found, addr) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("tapedeck listening")
                    && let Some(start) = line.find("\"addr\":\"")
                {
                    let rest = &line[start + 8..];
                    let _ = found.send(rest[..rest.find('"').unwrap()].to_string());
                }
                if let Some(keep) = &keep {
                    keep.lock().unwrap().push(line);
                }
            }
        });
        let addr = addr
            .recv_timeout(WAIT)
            .expect("the binary did not report its address")
            .parse()
            .unwrap();
        BinaryServer {
            addr,
            child: Some(child),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    pub async fn recorder(&self) -> RecorderClient {
        ResponseRecorderServiceClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }

    pub async fn resumer(&self) -> ResumerClient {
        ResponseResumerServiceClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }

    /// SIGKILLs the process (no chance to clean up) and reaps it.
    pub fn kill(mut self) {
        unsafe { libc::kill(self.pid(), libc::SIGKILL) };
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// SIGTERMs the process and returns its exit status. Waits off the runtime so that this
    /// test's client connections can still answer the server's goodbye.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let mut child = self.child.take().unwrap();
        tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap()
    }
}

impl Drop for BinaryServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `tapedeck serve` with `args` until it exits by itself (at most [`WAIT`]), with
/// `RUST_BACKTRACE=1` so that a panic would show; returns its exit status and its stderr.
pub fn run_binary_to_exit(args: &[&std::ffi::OsStr]) -> (std::process::ExitStatus, String) {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .arg("serve")
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start the tapedeck binary");
    let pid = child.id() as i32;
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match outcome.recv_timeout(WAIT) {
        Ok(output) => {
            let output = output.unwrap();
            (
                output.status,
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
        Err(_) => {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("tapedeck did not exit within {WAIT:?}; it should have refused to start");
        }
    }
}

/// Checks that a refused start printed exactly one line: an error naming `what` and telling
/// what to do (`hint`), with no panic message and no backtrace.
pub fn assert_one_clear_line(stderr: &str, what: &str, hint: &str) {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected exactly one line, got:\n{stderr}");
    let line = lines[0];
    assert!(line.starts_with("tapedeck: error: "), "{line}");
    assert!(line.contains(what), "`{what}` missing from: {line}");
    assert!(line.contains(hint), "hint `{hint}` missing from: {line}");
    for noise in ["panicked", "backtrace", "RUST_BACKTRACE"] {
        assert!(!line.contains(noise), "`{noise}` in: {line}");
    }
}

/// A tmpfs mounted by the test on a fresh directory; unmounted when dropped. Tests that need
/// one run as root (CI does); anything else is a clear failure, never a silent skip.
pub struct Tmpfs {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_bytes`; `read_only` mounts it read-only.
    pub fn mount(size_bytes: u64, read_only: bool) -> Tmpfs {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let target = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let options = std::ffi::CString::new(format!("size={size_bytes},mode=0755")).unwrap();
        let flags = if read_only { libc::MS_RDONLY } else { 0 };
        let mounted = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                flags,
                options.as_ptr().cast(),
            )
        };
        if mounted != 0 {
            panic!(
                "cannot mount a tmpfs on {}: {}. This test needs root (or CAP_SYS_ADMIN) to \
                 mount a small filesystem; run it as root, as CI does",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        Tmpfs { path, _dir: dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        let target = std::ffi::CString::new(self.path.as_os_str().as_bytes()).unwrap();
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Resident memory of process `pid` in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("no VmRSS line")
}

/// Log lines of a [`BinaryServer`] started with [`BinaryServer::spawn_logged`].
pub type LogLines = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

impl BinaryServer {
    /// As [`BinaryServer::spawn`], also keeping every log line the server writes.
    pub fn spawn_logged(data_dir: &Path, extra_args: &[&str]) -> (BinaryServer, LogLines) {
        let lines = LogLines::default();
        (
            Self::start(data_dir, extra_args, Some(lines.clone())),
            lines,
        )
    }
}

/// Opens a replay of `id` as soon as its recording has started (Record answers only at the
/// end, so a test learns of the start by retrying `NOT_FOUND` until [`WAIT`] runs out).
pub async fn replay_when_live(client: &RecorderClient, id: &[u8]) -> Streaming<ReplayResponse> {
    tokio::time::timeout(WAIT, async {
        loop {
            match replay_from(client, id, 0).await {
                Ok(stream) => return stream,
                Err(err) if err.code() == tonic::Code::NotFound => tokio::task::yield_now().await,
                Err(err) => panic!("replay of a starting recording failed: {err}"),
            }
        }
    })
    .await
    .expect("recording did not start in time")
}

impl TestServer {
    /// Starts a server on a store the test opened itself (with a manual clock, say).
    pub async fn start_with_store(config: Config, store: tapedeck::store::Store) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (shutdown, stop) = oneshot::channel::<()>();
        let data_dir = config.data_dir.clone();
        let task = tokio::spawn(async move {
            tapedeck::server::run(listener, store, &config, async {
                let _ = stop.await;
            })
            .await
        });
        TestServer {
            addr,
            data_dir,
            shutdown: Some(shutdown),
            task,
        }
    }
}

/// Free bytes on the filesystem holding `path` (for unprivileged users, as `df` shows them).
pub fn free_bytes(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut stats) }, 0);
    stats.f_bavail as u64 * stats.f_frsize as u64
}
