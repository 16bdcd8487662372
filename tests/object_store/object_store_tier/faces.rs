//! Everything one instance answers about one recording, on every face, as one comparable
//! value: gRPC replay on the current API (from the start, from an offset, chunked), the
//! legacy replay, Get, and over HTTP catch-up reads (from the start, from an offset) and HEAD. Two instances serve a recording
//! alike when these are equal (but for where each says the recording is).
use reqwest::StatusCode;
use tapedeck::pb::tapedeck::{GetRecordingRequest, Location, Recording};
use tapedeck::pb::{ReplayRequest, ReplayResponseTokensRequest};
use tonic::Streaming;

use super::made::http_offset;
use crate::common::*;

/// A gRPC call's failure, as far as a client can see it.
pub(crate) type Refusal = (tonic::Code, String);

/// A current-API replay read to its end.
#[derive(Debug, PartialEq)]
pub(crate) struct Replay {
    pub(crate) text: String,
    pub(crate) offsets: Vec<i64>,
    /// The `tapedeck-status` trailer.
    pub(crate) status: Option<String>,
    /// The `tapedeck-offset` trailer.
    pub(crate) end_offset: Option<u64>,
}

/// One message of a chunked replay: `(content, end offset, chunk index, committed at)`.
pub(crate) type Chunk = (String, i64, u64, i64);

/// An HTTP answer: status, the headers the protocol defines for reads, and the body.
#[derive(Debug, PartialEq)]
pub(crate) struct HttpRead {
    pub(crate) status: StatusCode,
    pub(crate) content_type: Option<String>,
    pub(crate) next_offset: Option<String>,
    pub(crate) closed: Option<String>,
    pub(crate) up_to_date: Option<String>,
    pub(crate) body: Vec<u8>,
}

/// What an instance serves of one recording: on every face, or (`rest: None`) on the three
/// that a quicker look reads (Get, Replay from the start, HTTP GET from the start).
#[derive(Debug, PartialEq)]
pub(crate) struct Faces {
    /// Get, with `location` cleared (it is where the instance has it, compared apart).
    pub(crate) get: Result<Recording, Refusal>,
    pub(crate) location: Option<Location>,
    pub(crate) replay: Result<Replay, Refusal>,
    pub(crate) catch_up: HttpRead,
    pub(crate) rest: Option<Rest>,
}

/// The faces only a full look reads.
#[derive(Debug, PartialEq)]
pub(crate) struct Rest {
    pub(crate) replay_from_middle: Result<Replay, Refusal>,
    pub(crate) chunked: Result<Vec<Chunk>, Refusal>,
    pub(crate) legacy: Result<Vec<(String, i64)>, Refusal>,
    pub(crate) catch_up_from_middle: HttpRead,
    pub(crate) head: HttpRead,
}

impl Faces {
    /// The faces on which `self` and `other` differ (but for `location`): each one's name and
    /// both answers, shortened.
    pub(crate) fn differences(&self, other: &Faces) -> Vec<String> {
        fn differ<T: std::fmt::Debug + PartialEq>(name: &str, a: &T, b: &T) -> Option<String> {
            let short = |v: &T| format!("{v:?}").chars().take(600).collect::<String>();
            (a != b).then(|| format!("{name}:\n    {}\n  vs {}", short(a), short(b)))
        }
        let mut differences = vec![
            differ("Get", &self.get, &other.get),
            differ("Replay from 0", &self.replay, &other.replay),
            differ("HTTP GET from -1", &self.catch_up, &other.catch_up),
        ];
        if let (Some(a), Some(b)) = (&self.rest, &other.rest) {
            differences.extend([
                differ(
                    "Replay from the middle",
                    &a.replay_from_middle,
                    &b.replay_from_middle,
                ),
                differ("chunked Replay", &a.chunked, &b.chunked),
                differ("legacy replay", &a.legacy, &b.legacy),
                differ(
                    "HTTP GET from the middle",
                    &a.catch_up_from_middle,
                    &b.catch_up_from_middle,
                ),
                differ("HTTP HEAD", &a.head, &b.head),
            ]);
        }
        differences.into_iter().flatten().collect()
    }
}

/// The clients of one instance.
#[derive(Clone)]
pub(crate) struct Instance {
    pub(crate) recorder: RecorderClient,
    pub(crate) resumer: ResumerClient,
    pub(crate) recordings: RecordingsClient,
    pub(crate) http: reqwest::Client,
    /// `http://HOST:PORT/v1/stream`.
    pub(crate) streams: String,
}

impl Instance {
    pub(crate) async fn of(server: &BinaryServer, http: std::net::SocketAddr) -> Instance {
        Instance {
            recorder: server.recorder().await,
            resumer: server.resumer().await,
            recordings: server.recordings().await,
            http: reqwest::Client::new(),
            streams: format!("http://{http}/v1/stream"),
        }
    }

    /// Get, as it answered.
    pub(crate) async fn get(&self, id: &[u8]) -> Result<Recording, tonic::Status> {
        self.recordings
            .clone()
            .get(GetRecordingRequest {
                conversation_id: id.to_vec(),
            })
            .await
            .map(|r| r.into_inner())
    }

    /// What it serves of `id` (whose stream path over HTTP is `path`) on every face (`every`)
    /// or on the quick look's three; `middle` is a byte offset inside the recording.
    pub(crate) async fn faces(&self, id: &[u8], path: &str, middle: u64, every: bool) -> Faces {
        let get = self.get(id).await.map_err(refusal);
        let location = get.as_ref().ok().map(|r| r.location());
        let get = get.map(|mut r| {
            r.location = Location::Unspecified as i32;
            r
        });
        let rest = match every {
            true => Some(Rest {
                replay_from_middle: self.replay(id, middle as i64).await,
                chunked: self.chunked(id).await,
                legacy: self.legacy(id).await,
                catch_up_from_middle: self.read(path, &http_offset(middle), false).await,
                head: self.read(path, "", true).await,
            }),
            false => None,
        };
        Faces {
            get,
            location,
            replay: self.replay(id, 0).await,
            catch_up: self.read(path, "-1", false).await,
            rest,
        }
    }

    async fn replay(&self, id: &[u8], offset: i64) -> Result<Replay, Refusal> {
        let replayed = async { read_all(replay_from(&self.recorder, id, offset).await?).await };
        let replayed = replayed.await.map_err(refusal)?;
        Ok(Replay {
            text: replayed.text,
            offsets: replayed.offsets,
            status: replayed.status,
            end_offset: replayed.end_offset,
        })
    }

    async fn chunked(&self, id: &[u8]) -> Result<Vec<Chunk>, Refusal> {
        let request = ReplayRequest {
            conversation_id: id.to_vec(),
            resume_offset: 0,
            chunked: true,
        };
        let stream = self
            .recorder
            .clone()
            .replay(request)
            .await
            .map_err(refusal)?;
        drain(stream.into_inner(), |m| {
            (m.content, m.offset, m.chunk_index, m.committed_at_ms)
        })
        .await
    }

    async fn legacy(&self, id: &[u8]) -> Result<Vec<(String, i64)>, Refusal> {
        let request = ReplayResponseTokensRequest {
            conversation_id: id.to_vec(),
            resume_position: 0,
        };
        let stream = self.resumer.clone().replay_response_tokens(request).await;
        drain(stream.map_err(refusal)?.into_inner(), |m| {
            (m.token, m.offset)
        })
        .await
    }

    /// A catch-up GET from `offset`, or a HEAD.
    async fn read(&self, path: &str, offset: &str, head: bool) -> HttpRead {
        let url = format!("{}/{path}", self.streams);
        let request = match head {
            true => self.http.head(url),
            false => self.http.get(url).query(&[("offset", offset)]),
        };
        let response = tokio::time::timeout(WAIT, request.send())
            .await
            .expect("no HTTP answer in time")
            .unwrap();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_string())
        };
        HttpRead {
            status: response.status(),
            content_type: header("content-type"),
            next_offset: header("stream-next-offset"),
            closed: header("stream-closed"),
            up_to_date: header("stream-up-to-date"),
            body: response.bytes().await.unwrap().to_vec(),
        }
    }
}

fn refusal(status: tonic::Status) -> Refusal {
    (status.code(), status.message().to_string())
}

/// Reads a server stream to its end (within [`WAIT`]), mapping each message.
async fn drain<M, T>(mut stream: Streaming<M>, map: impl Fn(M) -> T) -> Result<Vec<T>, Refusal> {
    tokio::time::timeout(WAIT, async {
        let mut out = Vec::new();
        while let Some(message) = stream.message().await.map_err(refusal)? {
            out.push(map(message));
        }
        Ok(out)
    })
    .await
    .expect("a replay did not end in time")
}
