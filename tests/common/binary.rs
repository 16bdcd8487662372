//! The real `tapedeck` binary (`CARGO_BIN_EXE_tapedeck`) as a child process: started on a free
//! port and waited for until it listens, its log kept or drained, SIGKILLed for crash tests;
//! or run until it refuses to start, with its one error line checked.
use std::net::SocketAddr;
use std::path::Path;

use super::{
    RecorderClient, RecordingsClient, ResumerClient, WAIT, free_port, recorder_client,
    recordings_client, resumer_client,
};

/// The real `tapedeck` binary, serving on a free loopback port; killed when dropped.
pub(crate) struct BinaryServer {
    pub(crate) addr: SocketAddr,
    /// Where its HTTP face listens, when it has one (`--http-listen 127.0.0.1:0` picks a free
    /// port; the readiness line says which).
    pub(crate) http_addr: Option<SocketAddr>,
    /// Where it serves `/metrics`, when asked to (`--metrics-listen 127.0.0.1:0`; its log says
    /// where before it is ready).
    pub(crate) metrics_addr: Option<SocketAddr>,
    /// `None` once the process has been reaped.
    child: Option<std::process::Child>,
}

impl BinaryServer {
    /// Starts `tapedeck serve` on `data_dir` and waits until it listens.
    pub(crate) fn spawn(data_dir: &Path, extra_args: &[&str]) -> BinaryServer {
        Self::start(data_dir, extra_args, None, None, &[])
    }

    /// As [`BinaryServer::spawn`], with the environment variables `envs` set (the object
    /// store's `AWS_*`, for one).
    pub(crate) fn spawn_with_env(
        data_dir: &Path,
        extra_args: &[&str],
        envs: &[(String, String)],
    ) -> BinaryServer {
        Self::start(data_dir, extra_args, None, None, envs)
    }

    /// As [`BinaryServer::spawn_with_env`], also keeping every log line the server writes.
    pub(crate) fn spawn_logged_with_env(
        data_dir: &Path,
        extra_args: &[&str],
        envs: &[(String, String)],
    ) -> (BinaryServer, LogLines) {
        let lines = LogLines::default();
        let server = Self::start(data_dir, extra_args, Some(lines.clone()), None, envs);
        (server, lines)
    }

    /// Starts `tapedeck serve` on `data_dir` as one of several instances located through the
    /// Redis at `redis_url`, advertising the address it listens on; keeps its log.
    pub(crate) fn spawn_located(
        data_dir: &Path,
        redis_url: &str,
        extra_args: &[&str],
    ) -> (BinaryServer, LogLines) {
        let lines = LogLines::default();
        let server = Self::start(
            data_dir,
            extra_args,
            Some(lines.clone()),
            Some(redis_url),
            &[],
        );
        (server, lines)
    }

    /// Starts the binary on a loopback port; waits for its listening line (the readiness
    /// event), then keeps draining its log (into `keep`, if given) so the server never blocks
    /// on a full pipe. `envs` are set in its environment.
    ///
    /// The binary binds port 0 and its readiness line says which port it got, so no other
    /// process can take the port in between. One located through Redis advertises its address,
    /// so the port is picked here first; another process may take it before the binary binds
    /// it: then the start is tried again on another port, a few times.
    fn start(
        data_dir: &Path,
        extra_args: &[&str],
        keep: Option<LogLines>,
        redis_url: Option<&str>,
        envs: &[(String, String)],
    ) -> BinaryServer {
        if redis_url.is_none() {
            let mut args = vec!["--listen", "127.0.0.1:0", "--log-format", "json"];
            args.extend_from_slice(extra_args);
            return match try_spawn_serving_with_env(data_dir, &args, keep, envs) {
                Ok((child, ready)) => BinaryServer::ready(child, &ready),
                Err(log) => panic!("the binary exited before listening:\n{log}"),
            };
        }
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
            match try_spawn_serving_with_env(data_dir, &args, keep.clone(), envs) {
                Ok((child, ready)) => return BinaryServer::ready(child, &ready),
                Err(log) if log.contains("cannot listen on") => continue,
                Err(log) => panic!("the binary exited before listening:\n{log}"),
            }
        }
        panic!("no free port found in {TRIES} tries");
    }

    /// Starts `tapedeck serve` on `data_dir` listening on `addr` (a node restarted on the
    /// address its clients know), keeping its log in `keep`, and waits until it listens.
    pub(crate) fn spawn_at(
        addr: SocketAddr,
        data_dir: &Path,
        extra_args: &[&str],
        keep: LogLines,
        envs: &[(String, String)],
    ) -> BinaryServer {
        Self::try_spawn_at(addr, data_dir, extra_args, keep, envs)
            .unwrap_or_else(|log| panic!("the binary exited before listening:\n{log}"))
    }

    /// As [`spawn_at`](Self::spawn_at); a binary that exits before it listens is an `Err`
    /// with what it logged (a port another process took says "Address already in use").
    pub(crate) fn try_spawn_at(
        addr: SocketAddr,
        data_dir: &Path,
        extra_args: &[&str],
        keep: LogLines,
        envs: &[(String, String)],
    ) -> Result<BinaryServer, String> {
        let listen = addr.to_string();
        let mut args = vec!["--listen", listen.as_str(), "--log-format", "json"];
        args.extend_from_slice(extra_args);
        try_spawn_serving_with_env(data_dir, &args, Some(keep), envs)
            .map(|(child, ready)| BinaryServer::ready(child, &ready))
    }

    /// The server `child` is, at the addresses its log (JSON) named up to its readiness line,
    /// which ends `early`.
    fn ready(child: std::process::Child, early: &[String]) -> BinaryServer {
        let address = |message: &str, field: &str| {
            let line = early.iter().find(|line| line.contains(message))?;
            let event: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|err| panic!("a log line is not JSON ({err}): {line}"));
            event["fields"][field].as_str()?.parse::<SocketAddr>().ok()
        };
        let addr = address("tapedeck listening", "addr")
            .unwrap_or_else(|| panic!("the readiness line names no address: {early:?}"));
        BinaryServer {
            addr,
            http_addr: address("tapedeck listening", "http_addr"),
            metrics_addr: address("serving Prometheus metrics", "addr"),
            child: Some(child),
        }
    }

    /// The base URL of its HTTP face (started with `--http-listen`).
    pub(crate) fn http_base(&self) -> String {
        let addr = self
            .http_addr
            .expect("the server was started without its HTTP face");
        format!("http://{addr}")
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

/// Log lines of a [`BinaryServer`] started with [`BinaryServer::spawn_logged`].
pub(crate) type LogLines = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

impl BinaryServer {
    /// As [`BinaryServer::spawn`], also keeping every log line the server writes.
    pub(crate) fn spawn_logged(data_dir: &Path, extra_args: &[&str]) -> (BinaryServer, LogLines) {
        let lines = LogLines::default();
        (
            Self::start(data_dir, extra_args, Some(lines.clone()), None, &[]),
            lines,
        )
    }
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
    try_spawn_serving_with_env(data_dir, args, keep, &[]).map(|(child, _)| child)
}

/// As [`try_spawn_serving`], with the environment variables `envs` set; also returns what it
/// logged up to its readiness line, that line included.
fn try_spawn_serving_with_env(
    data_dir: &Path,
    args: &[&str],
    keep: Option<LogLines>,
    envs: &[(String, String)],
) -> Result<(std::process::Child, Vec<String>), String> {
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
        .envs(envs.iter().map(|(name, value)| (name, value)))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start the tapedeck binary");
    let stderr = child.stderr.take().unwrap();
    // Some(the log up to the readiness line) once it listens; None when its log ends first (it
    // exited).
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
                let _ = events.send(Some(before_ready.lock().unwrap().clone()));
            }
        }
        let _ = events.send(None);
    });
    match event.recv_timeout(WAIT) {
        Ok(Some(ready)) => Ok((child, ready)),
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

/// Runs the client command `tapedeck ARGS --server ADDR` against `server` to its end, with
/// `stdin` as its input.
pub(crate) fn run_cli(server: &BinaryServer, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(args)
        .args(["--server", &server.addr.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}
