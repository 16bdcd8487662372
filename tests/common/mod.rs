//! Test harness: a real tapedeck server on 127.0.0.1:0 with a temp data dir, real tonic
//! clients, and helpers to record and replay.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tapedeck::Config;
use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tapedeck::pb::response_resumer_service_client::ResponseResumerServiceClient;
use tapedeck::pb::{
    RecordRequest, RecordResponse, ReplayRequest, ReplayResponse, StreamResponseTokenRequest,
    StreamResponseTokenResponse,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

pub(crate) mod python;
pub(crate) mod redis_server;

/// How long any single wait in a test may take before the test fails.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

pub(crate) type RecorderClient = ResponseRecorderServiceClient<Channel>;
pub(crate) type ResumerClient = ResponseResumerServiceClient<Channel>;
pub(crate) type RecordingsClient =
    tapedeck::pb::tapedeck::recordings_client::RecordingsClient<Channel>;

/// A client of tapedeck's management API at `addr`.
pub(crate) async fn recordings_client(addr: SocketAddr) -> RecordingsClient {
    RecordingsClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// A client of the current API at `addr`, taking messages of up to 64 MiB.
pub(crate) async fn recorder_client(addr: SocketAddr) -> RecorderClient {
    ResponseRecorderServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .max_decoding_message_size(64 * 1024 * 1024)
        .max_encoding_message_size(64 * 1024 * 1024)
}

/// A client of the legacy API at `addr`.
pub(crate) async fn resumer_client(addr: SocketAddr) -> ResumerClient {
    ResponseResumerServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// A server running in this process.
pub(crate) struct TestServer {
    pub(crate) addr: SocketAddr,
    /// The HTTP face's address, when the test asked for it.
    pub(crate) http_addr: Option<SocketAddr>,
    pub(crate) data_dir: PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<tapedeck::Result<()>>,
}

/// A config for tests: everything default but the data dir, a short shutdown timeout, and no
/// producer grace period (a producer that goes away ends its recording as `interrupted` at
/// once; the tests of resuming set a grace period of their own).
pub(crate) fn test_config(data_dir: &Path) -> Config {
    Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        data_dir: data_dir.to_path_buf(),
        shutdown_timeout: Duration::from_secs(5),
        producer_grace: Duration::ZERO,
        ..Config::default()
    }
}

impl TestServer {
    /// Starts a server on `config.data_dir`, listening on a free loopback port.
    pub(crate) async fn start(config: Config) -> TestServer {
        let store = tapedeck::server::open_store(&config).unwrap();
        Self::start_with_store(config, store).await
    }

    /// Starts a server with default settings on `data_dir`.
    pub(crate) async fn start_in(data_dir: &Path) -> TestServer {
        Self::start(test_config(data_dir)).await
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) async fn recorder(&self) -> RecorderClient {
        recorder_client(self.addr).await
    }

    pub(crate) async fn resumer(&self) -> ResumerClient {
        resumer_client(self.addr).await
    }

    /// Shuts the server down gracefully and waits until its database is closed.
    pub(crate) async fn stop(mut self) {
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
pub(crate) struct Recording {
    pub(crate) tx: mpsc::Sender<RecordRequest>,
    pub(crate) answer: JoinHandle<Result<RecordResponse, Status>>,
}

impl Recording {
    /// Opens a Record call whose first message carries only the id.
    pub(crate) async fn open(client: &RecorderClient, id: &[u8]) -> Recording {
        let first = RecordRequest {
            conversation_id: id.to_vec(),
            ..Default::default()
        };
        Self::open_with(client, first).await
    }

    /// Opens a Record call that resumes `id`'s recording from byte `from`.
    pub(crate) async fn resume(client: &RecorderClient, id: &[u8], from: i64) -> Recording {
        let first = RecordRequest {
            conversation_id: id.to_vec(),
            resume_from_offset: Some(from),
            ..Default::default()
        };
        Self::open_with(client, first).await
    }

    /// Opens a Record call whose first message is `first`.
    pub(crate) async fn open_with(client: &RecorderClient, first: RecordRequest) -> Recording {
        let (tx, rx) = mpsc::channel(1024);
        tx.send(first).await.unwrap();
        let mut client = client.clone();
        let answer = tokio::spawn(async move {
            client
                .record(ReceiverStream::new(rx))
                .await
                .map(|r| r.into_inner())
        });
        Recording { tx, answer }
    }

    pub(crate) async fn send(&self, content: &str) {
        self.tx
            .send(RecordRequest {
                content: content.to_string(),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    /// Sends `complete=true` and waits for the answer.
    pub(crate) async fn complete(self) -> Result<RecordResponse, Status> {
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
    pub(crate) async fn answer(self) -> Result<RecordResponse, Status> {
        tokio::time::timeout(WAIT, self.answer)
            .await
            .expect("Record did not answer in time")
            .unwrap()
    }
}

/// Records `tokens` as one complete recording of `id` and checks it succeeded.
pub(crate) async fn record_all(client: &RecorderClient, id: &[u8], tokens: &[&str]) {
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

/// A legacy request carrying `text`, naming `id` (empty: the stream's conversation).
pub(crate) fn token(id: &[u8], text: &str, complete: bool) -> StreamResponseTokenRequest {
    StreamResponseTokenRequest {
        conversation_id: id.to_vec(),
        token: text.to_string(),
        complete,
        ..Default::default()
    }
}

/// A producer on the legacy API: requests go in through a channel, one response comes back
/// per request.
pub(crate) struct LegacyProducer {
    pub(crate) tx: mpsc::Sender<StreamResponseTokenRequest>,
    pub(crate) acks: Streaming<StreamResponseTokenResponse>,
}

impl LegacyProducer {
    /// Opens a stream whose first request, if any, is `first`, with room for `capacity`
    /// queued requests; the call's own failure is returned.
    pub(crate) async fn try_open(
        client: &ResumerClient,
        first: Option<StreamResponseTokenRequest>,
        capacity: usize,
    ) -> Result<LegacyProducer, Status> {
        let (tx, rx) = mpsc::channel(capacity);
        if let Some(first) = first {
            tx.send(first).await.expect("the request channel is open");
        }
        let acks = client
            .clone()
            .stream_response_tokens(ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(LegacyProducer { tx, acks })
    }

    /// Opens a stream whose first request, if any, is `first`.
    pub(crate) async fn open(
        client: &ResumerClient,
        first: Option<StreamResponseTokenRequest>,
    ) -> LegacyProducer {
        Self::try_open(client, first, 1024).await.unwrap()
    }

    /// Opens a stream recording `id`, starting with `first_token`.
    pub(crate) async fn start(
        client: &ResumerClient,
        id: &[u8],
        first_token: &str,
    ) -> LegacyProducer {
        Self::open(client, Some(token(id, first_token, false))).await
    }

    /// Sends one request.
    pub(crate) async fn send(&self, id: &[u8], text: &str, complete: bool) {
        self.tx
            .send(token(id, text, complete))
            .await
            .expect("request stream closed");
    }

    /// The next response, or the status that ended the stream (`Ok(None)`: ended with OK).
    pub(crate) async fn next(&mut self) -> Result<Option<StreamResponseTokenResponse>, Status> {
        tokio::time::timeout(WAIT, self.acks.message())
            .await
            .expect("no legacy response in time")
    }

    /// The next response, which must be there.
    pub(crate) async fn ack(&mut self) -> StreamResponseTokenResponse {
        self.next()
            .await
            .unwrap()
            .expect("the response stream ended")
    }

    /// Waits for the server to close the response stream with OK.
    pub(crate) async fn closed(mut self) {
        let end = self.next().await;
        assert!(matches!(end, Ok(None)), "{end:?}");
    }
}

/// Opens a replay from `offset`.
pub(crate) async fn replay_from(
    client: &RecorderClient,
    id: &[u8],
    offset: i64,
) -> Result<Streaming<ReplayResponse>, Status> {
    client
        .clone()
        .replay(ReplayRequest {
            conversation_id: id.to_vec(),
            resume_offset: offset,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

/// What a replay returned by the time it closed.
#[derive(Debug)]
pub(crate) struct Replayed {
    pub(crate) text: String,
    pub(crate) offsets: Vec<i64>,
    /// The `tapedeck-status` trailer.
    pub(crate) status: Option<String>,
    pub(crate) end_offset: Option<u64>,
}

/// Reads a replay stream to its end (failing the test if it takes longer than [`WAIT`]).
pub(crate) async fn read_all(mut stream: Streaming<ReplayResponse>) -> Result<Replayed, Status> {
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
pub(crate) async fn replay_text(client: &RecorderClient, id: &[u8]) -> Result<Replayed, Status> {
    read_all(replay_from(client, id, 0).await?).await
}

/// A loopback TCP proxy in front of a server whose connections can be cut at once, the way a
/// client process that dies or a network that drops would cut them.
pub(crate) struct CuttableProxy {
    pub(crate) addr: SocketAddr,
    cut: tokio_util::sync::CancellationToken,
}

impl CuttableProxy {
    pub(crate) async fn start(target: SocketAddr) -> CuttableProxy {
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

    pub(crate) async fn recorder(&self) -> RecorderClient {
        recorder_client(self.addr).await
    }

    pub(crate) async fn resumer(&self) -> ResumerClient {
        resumer_client(self.addr).await
    }

    /// Closes every proxied connection.
    pub(crate) fn cut(&self) {
        self.cut.cancel();
    }
}

/// The real `tapedeck` binary, serving on a free loopback port; killed when dropped.
pub(crate) struct BinaryServer {
    pub(crate) addr: SocketAddr,
    /// `None` once the process has been reaped.
    child: Option<std::process::Child>,
}

impl BinaryServer {
    /// Starts `tapedeck serve` on `data_dir` and waits until it listens.
    pub(crate) fn spawn(data_dir: &Path, extra_args: &[&str]) -> BinaryServer {
        Self::start(data_dir, extra_args, None, None)
    }

    /// Starts `tapedeck serve` on `data_dir` as one instance of a cluster located through the
    /// Redis at `redis_url`, advertising the address it listens on; keeps its log.
    pub(crate) fn spawn_in_cluster(
        data_dir: &Path,
        redis_url: &str,
        extra_args: &[&str],
    ) -> (BinaryServer, LogLines) {
        let lines = LogLines::default();
        let server = Self::start(data_dir, extra_args, Some(lines.clone()), Some(redis_url));
        (server, lines)
    }

    /// Starts the binary on a free loopback port the test picked; waits for its listening
    /// line (the readiness event), then keeps draining its log (into `keep`, if given) so the
    /// server never blocks on a full pipe.
    /// The port was free when picked, but another process may take it before the binary binds
    /// it: then the start is tried again on another port, a few times.
    fn start(
        data_dir: &Path,
        extra_args: &[&str],
        keep: Option<LogLines>,
        redis_url: Option<&str>,
    ) -> BinaryServer {
        const TRIES: usize = 5;
        for _ in 0..TRIES {
            let addr = free_port();
            let listen = addr.to_string();
            let mut args = vec!["--listen", listen.as_str(), "--log-format", "json"];
            if let Some(redis_url) = redis_url {
                args.extend_from_slice(&["--redis-url", redis_url, "--advertised-address"]);
                args.push(listen.as_str());
            }
            args.extend_from_slice(extra_args);
            match try_spawn_serving(data_dir, &args, keep.clone()) {
                Ok(child) => {
                    return BinaryServer {
                        addr,
                        child: Some(child),
                    };
                }
                Err(log) if log.contains("cannot listen on") => continue,
                Err(log) => panic!("the binary exited before listening:\n{log}"),
            }
        }
        panic!("no free port found in {TRIES} tries");
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    pub(crate) async fn recorder(&self) -> RecorderClient {
        recorder_client(self.addr).await
    }

    pub(crate) async fn resumer(&self) -> ResumerClient {
        resumer_client(self.addr).await
    }

    pub(crate) async fn recordings(&self) -> RecordingsClient {
        recordings_client(self.addr).await
    }

    /// SIGKILLs the process (no chance to clean up) and reaps it.
    pub(crate) fn kill(mut self) {
        unsafe { libc::kill(self.pid(), libc::SIGKILL) };
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// SIGTERMs the process and returns its exit status. Waits off the runtime so that this
    /// test's client connections can still answer the server's goodbye.
    pub(crate) async fn terminate(mut self) -> std::process::ExitStatus {
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

/// A loopback address with a port that was free a moment ago: bound, read, released.
pub(crate) fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// Starts `tapedeck serve --data-dir DATA_DIR ARGS` and returns once it logs that it listens
/// (at most [`WAIT`]); its log keeps being drained, into `keep` if given.
pub(crate) fn spawn_serving(
    data_dir: &Path,
    args: &[&str],
    keep: Option<LogLines>,
) -> std::process::Child {
    try_spawn_serving(data_dir, args, keep)
        .unwrap_or_else(|log| panic!("the binary exited before listening:\n{log}"))
}

/// As [`spawn_serving`], but a binary that exits before it listens is an `Err` with what it
/// logged until then.
pub(crate) fn try_spawn_serving(
    data_dir: &Path,
    args: &[&str],
    keep: Option<LogLines>,
) -> Result<std::process::Child, String> {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .arg("serve")
        .arg("--data-dir")
        .arg(data_dir)
        // Tests run many servers at once: the HTTP face only where a test asks for it.
        .args(
            (!args.contains(&"--http-listen"))
                .then_some(["--http-listen", "off"])
                .into_iter()
                .flatten(),
        )
        .args(args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start the tapedeck binary");
    let stderr = child.stderr.take().unwrap();
    // Some(()) once it listens; None when its log ends first (it exited).
    let (events, event) = std::sync::mpsc::channel();
    let early = LogLines::default();
    let before_ready = early.clone();
    std::thread::spawn(move || {
        let mut ready = false;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let listening = !ready && line.contains("tapedeck listening");
            if !ready {
                before_ready.lock().unwrap().push(line.clone());
            }
            // Kept before readiness is told, so that a test reading the log once the server
            // listens finds the listening line in it.
            if let Some(keep) = &keep {
                keep.lock().unwrap().push(line);
            }
            if listening {
                ready = true;
                let _ = events.send(Some(()));
            }
        }
        let _ = events.send(None);
    });
    match event.recv_timeout(WAIT) {
        Ok(Some(())) => Ok(child),
        Ok(None) => {
            let _ = child.wait();
            Err(early.lock().unwrap().join("\n"))
        }
        Err(_) => {
            let _ = child.kill();
            panic!("the binary did not start listening within {WAIT:?}");
        }
    }
}

/// Runs `tapedeck serve` with `args` until it exits by itself (at most [`WAIT`]), with
/// `RUST_BACKTRACE=1` so that a panic would show; returns its exit status and its stderr.
/// The HTTP face is off unless `args` set `--http-listen`: its default port is one fixed port
/// that parallel tests (and a server running on the machine) would race for.
pub(crate) fn run_binary_to_exit(args: &[&std::ffi::OsStr]) -> (std::process::ExitStatus, String) {
    run_binary_to_exit_with_env(args, &[])
}

/// As [`run_binary_to_exit`], with the environment variables `env` set.
pub(crate) fn run_binary_to_exit_with_env(
    args: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
) -> (std::process::ExitStatus, String) {
    let http_off = (!args.contains(&std::ffi::OsStr::new("--http-listen")))
        .then_some(["--http-listen", "off"])
        .into_iter()
        .flatten();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .arg("serve")
        .args(http_off)
        .args(args)
        .envs(env.iter().copied())
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
pub(crate) fn assert_one_clear_line(stderr: &str, what: &str, hint: &str) {
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

/// Whether a test that mounts a tmpfs (root only) should run: only when `TAPEDECK_ROOT_TESTS=1`
/// asks for it, as CI does. Otherwise it says, past the test harness's capture so that the
/// `cargo test` output shows it, that `test` was skipped and why.
pub(crate) fn root_tests_enabled(test: &str) -> bool {
    use std::io::Write;
    if std::env::var("TAPEDECK_ROOT_TESTS").as_deref() == Ok("1") {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "note: {test} SKIPPED: it mounts a tmpfs, which needs root; run it as root with \
         TAPEDECK_ROOT_TESTS=1 (CI does)"
    );
    false
}

/// Whether this process runs as root (which ignores permission bits).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A tmpfs mounted by the test on a fresh directory; unmounted when dropped. Tests that need
/// one ask [`root_tests_enabled`] first; once asked for, a failed mount is a clear failure.
pub(crate) struct Tmpfs {
    pub(crate) path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_bytes`; `read_only` mounts it read-only.
    pub(crate) fn mount(size_bytes: u64, read_only: bool) -> Tmpfs {
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
pub(crate) fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("no VmRSS line")
}

/// Log lines of a [`BinaryServer`] started with [`BinaryServer::spawn_logged`].
pub(crate) type LogLines = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

impl BinaryServer {
    /// As [`BinaryServer::spawn`], also keeping every log line the server writes.
    pub(crate) fn spawn_logged(data_dir: &Path, extra_args: &[&str]) -> (BinaryServer, LogLines) {
        let lines = LogLines::default();
        (
            Self::start(data_dir, extra_args, Some(lines.clone()), None),
            lines,
        )
    }
}

/// Opens a replay of `id` from `offset` as soon as its recording has started. Record answers
/// only at the end, so a test learns of the start by retrying `NOT_FOUND`, until [`WAIT`]
/// runs out (then the last `NOT_FOUND` is returned); any other error is returned at once.
pub(crate) async fn replay_when_live(
    client: &RecorderClient,
    id: &[u8],
    offset: i64,
) -> Result<Streaming<ReplayResponse>, Status> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match replay_from(client, id, offset).await {
            Err(err)
                if err.code() == tonic::Code::NotFound
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::task::yield_now().await
            }
            result => return result,
        }
    }
}

impl TestServer {
    /// Starts a server on a store the test opened itself (with a manual clock, say).
    pub(crate) async fn start_with_store(
        config: Config,
        store: tapedeck::store::Store,
    ) -> TestServer {
        Self::serve(config, store, None).await
    }

    /// Starts a server with its HTTP face too, each on a free loopback port.
    pub(crate) async fn start_with_http(config: Config) -> TestServer {
        let store = tapedeck::server::open_store(&config).unwrap();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(config, store, Some(http)).await
    }

    /// The HTTP face's URL of stream `path`.
    pub(crate) fn stream_url(&self, path: &str) -> String {
        let addr = self
            .http_addr
            .expect("the server was started without its HTTP face");
        format!("http://{addr}/v1/stream/{path}")
    }

    async fn serve(
        config: Config,
        store: tapedeck::store::Store,
        http: Option<tokio::net::TcpListener>,
    ) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let http_addr = http.as_ref().map(|l| l.local_addr().unwrap());
        let (shutdown, stop) = oneshot::channel::<()>();
        let data_dir = config.data_dir.clone();
        let task = tokio::spawn(async move {
            tapedeck::server::run(listener, http, store, &config, async {
                let _ = stop.await;
            })
            .await
        });
        TestServer {
            addr,
            http_addr,
            data_dir,
            shutdown: Some(shutdown),
            task,
        }
    }
}

/// Free bytes on the filesystem holding `path` (for unprivileged users, as `df` shows them).
pub(crate) fn free_bytes(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut stats) }, 0);
    stats.f_bavail as u64 * stats.f_frsize as u64
}
