//! docs/behaviour.md's side-by-side table, row by row: every RPC of Memory Service's two recorder
//! services, `memory.v1.ResponseRecorderService` and the legacy `ResponseResumerService`, asked
//! about a conversation that is unknown, malformed, expired, deleted, cancelled, interrupted
//! (within the grace period, and after it) or superseded; by a caller without the right; while
//! the server shuts down; and Check lists that are empty, too long or name a conversation twice.
//! Each state is made on a real server through each API in turn, then every RPC of that API is
//! asked about it. Each assertion names the row it shows ("CancelResponse / expired").
use crate::common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tapedeck::Config;
use tapedeck::access::{AccessConfig, ApiKey, Role, Secret};
use tapedeck::clock::{Clock, ManualClock, SystemClock};
use tapedeck::config::OnConflict;
use tapedeck::pb::tapedeck::DeleteRecordingRequest;
use tapedeck::pb::{
    CancelRecordRequest, CancelResponseRequest, CheckConversationsRequest, CheckRecordingsRequest,
    RecordRequest, RecordStatus, ReplayRequest, ReplayResponse, ReplayResponseTokensRequest,
    ReplayResponseTokensResponse, StreamResponseTokenRequest,
};
use tapedeck::store::{Store, StoreOptions};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataMap;
use tonic::transport::Endpoint;
use tonic::{Code, Request, Status, Streaming};
use tonic_health::pb::health_check_response::ServingStatus;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Current,
    Legacy,
}

const APIS: [Api; 2] = [Api::Current, Api::Legacy];

/// The RPCs, in the order of [`Api::row`]'s names.
#[derive(Clone, Copy)]
enum Rpc {
    Record,
    Replay,
    Cancel,
    IsEnabled,
    Check,
}

impl Api {
    /// The table's row for `rpc` of this API in `case`.
    fn row(self, rpc: Rpc, case: &str) -> String {
        let names = match self {
            Api::Current => ["Record", "Replay", "Cancel", "IsEnabled", "CheckRecordings"],
            Api::Legacy => [
                "StreamResponseTokens",
                "ReplayResponseTokens",
                "CancelResponse",
                "IsEnabled (legacy)",
                "CheckConversations",
            ],
        };
        format!("{} / {case}", names[rpc as usize])
    }

    /// This API's own conversation for `case`.
    fn id(self, case: &str) -> Vec<u8> {
        format!("{case}-{self:?}").into_bytes()
    }

    fn pick<T>(self, current: T, legacy: T) -> T {
        match self {
            Api::Current => current,
            Api::Legacy => legacy,
        }
    }
}

/// Clients of both APIs, sending `auth` with every call.
#[derive(Clone)]
struct Clients {
    current: RecorderClient,
    legacy: ResumerClient,
    auth: MetadataMap,
}

/// A server started with `config`, and clients of it.
async fn serve(config: Config) -> (TestServer, Clients) {
    let store = tapedeck::server::open_store(&config).unwrap();
    serve_on(config, store).await
}

/// A server started with `config` on `store`, and clients of it.
async fn serve_on(config: Config, store: Store) -> (TestServer, Clients) {
    clients_of(TestServer::start_with_store(config, store).await).await
}

/// `server`, and clients of it.
async fn clients_of(server: TestServer) -> (TestServer, Clients) {
    let (current, legacy) = (server.recorder().await, server.resumer().await);
    let auth = MetadataMap::new();
    let clients = Clients {
        current,
        legacy,
        auth,
    };
    (server, clients)
}

impl Clients {
    /// The same clients, sending metadata `name: value` too.
    fn with(&self, name: &'static str, value: &str) -> Clients {
        let mut with = self.clone();
        with.auth.insert(name, value.parse().unwrap());
        with
    }

    fn req<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        *request.metadata_mut() = self.auth.clone();
        request
    }

    async fn is_enabled(&self, api: Api) -> Result<bool, Status> {
        let answer = match api {
            Api::Current => self.current.clone().is_enabled(self.req(())).await?,
            Api::Legacy => self.legacy.clone().is_enabled(self.req(())).await?,
        };
        Ok(answer.into_inner().enabled)
    }

    async fn check(&self, api: Api, ids: &[&[u8]]) -> Result<Vec<Vec<u8>>, Status> {
        let conversation_ids = ids.iter().map(|id| id.to_vec()).collect();
        Ok(match api {
            Api::Current => {
                let request = self.req(CheckRecordingsRequest { conversation_ids });
                let answer = self.current.clone().check_recordings(request).await?;
                answer.into_inner().conversation_ids
            }
            Api::Legacy => {
                let request = self.req(CheckConversationsRequest { conversation_ids });
                let answer = self.legacy.clone().check_conversations(request).await?;
                answer.into_inner().conversation_ids
            }
        })
    }

    /// Cancel or CancelResponse: answered within [`WAIT`], well short of CancelResponse's 30 s.
    async fn cancel(&self, api: Api, id: &[u8]) -> Result<bool, Status> {
        let conversation_id = id.to_vec();
        let answer = async {
            Ok(match api {
                Api::Current => {
                    let request = self.req(CancelRecordRequest { conversation_id });
                    let answer = self.current.clone().cancel(request).await?;
                    answer.into_inner().accepted
                }
                Api::Legacy => {
                    let request = self.req(CancelResponseRequest { conversation_id });
                    let answer = self.legacy.clone().cancel_response(request).await?;
                    answer.into_inner().accepted
                }
            })
        };
        tokio::time::timeout(WAIT, answer)
            .await
            .expect("no answer to a cancel")
    }

    /// Opens a replay of `id` from its start.
    async fn replay(&self, api: Api, id: &[u8]) -> Result<Reader, Status> {
        let conversation_id = id.to_vec();
        Ok(match api {
            Api::Current => {
                let request = self.req(ReplayRequest {
                    conversation_id,
                    ..Default::default()
                });
                Reader::Current(self.current.clone().replay(request).await?.into_inner())
            }
            Api::Legacy => {
                let resume_position = 0;
                let request = self.req(ReplayResponseTokensRequest {
                    conversation_id,
                    resume_position,
                });
                let opened = self.legacy.clone().replay_response_tokens(request).await;
                Reader::Legacy(opened?.into_inner())
            }
        })
    }

    /// Opens a producer of `id` whose first message carries `text` (resending from byte
    /// `from`, if given). A legacy call's own failure comes back here.
    async fn produce(
        &self,
        api: Api,
        id: &[u8],
        text: &str,
        from: Option<i64>,
    ) -> Result<Producer, Status> {
        Ok(match api {
            Api::Current => {
                let (tx, rx) = mpsc::channel(64);
                let first = RecordRequest {
                    conversation_id: id.to_vec(),
                    content: text.into(),
                    resume_from_offset: from,
                    ..Default::default()
                };
                tx.send(first).await.unwrap();
                let (mut client, request) =
                    (self.current.clone(), self.req(ReceiverStream::new(rx)));
                let call = async move { client.record(request).await.map(|r| r.into_inner()) };
                Producer::Current(Recording {
                    tx,
                    answer: tokio::spawn(call),
                })
            }
            Api::Legacy => {
                let (tx, rx) = mpsc::channel(64);
                let resume_from_offset = from;
                let first = StreamResponseTokenRequest {
                    resume_from_offset,
                    ..token(id, text, false)
                };
                tx.send(first).await.unwrap();
                let request = self.req(ReceiverStream::new(rx));
                let acks = self.legacy.clone().stream_response_tokens(request).await?;
                let acks = acks.into_inner();
                Producer::Legacy(Box::new(LegacyProducer { tx, acks }))
            }
        })
    }

    /// A live recording of `id` whose first message carries `text`, and a reader that has
    /// read it.
    async fn live(&self, api: Api, id: &[u8], text: &str) -> (Producer, Reader) {
        let producer = self.produce(api, id, text, None).await.unwrap();
        eventually("the recording goes live", || async {
            !self.check(Api::Current, &[id]).await.unwrap().is_empty()
        })
        .await;
        let mut reader = self.replay(api, id).await.unwrap();
        reader.read(text).await;
        (producer, reader)
    }
}

/// Asks `check` every few milliseconds until it holds, for at most [`WAIT`].
async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A replay on either API.
enum Reader {
    Current(Streaming<ReplayResponse>),
    Legacy(Streaming<ReplayResponseTokensResponse>),
}

/// What a replay reads: its text, `tapedeck-status` and `tapedeck-reason`.
type Read = (&'static str, Option<&'static str>, Option<&'static str>);

/// A replay of a recording that is not there, for `reason`.
fn gone(reason: &'static str) -> Read {
    ("", None, Some(reason))
}

/// A replay of a recording that ended `status`, holding `text`.
fn ended(text: &'static str, status: &'static str) -> Read {
    (text, Some(status), None)
}

/// How a replay ended: the text after what was read before, the code and its message, and the
/// trailers (of an error: its metadata).
struct Ended {
    text: String,
    status: Status,
    trailers: MetadataMap,
}

impl Ended {
    fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts that the replay ended OK having read `read`.
    fn is(&self, read: Read, row: &str) {
        let (status, reason) = (
            self.trailer("tapedeck-status"),
            self.trailer("tapedeck-reason"),
        );
        let got = (self.text.as_str(), status, reason);
        assert_eq!((got, self.status.code()), (read, Code::Ok), "{row}");
    }
}

impl Reader {
    async fn next(&mut self) -> Result<Option<String>, Status> {
        let next = async {
            Ok(match self {
                Reader::Current(stream) => stream.message().await?.map(|m| m.content),
                Reader::Legacy(stream) => stream.message().await?.map(|m| m.token),
            })
        };
        tokio::time::timeout(WAIT, next)
            .await
            .expect("the replay stalled")
    }

    /// Reads until `expected` has arrived, and nothing else.
    async fn read(&mut self, expected: &str) {
        let mut text = String::new();
        while text.len() < expected.len() {
            text += &self.next().await.unwrap().expect("the replay ended early");
        }
        assert_eq!(text, expected);
    }

    async fn end(mut self) -> Ended {
        let mut text = String::new();
        let status = loop {
            match self.next().await {
                Ok(Some(more)) => text += &more,
                Ok(None) => break Status::ok(""),
                Err(status) => {
                    let trailers = status.metadata().clone();
                    return Ended {
                        text,
                        status,
                        trailers,
                    };
                }
            }
        };
        let trailers = match &mut self {
            Reader::Current(stream) => stream.trailers().await,
            Reader::Legacy(stream) => stream.trailers().await,
        };
        let trailers = trailers.unwrap().unwrap_or_default();
        Ended {
            text,
            status,
            trailers,
        }
    }
}

/// A producer on either API.
enum Producer {
    Current(Recording),
    Legacy(Box<LegacyProducer>),
}

/// What a producer was told when its call ended: the RecordResponse status (legacy: success
/// and cancel_requested read as one), its message, and the legacy `current_offset`.
struct Said(RecordStatus, String, Option<i64>);

impl Said {
    /// Asserts that the producer was told `want`, in words containing `says`, at byte
    /// `offset` (the legacy API's `current_offset`).
    fn is(&self, want: RecordStatus, says: &str, offset: i64, row: &str) {
        let Said(status, message, at) = self;
        let got = (*status, at.unwrap_or(offset));
        assert_eq!(got, (want, offset), "{row}: {message}");
        assert!(message.contains(says), "{row}: {message:?} lacks {says:?}");
    }
}

impl Producer {
    /// Sends `complete=true` and returns what the producer is told.
    async fn complete(self) -> Result<Said, Status> {
        match &self {
            Producer::Current(recording) => {
                let complete = RecordRequest {
                    complete: true,
                    ..Default::default()
                };
                let _ = recording.tx.send(complete).await;
            }
            Producer::Legacy(producer) => {
                let _ = producer.tx.send(token(b"", "", true)).await;
            }
        }
        self.told().await
    }

    /// Ends the request stream without `complete=true`; returns what the producer is told.
    async fn end_without_complete(self) -> Result<Said, Status> {
        self.answer(false).await
    }

    /// Waits for what the producer is told, sending nothing more.
    async fn told(self) -> Result<Said, Status> {
        self.answer(true).await
    }

    /// The call's answer, or the legacy stream's last response.
    async fn answer(self, keep_sending: bool) -> Result<Said, Status> {
        let answer = async move {
            match self {
                Producer::Current(Recording { tx, answer }) => {
                    let _open = keep_sending.then_some(tx);
                    let answer = answer.await.unwrap()?;
                    let status = RecordStatus::try_from(answer.status).unwrap();
                    Ok(Said(status, answer.error_message, None))
                }
                Producer::Legacy(producer) => {
                    let LegacyProducer { tx, mut acks } = *producer;
                    let _open = keep_sending.then_some(tx);
                    let mut last = None;
                    while let Some(response) = acks.message().await? {
                        last = Some(response);
                    }
                    let last = last.expect("the stream ended without a response");
                    let status = match (last.success, last.cancel_requested) {
                        (_, true) => RecordStatus::Cancelled,
                        (true, false) => RecordStatus::Success,
                        (false, false) => RecordStatus::Error,
                    };
                    Ok(Said(status, last.error_message, Some(last.current_offset)))
                }
            }
        };
        tokio::time::timeout(WAIT, answer)
            .await
            .expect("no answer to a producer")
    }
}

/// The status a refused producer gets: when its call opens (legacy) or as its answer.
async fn refused(opened: Result<Producer, Status>) -> Status {
    match opened {
        Err(status) => status,
        Ok(producer) => producer.told().await.err().expect("not refused"),
    }
}

/// What the table says of a conversation in one state, asked in this order: whether Check
/// lists it, whether Cancel is accepted, what a replay then reads.
#[derive(Clone, Copy)]
struct Answers {
    listed: bool,
    cancelled: bool,
    replay: Read,
}

impl Answers {
    /// Neither listed nor cancelled; a replay reads `replay`.
    fn ended(replay: Read) -> Answers {
        let (listed, cancelled) = (false, false);
        Answers {
            listed,
            cancelled,
            replay,
        }
    }

    /// Listed, and the Cancel accepted.
    fn live(self) -> Answers {
        let (listed, cancelled) = (true, true);
        Answers {
            listed,
            cancelled,
            ..self
        }
    }
}

/// Asks every RPC of `api` about `id` in state `case`: IsEnabled and Check, which leave the
/// state as it is, then Cancel and Replay, then a new recording, which every state allows.
async fn every_rpc_answers(c: &Clients, api: Api, id: &[u8], case: &str, want: Answers) {
    let row = |rpc| api.row(rpc, case);
    assert!(c.is_enabled(api).await.unwrap(), "{}", row(Rpc::IsEnabled));
    let listed = c.check(api, &[id, b"never-recorded"]).await.unwrap();
    let expected: &[&[u8]] = if want.listed { &[id] } else { &[] };
    assert_eq!(listed, expected, "{}", row(Rpc::Check));
    let cancelled = c.cancel(api, id).await.unwrap();
    assert_eq!(cancelled, want.cancelled, "{}", row(Rpc::Cancel));
    let replay = c.replay(api, id).await.unwrap().end().await;
    replay.is(want.replay, &row(Rpc::Replay));

    let fresh = c.produce(api, id, "fresh", None).await.unwrap();
    let said = fresh.complete().await.unwrap();
    said.is(RecordStatus::Success, "", 5, &row(Rpc::Record));
    let replay = c.replay(api, id).await.unwrap().end().await;
    replay.is(ended("fresh", "completed"), &row(Rpc::Record));
}

#[tokio::test]
async fn every_rpc_answers_an_unknown_recording_as_the_table_says() {
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve(test_config(dir.path())).await;
    // Blank ids are text ids like any other (Record / malformed), each its own conversation.
    for (api, id) in [(Api::Current, &b" "[..]), (Api::Legacy, b"  ")] {
        let want = Answers::ended(gone("unknown"));
        every_rpc_answers(&c, api, id, "unknown", want).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn every_rpc_answers_a_malformed_id_as_the_table_says() {
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve(test_config(dir.path())).await;
    let long = [b'x'; 257];
    let not_utf8: &[u8] = &[0xff, 0xfe];
    for api in APIS {
        for (what, id) in [
            ("empty", &b""[..]),
            ("not UTF-8", not_utf8),
            ("long", &long),
        ] {
            let row = |rpc| api.row(rpc, &format!("malformed ({what})"));
            let code = refused(c.produce(api, id, "x", None).await).await.code();
            assert_eq!(code, Code::InvalidArgument, "{}", row(Rpc::Record));
            let code = c.replay(api, id).await.err().map(|s| s.code());
            assert_eq!(code, Some(Code::InvalidArgument), "{}", row(Rpc::Replay));
            let code = c.cancel(api, id).await.map_err(|s| s.code());
            assert_eq!(code, Err(Code::InvalidArgument), "{}", row(Rpc::Cancel));
            let listed = c.check(api, &[id]).await.unwrap();
            assert!(listed.is_empty(), "{}", row(Rpc::Check));
            assert!(c.is_enabled(api).await.unwrap(), "{}", row(Rpc::IsEnabled));
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn every_rpc_answers_an_expired_recording_as_the_table_says() {
    const RETENTION: Duration = Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    (config.store.retention, config.recorder.gc_interval) = (RETENTION, Duration::from_millis(10));
    let clock = ManualClock::new(SystemClock.now_ms());
    let options = StoreOptions {
        retention: RETENTION,
        clock: Arc::new(clock.clone()),
        ..StoreOptions::default()
    };
    let store = Store::open(&config.database_path(), options).unwrap();
    let (server, c) = serve_on(config, store).await;
    for api in APIS {
        let bygone = c.produce(api, &api.id("expired"), "bygone", None).await;
        let said = bygone.unwrap().complete().await.unwrap();
        let row = api.row(Rpc::Record, "expired");
        said.is(RecordStatus::Success, "", 6, &row);
    }
    // Retention passes; the sweeper collects both.
    clock.advance(RETENTION.as_millis() as u64 + 1);
    for api in APIS {
        let id = api.id("expired");
        eventually("the sweeper collects the recording", || async {
            let replay = c.replay(api, &id).await.unwrap().end().await;
            replay.trailer("tapedeck-reason") == Some("expired")
        })
        .await;
        let want = Answers::ended(gone("expired"));
        every_rpc_answers(&c, api, &id, "expired", want).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn every_rpc_answers_a_deleted_recording_as_the_table_says() {
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve(test_config(dir.path())).await;
    let mut recordings = recordings_client(server.addr).await;
    for api in APIS {
        let id = api.id("deleted");
        let (producer, reader) = c.live(api, &id, "to be ").await;
        let conversation_id = id.clone();
        let deleted = recordings.delete(DeleteRecordingRequest { conversation_id });
        assert!(deleted.await.unwrap().into_inner().existed);
        let says = api.pick("the recording was deleted", "");
        let row = api.row(Rpc::Record, "deleted (its live producer)");
        let said = producer.told().await.unwrap();
        said.is(RecordStatus::Cancelled, says, 6, &row);
        let row = api.row(Rpc::Replay, "deleted (a live reader)");
        reader.end().await.is(ended("", "deleted"), &row);
        let want = Answers::ended(gone("deleted"));
        every_rpc_answers(&c, api, &id, "deleted", want).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn every_rpc_answers_a_cancelled_recording_as_the_table_says() {
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve(test_config(dir.path())).await;
    for api in APIS {
        let id = api.id("cancelled");
        let (producer, reader) = c.live(api, &id, "partial").await;
        let accepted = c.cancel(api, &id).await.unwrap();
        assert!(accepted, "{}", api.row(Rpc::Cancel, "a live recording"));
        let says = api.pick("the recording was cancelled", "");
        let said = producer.told().await.unwrap();
        let row = api.row(Rpc::Record, "cancelled");
        said.is(RecordStatus::Cancelled, says, 7, &row);
        let row = api.row(Rpc::Replay, "cancelled (a live reader)");
        reader.end().await.is(ended("", "cancelled"), &row);
        let want = Answers {
            cancelled: true,
            ..Answers::ended(ended("partial", "cancelled"))
        };
        every_rpc_answers(&c, api, &id, "cancelled", want).await;
    }
    server.stop().await;
}

/// A producer ends its stream without `complete=true` and is told how to resume; a reader
/// follows through `grace`, and ends `reader_ends`; every RPC answers `want`, within the grace
/// period (when `want.listed`: the recording is still live) or after it.
async fn interrupted(grace: Duration, case: &str, reader_ends: &'static str, want: Answers) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.recorder.producer_grace = grace;
    let (server, c) = serve(config).await;
    for api in APIS {
        let id = api.id("interrupted");
        let (producer, reader) = c.live(api, &id, "half").await;
        let said = producer.end_without_complete().await.unwrap();
        let row = api.row(Rpc::Record, case);
        said.is(RecordStatus::Error, "resume_from_offset=4", 4, &row);
        assert!(said.1.contains("complete=true"), "{row}: {}", said.1);
        let following = tokio::spawn(reader.end());
        if want.listed {
            every_rpc_answers(&c, api, &id, case, want).await;
        }
        let row = api.row(Rpc::Replay, &format!("{case} (a live reader)"));
        following.await.unwrap().is(ended("", reader_ends), &row);
        if !want.listed {
            every_rpc_answers(&c, api, &id, case, want).await;
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn every_rpc_answers_a_recording_detached_within_its_grace_period_as_the_table_says() {
    let want = Answers::ended(ended("half", "cancelled")).live();
    let case = "interrupted (detached, within --producer-grace)";
    interrupted(Duration::from_secs(60), case, "cancelled", want).await;
}

#[tokio::test]
async fn every_rpc_answers_an_interrupted_recording_as_the_table_says() {
    let want = Answers::ended(ended("half", "interrupted"));
    let grace = Duration::from_millis(300);
    interrupted(grace, "interrupted", "interrupted", want).await;
}

#[tokio::test]
async fn every_rpc_answers_a_superseded_recording_as_the_table_says() {
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve(test_config(dir.path())).await;
    for api in APIS {
        let id = api.id("superseded");
        let (old, old_reader) = c.live(api, &id, "old").await;
        let new = c.produce(api, &id, "new", None).await.unwrap();
        let said = old.told().await.unwrap();
        let row = api.row(Rpc::Record, "superseded (the old producer)");
        said.is(RecordStatus::Error, "superseded", 3, &row);
        let row = api.row(Rpc::Replay, "superseded (a reader of the old recording)");
        old_reader.end().await.is(ended("", "superseded"), &row);
        // A new replay reads the new recording only.
        let mut new_reader = c.replay(api, &id).await.unwrap();
        new_reader.read("new").await;
        let want = Answers::ended(ended("new", "cancelled")).live();
        every_rpc_answers(&c, api, &id, "superseded", want).await;
        let says = api.pick("the recording was cancelled", "");
        let row = api.row(Rpc::Cancel, "superseded (the new producer)");
        let said = new.told().await.unwrap();
        said.is(RecordStatus::Cancelled, says, 3, &row);
        let row = api.row(Rpc::Cancel, "superseded (a reader of the new recording)");
        new_reader.end().await.is(ended("", "cancelled"), &row);
        let listed = c.check(api, &[&id]).await.unwrap();
        assert!(
            listed.is_empty(),
            "{}",
            api.row(Rpc::Check, "superseded, then ended")
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn under_the_reject_policy_a_second_producer_is_refused_on_both_apis() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.recorder.on_conflict = OnConflict::Reject;
    let (server, c) = serve(config).await;
    for api in APIS {
        let id = api.id("rejected");
        let (first, _) = c.live(api, &id, "first").await;
        let refusal = refused(c.produce(api, &id, "second", None).await).await;
        let row = api.row(Rpc::Record, "superseded, under --on-conflict reject");
        assert_eq!(refusal.code(), Code::AlreadyExists, "{row}");
        let said = first.complete().await.unwrap();
        said.is(RecordStatus::Success, "", 5, &row);
        let replay = c.replay(api, &id).await.unwrap().end().await;
        replay.is(ended("first", "completed"), &row);
    }
    server.stop().await;
}

#[tokio::test]
async fn every_rpc_refuses_a_caller_without_the_right_as_the_table_says() {
    const KEY: &str = "agent-secret-1";
    const SECRET: &str = "grant-signing-secret-of-32-bytes";
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.access = AccessConfig {
        api_keys: vec![ApiKey::parse(&format!("agent={KEY}")).unwrap()],
        jwt_secret: Some(Secret::new(SECRET)),
        ..AccessConfig::default()
    };
    let (server, nobody) = serve(config).await;
    let key = nobody.with("x-api-key", KEY);
    let elsewhere = format!("Bearer {}", grant(SECRET, &[("elsewhere", Role::Writer)]));
    let stranger = nobody.with("authorization", &elsewhere);
    let callers = [
        ("no credential", &nobody, Code::Unauthenticated),
        ("another's grant", &stranger, Code::PermissionDenied),
    ];
    for api in APIS {
        let id = api.id("guarded");
        let (producer, _) = key.live(api, &id, "secret").await;
        for (who, c, code) in callers {
            let row = |rpc| api.row(rpc, &format!("access refused ({who})"));
            assert!(c.is_enabled(api).await.unwrap(), "{}", row(Rpc::IsEnabled));
            let refusal = refused(c.produce(api, &id, "intruder", None).await).await;
            assert_eq!(refusal.code(), code, "{}", row(Rpc::Record));
            let refusal = c.replay(api, &id).await.err().map(|s| s.code());
            assert_eq!(refusal, Some(code), "{}", row(Rpc::Replay));
            let refusal = c.cancel(api, &id).await.map_err(|s| s.code());
            assert_eq!(refusal, Err(code), "{}", row(Rpc::Cancel));
            // A caller that is known is answered, without the ids it may not read.
            let listed = c.check(api, &[&id]).await.map_err(|s| s.code());
            let known = code != Code::Unauthenticated;
            let want = if known { Ok(vec![]) } else { Err(code) };
            assert_eq!(listed, want, "{}", row(Rpc::Check));
        }
        let row = |rpc| api.row(rpc, "access refused (an API key alone)");
        let refusal = key.cancel(api, &id).await.map_err(|s| s.code());
        assert_eq!(refusal, Err(Code::PermissionDenied), "{}", row(Rpc::Cancel));
        // Nothing refused touched the recording.
        let listed = key.check(api, &[&id]).await.unwrap();
        assert_eq!(listed, [id.as_slice()], "{}", row(Rpc::Check));
        let said = producer.complete().await.unwrap();
        said.is(RecordStatus::Success, "", 6, &row(Rpc::Record));
    }
    server.stop().await;
}

#[tokio::test]
async fn check_answers_empty_oversized_and_repeated_lists_as_the_table_says() {
    const UUID: &str = "6f1c2b0e-3d4a-4b5c-8d9e-0a1b2c3d4e5f";
    let dir = tempfile::tempdir().unwrap();
    let (server, c) = serve(test_config(dir.path())).await;
    let (uuid, upper) = (uuid::Uuid::parse_str(UUID).unwrap(), UUID.to_uppercase());
    let (producer, _) = c.live(Api::Current, uuid.as_bytes(), "x").await;
    let many: Vec<Vec<u8>> = (0..1001).map(|i| format!("id-{i}").into_bytes()).collect();
    let many: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
    for api in APIS {
        let listed = c.check(api, &[]).await.unwrap();
        assert!(listed.is_empty(), "{}", api.row(Rpc::Check, "empty list"));
        let refusal = c.check(api, &many).await.map_err(|s| s.code());
        let row = api.row(Rpc::Check, "over 1000 ids");
        assert_eq!(refusal, Err(Code::InvalidArgument), "{row}");
        // One conversation in three forms, one of them twice: listed once, as first sent (a
        // legacy client sends 16 bytes and gets 16 bytes back).
        let first = api.pick(upper.as_bytes(), uuid.as_bytes());
        let forms = [first, uuid.as_bytes(), upper.as_bytes(), UUID.as_bytes()];
        let listed = c.check(api, &forms).await.unwrap();
        let row = api.row(Rpc::Check, "duplicates, other forms");
        assert_eq!(listed, [first], "{row}");
    }
    producer.complete().await.unwrap();
    server.stop().await;
}

/// Messages the server's transport has taken from StreamResponseTokens calls to send, as its
/// telemetry counts them.
fn acks_taken(metrics: &PrometheusHandle) -> u64 {
    let rendered = metrics.render();
    let counted = rendered.lines().filter(|line| {
        line.starts_with("grpc_server_msg_sent_total{")
            && line.contains("grpc_method=\"StreamResponseTokens\"")
    });
    counted
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Holds a shutdown in its first phase (health NOT_SERVING, producers told to go, calls still
/// taken) until dropped: a legacy producer on a channel whose flow-control window is 0 gets
/// none of its acks. The server's transport takes the first into a frame it holds for good
/// (the rest are sent once its telemetry has counted it: the frame holds it alone); the
/// session queues 64 more, then, stuck on the next, cannot let go of its recording, which the
/// shutdown waits for (up to --shutdown-timeout).
async fn hold_shutdown_open(c: &Clients, url: String, metrics: &PrometheusHandle) -> impl Sized {
    const STUCK_AT: usize = 1 + 64 + 1;
    let endpoint = Endpoint::from_shared(url)
        .unwrap()
        .initial_stream_window_size(0);
    let client = ResumerClient::new(endpoint.connect().await.unwrap());
    let taken = acks_taken(metrics);
    let held = LegacyProducer::start(&client, b"held", "h").await;
    eventually("the first ack is taken", || async {
        acks_taken(metrics) == taken + 1
    })
    .await;
    for _ in 1..STUCK_AT {
        held.send(b"", "h", false).await;
    }
    let mut reader = c.replay(Api::Current, b"held").await.unwrap();
    reader.read(&"h".repeat(STUCK_AT)).await;
    (client, held)
}

/// A call of `api` that has sent no message (its request stream stays open) and that the
/// server has taken; resolves with its end.
async fn waiting_call(c: &Clients, api: Api) -> Pin<Box<dyn Future<Output = Status> + Send>> {
    match api {
        Api::Current => {
            let (tx, rx) = mpsc::channel::<RecordRequest>(1);
            let (mut client, request) = (c.current.clone(), c.req(ReceiverStream::new(rx)));
            let mut call = Box::pin(async move {
                let _open = tx;
                client.record(request).await.expect_err("Record answered")
            });
            // Polled once, its request is on the connection ahead of the next call's, which
            // the server therefore takes after it.
            assert!(futures::poll!(call.as_mut()).is_pending());
            c.is_enabled(api).await.unwrap();
            call
        }
        Api::Legacy => {
            let (tx, rx) = mpsc::channel::<StreamResponseTokenRequest>(1);
            let request = c.req(ReceiverStream::new(rx));
            // Answered with headers at once: the server has taken the call.
            let opened = c.legacy.clone().stream_response_tokens(request).await;
            let mut acks = opened.unwrap().into_inner();
            Box::pin(async move {
                let _open = tx;
                acks.message().await.expect_err("answered")
            })
        }
    }
}

/// Every RPC of `api` while the server shuts down: in its first phase, held open by
/// [`hold_shutdown_open`], and in its second, once the last producer has let go.
async fn every_rpc_answers_while_the_server_shuts_down(api: Api) {
    // This test's server runs on this thread: its metrics are recorded here.
    let recorder = PrometheusBuilder::new().build_recorder();
    let metrics = recorder.handle();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.server.shutdown_timeout = Duration::from_secs(60); // the held producer decides
    let (server, c) = clients_of(TestServer::start_with_http(config.clone()).await).await;
    let readyz = format!("http://{}/readyz", server.http_addr.unwrap());
    let case = "server shutting down";
    let row = |rpc| api.row(rpc, case);
    // First, while no other StreamResponseTokens call is counted.
    let held = hold_shutdown_open(&c, server.url(), &metrics).await;
    let done = c.produce(api, b"done", "done", None).await.unwrap();
    done.complete().await.unwrap();
    let (producer, reader) = c.live(api, b"kept", "cut short").await;
    let (_doomed, _) = c.live(api, b"doomed", "doomed").await;
    let waiting = waiting_call(&c, api).await;
    let endpoint = Endpoint::from_shared(server.url()).unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(endpoint.connect_lazy());
    let stopping = tokio::spawn(server.stop());

    // The first phase: producers are told, and every call is still answered.
    let shutting_down = (Code::Unavailable, "the server is shutting down");
    let said = producer.told().await.unwrap();
    let row_live = api.row(Rpc::Record, "server shutting down (a live producer)");
    said.is(RecordStatus::Error, shutting_down.1, 9, &row_live);
    let request = tonic_health::pb::HealthCheckRequest::default();
    let serving = health.clone().check(request).await.unwrap();
    let serving = serving.into_inner().status;
    assert_eq!(serving, ServingStatus::NotServing as i32, "health, {case}");
    let ready = reqwest::get(&readyz).await.unwrap();
    assert_eq!(ready.status().as_u16(), 503, "/readyz, {case}");
    let why = ready.text().await.unwrap();
    assert_eq!(why, "not ready: shutting down\n", "/readyz, {case}");
    assert!(c.is_enabled(api).await.unwrap(), "{}", row(Rpc::IsEnabled));
    // Recordings left detached for their producers stay live, to be resumed after a restart.
    let listed = c.check(api, &[b"kept", b"doomed", b"done"]).await.unwrap();
    assert_eq!(listed, [&b"kept"[..], b"doomed"], "{}", row(Rpc::Check));
    let refusal = refused(c.produce(api, b"new", "new", None).await).await;
    let refusal = (refusal.code(), refusal.message());
    let row_new = api.row(Rpc::Record, "server shutting down (a new call)");
    assert_eq!(refusal, shutting_down, "{row_new}");
    let replay = c.replay(api, b"done").await.unwrap().end().await;
    replay.is(ended("done", "completed"), &row(Rpc::Replay));
    let mut late_reader = c.replay(api, b"kept").await.unwrap();
    late_reader.read("cut short").await;
    let accepted = c.cancel(api, b"doomed").await.unwrap();
    assert!(accepted, "{}", row(Rpc::Cancel));

    // Once the last producer has let go, calls still waiting for a first message end, and so
    // do replays, each told where to replay from.
    drop(held);
    let waited = tokio::time::timeout(WAIT, waiting).await.unwrap();
    let waited = (waited.code(), waited.message());
    let row_waiting = api.row(Rpc::Record, "server shutting down (no first message)");
    assert_eq!(waited, shutting_down, "{row_waiting}");
    for reader in [reader, late_reader] {
        let ended = reader.end().await;
        let offset = ended.trailer("tapedeck-offset");
        let got = (ended.text.as_str(), ended.status.code(), offset);
        let want = ("", Code::Unavailable, Some("9"));
        assert_eq!(got, want, "{}", row(Rpc::Replay));
        let message = ended.status.message();
        assert!(message.contains("replay again from offset 9"), "{message}");
    }
    stopping.await.unwrap();

    // After the restart the producer resumes from the offset it was told.
    let (server, c) = serve(config).await;
    let resumed = c.produce(api, b"kept", ", resumed", Some(9)).await.unwrap();
    let row = api.row(
        Rpc::Record,
        "server shutting down (resumed after a restart)",
    );
    let said = resumed.complete().await.unwrap();
    said.is(RecordStatus::Success, "", 18, &row);
    let replay = c.replay(api, b"kept").await.unwrap().end().await;
    replay.is(ended("cut short, resumed", "completed"), &row);
    server.stop().await;
}

#[tokio::test]
async fn every_current_rpc_answers_as_the_table_says_while_the_server_shuts_down() {
    every_rpc_answers_while_the_server_shuts_down(Api::Current).await;
}

#[tokio::test]
async fn every_legacy_rpc_answers_as_the_table_says_while_the_server_shuts_down() {
    every_rpc_answers_while_the_server_shuts_down(Api::Legacy).await;
}
