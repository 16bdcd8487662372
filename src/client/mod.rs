//! The Rust client: typed async calls for every RPC of tapedeck's current API and of
//! `tapedeck.v1.Recordings`, with credentials (API key or bearer grant), TLS, and Memory
//! Service's redirects followed (up to [`MAX_REDIRECTS`]) with the same credentials.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tonic::Status> {
//! use tapedeck::client::{Client, ClientConfig, RecordOptions};
//!
//! let client = Client::connect(ClientConfig::new("127.0.0.1:9090")).await?;
//! let recording = client.record(b"chat-42", RecordOptions::default()).await?;
//! recording.send("Hello, ").await?;
//! recording.send("world").await?;
//! recording.complete().await?;
//!
//! let mut replay = client.replay(b"chat-42", 0).await?;
//! while let Some(piece) = replay.next().await? {
//!     print!("{}", piece.content);
//! }
//! # Ok(()) }
//! ```

mod playback;
mod record;

use std::path::PathBuf;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};

pub use playback::{Playback, ReplayMessage};
pub use record::{RecordOptions, Recording};

use crate::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use crate::pb::tapedeck::cluster_client::ClusterClient;
use crate::pb::tapedeck::recordings_client::RecordingsClient;
use crate::pb::tapedeck::{
    ClusterStatus, ClusterStatusRequest, DeleteRecordingRequest, GetRecordingRequest,
    ListRecordingsRequest, ListRecordingsResponse, Recording as RecordingInfo, RecordingStatus,
};
use crate::pb::{CancelRecordRequest, CheckRecordingsRequest};

/// How many redirects a call follows, as Memory Service's clients do by default.
pub const MAX_REDIRECTS: usize = 3;
/// Largest message the client accepts: a replay message or a chunk, with room to spare.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Where the server is and how to authenticate to it.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `host:port`, or a URL (`http://…`, `https://…`).
    pub server: String,
    /// Sent as `x-api-key`.
    pub api_key: Option<String>,
    /// A signed grant, sent as `authorization: Bearer …`.
    pub bearer: Option<String>,
    /// PEM CA certificate of the server's TLS certificate: connect over TLS, trusting it.
    pub tls_ca: Option<PathBuf>,
    /// Redirects followed at most. Default [`MAX_REDIRECTS`].
    pub max_redirects: usize,
    /// Connect timeout. Default 10 s.
    pub connect_timeout: Duration,
}

impl ClientConfig {
    /// A plaintext, unauthenticated client of `server`.
    pub fn new(server: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            api_key: None,
            bearer: None,
            tls_ca: None,
            max_redirects: MAX_REDIRECTS,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Adds the credentials to every call.
#[derive(Clone, Default)]
struct Credentials {
    api_key: Option<MetadataValue<Ascii>>,
    bearer: Option<MetadataValue<Ascii>>,
}

impl Interceptor for Credentials {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(key) = &self.api_key {
            request.metadata_mut().insert("x-api-key", key.clone());
        }
        if let Some(bearer) = &self.bearer {
            request
                .metadata_mut()
                .insert("authorization", bearer.clone());
        }
        Ok(request)
    }
}

type Calls = InterceptedService<Channel, Credentials>;

/// A connection to one tapedeck server (and, through redirects, to the others of its
/// cluster). Cheap to clone.
#[derive(Clone)]
pub struct Client {
    config: ClientConfig,
    credentials: Credentials,
    channel: Channel,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.config.server)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to `config.server`.
    ///
    /// Fails with `UNAVAILABLE` when it cannot be reached, `INVALID_ARGUMENT` for a malformed
    /// address, credential or CA file.
    pub async fn connect(config: ClientConfig) -> Result<Client, Status> {
        let value = |text: &str, what: &str| {
            text.parse::<MetadataValue<Ascii>>()
                .map_err(|_| Status::invalid_argument(format!("the {what} is not ASCII text")))
        };
        let credentials = Credentials {
            api_key: config
                .api_key
                .as_deref()
                .map(|k| value(k, "API key"))
                .transpose()?,
            bearer: config
                .bearer
                .as_deref()
                .map(|t| value(&format!("Bearer {t}"), "bearer token"))
                .transpose()?,
        };
        let channel = open_channel(&config, &config.server).await?;
        Ok(Client {
            config,
            credentials,
            channel,
        })
    }

    /// The same client, connected to `address` instead (a redirect's target).
    async fn redirected(&self, address: &str) -> Result<Client, Status> {
        Ok(Client {
            config: self.config.clone(),
            credentials: self.credentials.clone(),
            channel: open_channel(&self.config, address).await?,
        })
    }

    fn calls(&self) -> Calls {
        InterceptedService::new(self.channel.clone(), self.credentials.clone())
    }

    fn recorder(&self) -> ResponseRecorderServiceClient<Calls> {
        ResponseRecorderServiceClient::new(self.calls())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn recordings(&self) -> RecordingsClient<Calls> {
        RecordingsClient::new(self.calls())
    }

    /// Opens a producer session on conversation `id`: a new recording, or a resume (see
    /// [`RecordOptions`]; a resume is opened on the instance that holds the recording).
    /// Chunks are sent with [`Recording::send`], which waits when the server is behind.
    ///
    /// Fails with `UNAVAILABLE` when the call cannot be opened; the server's refusals come back
    /// from [`Recording::send`] or [`Recording::complete`].
    pub async fn record(&self, id: &[u8], options: RecordOptions) -> Result<Recording, Status> {
        // A resume goes to the instance that holds the recording (several instances behind one
        // address): Get says which, when it is another one.
        if options.resume_from.is_some()
            && let Ok(info) = self.get(id).await
            && !info.owner_address.is_empty()
        {
            let owner = self.redirected(&info.owner_address).await?;
            return Recording::open(owner.recorder(), id, options).await;
        }
        Recording::open(self.recorder(), id, options).await
    }

    /// Replays conversation `id` from byte `from`, then follows it live until it ends;
    /// redirects are followed.
    ///
    /// Fails as the server's `Replay` does (`NOT_FOUND`, `OUT_OF_RANGE`…), or with
    /// `UNAVAILABLE` after too many redirects.
    pub async fn replay(&self, id: &[u8], from: u64) -> Result<Playback, Status> {
        self.replay_with(id, from, false).await
    }

    /// As [`replay`](Self::replay), one message per recorded chunk, with its index and commit
    /// time.
    ///
    /// Fails as [`replay`](Self::replay) does.
    pub async fn replay_chunks(&self, id: &[u8], from: u64) -> Result<Playback, Status> {
        self.replay_with(id, from, true).await
    }

    async fn replay_with(&self, id: &[u8], from: u64, chunked: bool) -> Result<Playback, Status> {
        let mut client = self.clone();
        for _ in 0..=self.config.max_redirects {
            match Playback::open(client.recorder(), id, from, chunked).await? {
                playback::Opened::Here(replay) => return Ok(*replay),
                playback::Opened::Redirect(address) => client = self.redirected(&address).await?,
            }
        }
        Err(too_many_redirects(self.config.max_redirects))
    }

    /// Asks the producer of conversation `id`'s live recording to stop. True if it was live
    /// (or already cancelled). Redirects are followed.
    ///
    /// Fails with the server's status, or `UNAVAILABLE` after too many redirects.
    pub async fn cancel(&self, id: &[u8]) -> Result<bool, Status> {
        let mut client = self.clone();
        for _ in 0..=self.config.max_redirects {
            let request = CancelRecordRequest {
                conversation_id: id.to_vec(),
            };
            let answer = client.recorder().cancel(request).await?.into_inner();
            if answer.redirect_address.is_empty() {
                return Ok(answer.accepted);
            }
            client = self.redirected(&answer.redirect_address).await?;
        }
        Err(too_many_redirects(self.config.max_redirects))
    }

    /// Whether recording is enabled on the server (always, on tapedeck).
    ///
    /// Fails with the server's status.
    pub async fn is_enabled(&self) -> Result<bool, Status> {
        Ok(self.recorder().is_enabled(()).await?.into_inner().enabled)
    }

    /// The ids among `ids` whose recording is live (on any instance of a cluster).
    ///
    /// Fails with the server's status (`INVALID_ARGUMENT` over 1,000 ids).
    pub async fn check(&self, ids: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, Status> {
        let request = CheckRecordingsRequest {
            conversation_ids: ids.to_vec(),
        };
        let answer = self.recorder().check_recordings(request).await?;
        Ok(answer.into_inner().conversation_ids)
    }

    /// What the server knows of conversation `id`'s recording (on this instance).
    ///
    /// Fails with `NOT_FOUND` when nothing is known.
    pub async fn get(&self, id: &[u8]) -> Result<RecordingInfo, Status> {
        let request = GetRecordingRequest {
            conversation_id: id.to_vec(),
        };
        Ok(self.recordings().get(request).await?.into_inner())
    }

    /// One page of recordings in start order: only those with `status` if given, at most
    /// `page_size` (0: the server's default), after `page_token` (empty: from the first).
    ///
    /// Fails with `INVALID_ARGUMENT` for a bad page token.
    pub async fn list(
        &self,
        status: Option<RecordingStatus>,
        page_size: u32,
        page_token: &str,
    ) -> Result<ListRecordingsResponse, Status> {
        let request = ListRecordingsRequest {
            status: status.unwrap_or(RecordingStatus::Unspecified) as i32,
            page_size,
            page_token: page_token.to_string(),
        };
        Ok(self.recordings().list(request).await?.into_inner())
    }

    /// This node's view of its cluster: leader, term, log, and on the leader each node's lag.
    ///
    /// Fails with `FAILED_PRECONDITION` on a single node.
    pub async fn cluster_status(&self) -> Result<ClusterStatus, Status> {
        let mut client = ClusterClient::new(self.calls());
        Ok(client.status(ClusterStatusRequest {}).await?.into_inner())
    }

    /// Deletes conversation `id`'s recording (a live one is cancelled first). Whether there
    /// was one.
    ///
    /// Fails with the server's status.
    pub async fn delete(&self, id: &[u8]) -> Result<bool, Status> {
        let request = DeleteRecordingRequest {
            conversation_id: id.to_vec(),
        };
        Ok(self
            .recordings()
            .delete(request)
            .await?
            .into_inner()
            .existed)
    }
}

/// A channel to `address` with `config`'s TLS settings.
async fn open_channel(config: &ClientConfig, address: &str) -> Result<Channel, Status> {
    let tls = config.tls_ca.is_some() || address.starts_with("https://");
    let url = if address.contains("://") {
        address.to_string()
    } else if tls {
        format!("https://{address}")
    } else {
        format!("http://{address}")
    };
    let bad = |err: &dyn std::fmt::Display| {
        Status::invalid_argument(format!("`{address}` is not a server address: {err}"))
    };
    // `9090` alone would be host 9090 on port 80, and the call would leave the machine.
    let port = url
        .parse::<tonic::codegen::http::Uri>()
        .map_err(|e| bad(&e))?
        .port_u16();
    if port.is_none() && !address.contains("://") {
        return Err(bad(&"it has no port; give host:port (e.g. 127.0.0.1:9090)"));
    }
    let mut endpoint = Endpoint::from_shared(url)
        .map_err(|e| bad(&e))?
        .connect_timeout(config.connect_timeout)
        .tcp_nodelay(true);
    if let Some(ca) = &config.tls_ca {
        let pem = std::fs::read(ca).map_err(|err| {
            Status::invalid_argument(format!("cannot read the CA file {}: {err}", ca.display()))
        })?;
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
        endpoint = endpoint.tls_config(tls).map_err(|e| bad(&e))?;
    }
    endpoint.connect().await.map_err(|err| {
        Status::unavailable(format!(
            "cannot connect to {address}: {}",
            source_text(&err)
        ))
    })
}

/// An error with its causes, on one line.
fn source_text(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn too_many_redirects(max: usize) -> Status {
    Status::new(
        Code::Unavailable,
        format!("more than {max} redirects; the cluster's locator may be inconsistent"),
    )
}
