//! gRPC client helpers: clients of the three services, a producer on the current API and one
//! on the legacy API, and replays read to their end (with their trailers).
use std::net::SocketAddr;

use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tapedeck::pb::response_resumer_service_client::ResponseResumerServiceClient;
use tapedeck::pb::{
    RecordRequest, RecordResponse, ReplayRequest, ReplayResponse, StreamResponseTokenRequest,
    StreamResponseTokenResponse,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use super::WAIT;

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
            // Memory Service's answer for a recording that is not there: an empty OK stream
            // with its reason in a trailer. Read as the NOT_FOUND it names, as the Rust
            // client reads it.
            if let Some(reason) = trailers.get(tapedeck::grpc::REASON_METADATA) {
                assert!(replayed.text.is_empty(), "content before {reason:?}");
                let mut metadata = tonic::metadata::MetadataMap::new();
                metadata.insert(tapedeck::grpc::REASON_METADATA, reason.clone());
                let message = format!("{}: no recording", reason.to_str().unwrap_or("?"));
                return Err(Status::with_metadata(
                    tonic::Code::NotFound,
                    message,
                    metadata,
                ));
            }
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

/// Opens a replay of `id` from `offset` as soon as its recording has started. Record answers
/// only at the end, and a replay of a recording that is not there yet is an empty OK stream,
/// so a test learns of the start from `CheckRecordings`, until [`WAIT`] runs out (then the
/// replay is opened anyway, and reads as [`read_all`] says).
pub(crate) async fn replay_when_live(
    client: &RecorderClient,
    id: &[u8],
    offset: i64,
) -> Result<Streaming<ReplayResponse>, Status> {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        let request = tapedeck::pb::CheckRecordingsRequest {
            conversation_ids: vec![id.to_vec()],
        };
        let live = client.clone().check_recordings(request).await?;
        if !live.into_inner().conversation_ids.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    replay_from(client, id, offset).await
}

/// Asserts that `text`, what recording `who` holds after a crash or a failure, keeps every
/// `acked` byte and holds nothing never `sent`.
pub(crate) fn assert_kept(text: &str, acked: &str, sent: &str, who: &str) {
    assert!(
        text.starts_with(acked),
        "{who} lost acknowledged bytes: {text:?} does not start with the {} acknowledged",
        acked.len()
    );
    assert!(
        sent.starts_with(text),
        "{who} holds bytes never sent: {text:?}"
    );
}
