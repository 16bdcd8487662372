//! tapedeck over gRPC: the real release binary spawned on a free loopback port with a temp data
//! dir (or a running server at `--addr`). Producers use `Record` (or the legacy per-token-ack
//! `StreamResponseTokens`), subscribers and catch-up readers use `Replay`. With an API key, the
//! server is started with access control on and every call carries the key. With the locator,
//! it runs as one instance of a cluster, on a `redis-server` (no persistence) of its own. With
//! `--tier`, it seals ended recordings into a SeaweedFS (`weed mini`) of its own.
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, anyhow, bail};
use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tapedeck::pb::response_resumer_service_client::ResponseResumerServiceClient;
use tapedeck::pb::{
    CheckRecordingsRequest, RecordRequest, RecordResponse, RecordStatus, ReplayRequest,
    ReplayResponse, StreamResponseTokenRequest, StreamResponseTokenResponse,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use super::{ChildGuard, Environment, Target, free_port, temp_dir, wait_ready};
use crate::seaweed::Seaweed;

/// Messages a producer may queue ahead of the gRPC stream.
const PRODUCER_QUEUE: usize = 64;

/// The API key every call carries, if any.
#[derive(Clone, Default)]
pub(crate) struct ApiKey(Option<MetadataValue<Ascii>>);

impl Interceptor for ApiKey {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(key) = &self.0 {
            request.metadata_mut().insert("x-api-key", key.clone());
        }
        Ok(request)
    }
}

type Calls = InterceptedService<Channel, ApiKey>;

/// Which producer API the target drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// `Record`: a client stream, answered once after the completion is committed.
    Record,
    /// Legacy `StreamResponseTokens`: one response per token, after its commit.
    PerTokenAck,
}

/// A tapedeck server and a pool of client connections to it.
pub(crate) struct Tapedeck {
    channels: Vec<Channel>,
    key: ApiKey,
    api: Api,
    pid: Option<u32>,
    // Dropped after the channels: the server is killed, then its data dir removed, then its
    // locator's Redis and its object store killed.
    _server: Option<ChildGuard>,
    _dir: Option<tempfile::TempDir>,
    _locator: Option<(ChildGuard, tempfile::TempDir)>,
    _object_store: Option<Seaweed>,
}

impl Tapedeck {
    /// Spawns `env.tapedeck_bin` (or connects to `env.tapedeck_addr`) and opens `connections`
    /// HTTP/2 connections to it.
    /// With `api_key`, the spawned server checks it and every call sends it; with `locator`,
    /// it registers its recordings in a Redis started for it.
    pub(crate) async fn start(
        env: &Environment,
        api: Api,
        connections: usize,
        api_key: Option<&str>,
        locator: bool,
    ) -> Result<Tapedeck> {
        let key = ApiKey(api_key.map(|k| k.parse()).transpose()?);
        let locator = match locator {
            true => Some(locator_redis(env).await?),
            false => None,
        };
        let object_store = match env.tier && env.tapedeck_addr.is_none() {
            true => Some(Seaweed::start(&env.weed, &env.work_dir).await?),
            false => None,
        };
        let (addr, server, dir, pid) = match env.tapedeck_addr {
            Some(addr) => (addr, None, None, env.tapedeck_pid),
            None => {
                if !env.tapedeck_bin.exists() {
                    bail!(
                        "{} not found: build it with `cargo build --release` or pass --tapedeck-bin",
                        env.tapedeck_bin.display()
                    );
                }
                let dir = temp_dir(&env.work_dir, "tapedeck-")?;
                let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
                let log = std::fs::File::create(dir.path().join("server.log"))?;
                let child = Command::new(&env.tapedeck_bin)
                    .arg("serve")
                    .arg("--listen")
                    .arg(addr.to_string())
                    .arg("--data-dir")
                    .arg(dir.path().join("data"))
                    .args(api_key.map(|k| format!("--api-key=bench={k}")))
                    .args(locator.as_ref().into_iter().flat_map(|(redis, _)| {
                        let redis = format!("--redis-url=redis://127.0.0.1:{}", redis.port);
                        [redis, format!("--advertised-address={addr}")]
                    }))
                    .args(
                        object_store
                            .iter()
                            .map(|s| format!("--object-store={}", s.url("bench"))),
                    )
                    .envs(object_store.iter().flat_map(Seaweed::env))
                    .args(&env.tapedeck_args)
                    .env("RUST_LOG", "warn")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .with_context(|| format!("spawning {}", env.tapedeck_bin.display()))?;
                let mut child = ChildGuard::new(child);
                let url = format!("http://{addr}");
                wait_ready(&mut child, "tapedeck", || async {
                    let channel = Endpoint::from_shared(url.clone())?.connect().await?;
                    let mut client =
                        ResponseRecorderServiceClient::with_interceptor(channel, key.clone());
                    client.is_enabled(()).await?;
                    Ok(())
                })
                .await?;
                let pid = child.pid();
                (addr, Some(child), Some(dir), Some(pid))
            }
        };
        let mut channels = Vec::with_capacity(connections.max(1));
        for _ in 0..connections.max(1) {
            let channel = Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect()
                .await
                .with_context(|| format!("connecting to tapedeck at {addr}"))?;
            channels.push(channel);
        }
        Ok(Tapedeck {
            channels,
            key,
            api,
            pid,
            _server: server,
            _dir: dir,
            _locator: locator.map(|(redis, dir)| (redis.child, dir)),
            _object_store: object_store,
        })
    }

    fn channel(&self, lane: usize) -> Calls {
        let channel = self.channels[lane % self.channels.len()].clone();
        InterceptedService::new(channel, self.key.clone())
    }
}

/// A Redis for the locator, and the port it listens on.
struct LocatorRedis {
    child: ChildGuard,
    port: u16,
}

/// Starts a `redis-server` for the locator: loopback only, no persistence (the locator keeps
/// nothing that the instances cannot register again).
async fn locator_redis(env: &Environment) -> Result<(LocatorRedis, tempfile::TempDir)> {
    let dir = temp_dir(&env.work_dir, "locator-redis-")?;
    let port = free_port()?;
    let child = Command::new(&env.redis_server)
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .arg("--dir")
        .arg(dir.path())
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("spawning {}", env.redis_server.display()))?;
    let mut child = ChildGuard::new(child);
    let url = format!("redis://127.0.0.1:{port}/");
    wait_ready(&mut child, "the locator's redis-server", || async {
        let client = redis::Client::open(url.as_str())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        Ok(())
    })
    .await?;
    Ok((LocatorRedis { child, port }, dir))
}

impl Target for Tapedeck {
    type Producer = TapedeckProducer;
    type Subscriber = TapedeckSubscriber;

    async fn record(&self, lane: usize, name: &str) -> Result<TapedeckProducer> {
        let id = name.as_bytes().to_vec();
        match self.api {
            Api::Record => {
                let (tx, rx) = mpsc::channel(PRODUCER_QUEUE);
                tx.send(RecordRequest {
                    conversation_id: id,
                    ..Default::default()
                })
                .await?;
                let mut client = ResponseRecorderServiceClient::new(self.channel(lane));
                let call = tokio::spawn(async move {
                    client
                        .record(ReceiverStream::new(rx))
                        .await
                        .map(|r| r.into_inner())
                });
                Ok(TapedeckProducer::Record {
                    tx,
                    call,
                    tokens: 0,
                })
            }
            Api::PerTokenAck => {
                let (tx, rx) = mpsc::channel(PRODUCER_QUEUE);
                tx.send(StreamResponseTokenRequest {
                    conversation_id: id,
                    ..Default::default()
                })
                .await?;
                let mut client = ResponseResumerServiceClient::new(self.channel(lane));
                let mut acks = client
                    .stream_response_tokens(ReceiverStream::new(rx))
                    .await?
                    .into_inner();
                // The id-only first message is answered too.
                expect_ack(&mut acks).await?;
                Ok(TapedeckProducer::PerTokenAck {
                    tx,
                    acks: Box::new(acks),
                })
            }
        }
    }

    async fn subscribe(&self, lane: usize, name: &str) -> Result<TapedeckSubscriber> {
        let mut client = ResponseRecorderServiceClient::new(self.channel(lane));
        let id = name.as_bytes().to_vec();
        // Wait until the recording is registered as live before replaying it, so the replay
        // attaches to the live tape. Servers before 928b0e7 could spin forever on a Replay that
        // raced the commit of its recording's start.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let live = client
                .check_recordings(CheckRecordingsRequest {
                    conversation_ids: vec![id.clone()],
                })
                .await?
                .into_inner()
                .conversation_ids;
            if !live.is_empty() {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                bail!("recording {name} did not become live");
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let stream = client
            .replay(ReplayRequest {
                conversation_id: id,
                resume_offset: 0,
                ..Default::default()
            })
            .await?
            .into_inner();
        Ok(TapedeckSubscriber { stream })
    }

    async fn replay(&self, lane: usize, name: &str) -> Result<u64> {
        let mut client = ResponseRecorderServiceClient::new(self.channel(lane));
        let mut stream = client
            .replay(ReplayRequest {
                conversation_id: name.as_bytes().to_vec(),
                resume_offset: 0,
                ..Default::default()
            })
            .await?
            .into_inner();
        let mut bytes = 0;
        while let Some(message) = stream.message().await? {
            bytes += message.content.len() as u64;
        }
        Ok(bytes)
    }

    fn data_pid(&self) -> Option<u32> {
        self.pid
    }
}

/// A producer on one of the two APIs.
pub(crate) enum TapedeckProducer {
    Record {
        tx: mpsc::Sender<RecordRequest>,
        call: JoinHandle<Result<RecordResponse, tonic::Status>>,
        tokens: u64,
    },
    PerTokenAck {
        tx: mpsc::Sender<StreamResponseTokenRequest>,
        acks: Box<Streaming<StreamResponseTokenResponse>>,
    },
}

impl super::Producer for TapedeckProducer {
    async fn send(&mut self, token: String) -> Result<u64> {
        match self {
            TapedeckProducer::Record { tx, tokens, .. } => {
                tx.send(RecordRequest {
                    content: token,
                    ..Default::default()
                })
                .await
                .map_err(|_| anyhow!("the Record call ended early"))?;
                *tokens += 1;
                // Nothing is acknowledged per token: the answer comes after the completion.
                Ok(0)
            }
            TapedeckProducer::PerTokenAck { tx, acks } => {
                tx.send(StreamResponseTokenRequest {
                    token,
                    ..Default::default()
                })
                .await
                .map_err(|_| anyhow!("the StreamResponseTokens call ended early"))?;
                expect_ack(acks).await?;
                Ok(1)
            }
        }
    }

    async fn finish(self) -> Result<u64> {
        match self {
            TapedeckProducer::Record { tx, call, tokens } => {
                tx.send(RecordRequest {
                    complete: true,
                    ..Default::default()
                })
                .await
                .map_err(|_| anyhow!("the Record call ended early"))?;
                drop(tx);
                let answer = call.await??;
                if answer.status != RecordStatus::Success as i32 {
                    bail!("Record answered {answer:?}");
                }
                Ok(tokens)
            }
            TapedeckProducer::PerTokenAck { tx, mut acks } => {
                tx.send(StreamResponseTokenRequest {
                    complete: true,
                    ..Default::default()
                })
                .await
                .map_err(|_| anyhow!("the StreamResponseTokens call ended early"))?;
                drop(tx);
                // The completing message is acked, then the stream closes once it is committed.
                while let Some(ack) = acks.message().await? {
                    if !ack.success {
                        bail!("completion refused: {}", ack.error_message);
                    }
                }
                Ok(0)
            }
        }
    }
}

async fn expect_ack(acks: &mut Streaming<StreamResponseTokenResponse>) -> Result<()> {
    match acks.message().await? {
        Some(ack) if ack.success => Ok(()),
        Some(ack) => bail!("token refused: {}", ack.error_message),
        None => bail!("the StreamResponseTokens call ended early"),
    }
}

/// A live `Replay` of a recording.
pub(crate) struct TapedeckSubscriber {
    stream: Streaming<ReplayResponse>,
}

impl super::Subscriber for TapedeckSubscriber {
    async fn next(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(self
            .stream
            .message()
            .await?
            .map(|message| message.content.into_bytes()))
    }
}
