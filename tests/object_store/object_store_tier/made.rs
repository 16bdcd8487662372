//! The recordings the lost-disk test makes: gRPC recordings that end every way a producer can
//! end one (completed on either API, with their own retention, cancelled, interrupted), and
//! Durable Streams streams made over HTTP (JSON, bytes, a fork); and what each must hold.
use futures::StreamExt;
use reqwest::StatusCode;
use tapedeck::pb::tapedeck::RecordingStatus;
use tapedeck::pb::{CancelRecordRequest, RecordRequest, RecordStatus};

use super::faces::{Faces, Instance};
use crate::common::*;

/// gRPC recordings being made at once.
const AT_ONCE: usize = 32;
/// The retention the recordings that ask for their own ask for, in seconds.
const OWN_RETENTION_S: u64 = 7200;

/// What a recording is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    /// Made over gRPC: a text recording.
    Grpc,
    /// An `application/json` stream made over HTTP.
    Json,
    /// An `application/octet-stream` stream made over HTTP.
    Bytes,
    /// A `text/plain` stream made over HTTP.
    Text,
    /// A text stream made over HTTP, forked from another at an offset.
    Fork,
}

/// One recording as the test made it.
#[derive(Debug, Clone)]
pub(crate) struct Made {
    pub(crate) id: Vec<u8>,
    /// Its stream path over HTTP.
    pub(crate) path: String,
    pub(crate) kind: Kind,
    pub(crate) status: RecordingStatus,
    /// Its chunks as sent (for a fork, only its own).
    pub(crate) chunks: Vec<Vec<u8>>,
    /// What a catch-up read from the start answers.
    pub(crate) body: Vec<u8>,
    /// A byte offset in its middle (on a character boundary).
    pub(crate) middle: u64,
}

impl Made {
    /// Checks what an instance that has it serves against what was made (before comparing
    /// that instance with others).
    pub(crate) fn check(&self, faces: &Faces) {
        let name = &self.path;
        let get = faces
            .get
            .as_ref()
            .unwrap_or_else(|e| panic!("{name}: Get: {e:?}"));
        assert_eq!(get.status(), self.status, "{name}");
        let total = self.body.len() as u64;
        // A fork's row counts only its own bytes, not those it inherits (its first chunk here).
        let own = match self.kind {
            Kind::Fork => total - self.chunks[0].len() as u64,
            _ => total,
        };
        assert_eq!(get.byte_length, own, "{name}");
        assert_eq!(faces.catch_up.status, StatusCode::OK, "{name}");
        assert_eq!(faces.catch_up.closed.as_deref(), Some("true"), "{name}");
        let rest = faces.rest.as_ref().expect("every face read");
        assert_eq!(rest.head.status, StatusCode::OK, "{name}");
        assert_eq!(rest.head.closed.as_deref(), Some("true"), "{name}");
        assert_eq!(rest.head.next_offset, Some(http_offset(total)), "{name}");
        match self.kind {
            Kind::Json => {
                let body: serde_json::Value = serde_json::from_slice(&faces.catch_up.body)
                    .unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {:?}", faces.catch_up));
                assert_eq!(body, json_messages(), "{name}");
            }
            _ => assert_eq!(faces.catch_up.body, self.body, "{name}"),
        }
        assert_eq!(
            rest.catch_up_from_middle.next_offset,
            Some(http_offset(total)),
            "{name}"
        );
        if self.kind != Kind::Grpc {
            return;
        }
        assert_eq!(get.chunk_count, self.chunks.len() as u64, "{name}");
        let text = String::from_utf8(self.body.clone()).unwrap();
        let replay = faces.replay.as_ref().unwrap();
        assert_eq!(replay.text, text, "{name}");
        assert_eq!(replay.status.as_deref(), Some(status_name(self.status)));
        assert_eq!(replay.end_offset, Some(total), "{name}");
        let from_middle = rest.replay_from_middle.as_ref().unwrap();
        assert_eq!(from_middle.text, text[self.middle as usize..], "{name}");
        let chunks: Vec<&[u8]> = rest
            .chunked
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.0.as_bytes())
            .collect();
        let sent: Vec<&[u8]> = self.chunks.iter().map(Vec::as_slice).collect();
        assert_eq!(chunks, sent, "{name}: chunk boundaries");
        let legacy: String = rest
            .legacy
            .as_ref()
            .unwrap()
            .iter()
            .map(|t| t.0.as_str())
            .collect();
        assert_eq!(legacy, text, "{name}");
        assert_eq!(
            rest.catch_up_from_middle.body,
            self.body[self.middle as usize..]
        );
        if self.status == RecordingStatus::Interrupted {
            assert!(!get.end_message.is_empty(), "{name}: {get:?}");
        }
    }
}

/// A byte offset as the HTTP face writes it.
pub(crate) fn http_offset(offset: u64) -> String {
    format!("0000000000000000_{offset:016}")
}

fn status_name(status: RecordingStatus) -> &'static str {
    match status {
        RecordingStatus::Completed => "completed",
        RecordingStatus::Cancelled => "cancelled",
        RecordingStatus::Interrupted => "interrupted",
        other => panic!("no recording here ends {other:?}"),
    }
}

/// Chunk `j` of recording `i`: ASCII first (so that one byte in is a character boundary),
/// every other one with non-ASCII text and a CRLF.
fn chunk(i: usize, j: usize) -> String {
    match j % 2 {
        0 => format!("r{i}.{j} plain; "),
        _ => format!("r{i}.{j} Grüße, 🦀 ünïcödé\r\n"),
    }
}

/// Makes `count` gRPC recordings on `on`, several at once, ending each a different way.
pub(crate) async fn make_grpc(on: &Instance, count: usize) -> Vec<Made> {
    futures::stream::iter(0..count)
        .map(|i| make_one(on, i))
        .buffer_unordered(AT_ONCE)
        .collect()
        .await
}

async fn make_one(on: &Instance, i: usize) -> Made {
    let path = format!("lost-{i:03}");
    let id = path.clone().into_bytes();
    let chunks: Vec<String> = (0..2 + i % 4).map(|j| chunk(i, j)).collect();
    let body = chunks.concat();
    let status = match i % 5 {
        0 => {
            let texts: Vec<&str> = chunks.iter().map(String::as_str).collect();
            record_all(&on.recorder, &id, &texts).await;
            RecordingStatus::Completed
        }
        1 => {
            let (last, first) = chunks.split_last().unwrap();
            let mut producer = LegacyProducer::start(&on.resumer, &id, &first[0]).await;
            for text in &first[1..] {
                producer.send(b"", text, false).await;
            }
            producer.send(b"", last, true).await;
            for _ in &chunks {
                assert!(producer.ack().await.success, "{path}");
            }
            producer.closed().await;
            RecordingStatus::Completed
        }
        2 => {
            let first = RecordRequest {
                conversation_id: id.clone(),
                retention_seconds: OWN_RETENTION_S,
                ..Default::default()
            };
            let recording = Recording::open_with(&on.recorder, first).await;
            for text in &chunks {
                recording.send(text).await;
            }
            let answer = recording.complete().await.unwrap();
            assert_eq!(answer.status, RecordStatus::Success as i32, "{path}");
            RecordingStatus::Completed
        }
        ending => {
            let recording = Recording::open(&on.recorder, &id).await;
            for text in &chunks {
                recording.send(text).await;
            }
            // Every chunk is stored before it ends: a live replay has read them all.
            let mut live = replay_when_live(&on.recorder, &id, 0).await.unwrap();
            let mut seen = String::new();
            tokio::time::timeout(WAIT, async {
                while seen.len() < body.len() {
                    seen.push_str(&live.message().await.unwrap().unwrap().content);
                }
            })
            .await
            .expect("the chunks were not stored in time");
            let status = if ending == 3 {
                let cancel = CancelRecordRequest {
                    conversation_id: id.clone(),
                };
                let accepted = on.recorder.clone().cancel(cancel).await.unwrap();
                assert!(accepted.into_inner().accepted, "{path}");
                let answer = recording.answer().await.unwrap();
                assert_eq!(answer.status, RecordStatus::Cancelled as i32, "{path}");
                RecordingStatus::Cancelled
            } else {
                // The producer goes away without completing; with no grace period, its
                // recording is interrupted at once.
                let Recording { tx, answer } = recording;
                drop(tx);
                let _ = tokio::time::timeout(WAIT, answer).await.expect("no answer");
                RecordingStatus::Interrupted
            };
            let end = read_all(live).await.unwrap();
            assert_eq!(end.status.as_deref(), Some(status_name(status)), "{path}");
            status
        }
    };
    Made {
        id,
        path,
        kind: Kind::Grpc,
        status,
        middle: chunks[0].len() as u64 + 1,
        chunks: chunks.into_iter().map(String::into_bytes).collect(),
        body: body.into_bytes(),
    }
}

/// The messages of the JSON stream, as one array.
fn json_messages() -> serde_json::Value {
    serde_json::json!([{"n": 1, "s": "ü"}, {"n": 2}, {"n": 3, "s": "🦀"}, {"n": 4}])
}

/// The offset a write's answer names.
fn next_offset(response: &reqwest::Response) -> u64 {
    let header = response.headers()["stream-next-offset"].to_str().unwrap();
    header.rsplit('_').next().unwrap().parse().unwrap()
}

/// Sends one write and checks its status; returns the next offset it names.
async fn write(request: reqwest::RequestBuilder, expected: StatusCode) -> u64 {
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), expected, "{response:?}");
    next_offset(&response)
}

/// Makes the HTTP streams on `on`: a JSON stream, a byte stream, and a text stream with a
/// fork of it, each closed.
pub(crate) async fn make_streams(on: &Instance) -> Vec<Made> {
    let url = |path: &str| format!("{}/{path}", on.streams);
    let (http, closed) = (&on.http, "stream-closed");
    let mut made = Vec::new();

    let json = url("json-stream");
    let with_type = |r: reqwest::RequestBuilder| r.header("content-type", "application/json");
    write(with_type(http.put(&json)), StatusCode::CREATED).await;
    let first = r#"{"n":1,"s":"ü"}"#;
    let middle = write(
        with_type(http.post(&json)).body(first),
        StatusCode::NO_CONTENT,
    )
    .await;
    let array = r#"[{"n":2},{"n":3,"s":"🦀"}]"#;
    write(
        with_type(http.post(&json)).body(array),
        StatusCode::NO_CONTENT,
    )
    .await;
    let last = with_type(http.post(&json))
        .header(closed, "true")
        .body(r#"{"n":4}"#);
    let total = write(last, StatusCode::NO_CONTENT).await;
    made.push(stream("json-stream", Kind::Json, Vec::new(), total, middle));

    let bytes_url = url("byte-stream");
    let parts: Vec<Vec<u8>> = vec![
        (0..=255).collect(),
        (0..=255).rev().cycle().take(700).collect(),
        vec![0, 0, 0xff, b'\r', b'\n', 0x80],
    ];
    let octets = |r: reqwest::RequestBuilder| r.header("content-type", "application/octet-stream");
    let middle = write(
        octets(http.put(&bytes_url)).body(parts[0].clone()),
        StatusCode::CREATED,
    )
    .await;
    write(
        octets(http.post(&bytes_url)).body(parts[1].clone()),
        StatusCode::NO_CONTENT,
    )
    .await;
    let last = octets(http.post(&bytes_url))
        .header(closed, "true")
        .body(parts[2].clone());
    write(last, StatusCode::NO_CONTENT).await;
    made.push(stream("byte-stream", Kind::Bytes, parts.clone(), 0, middle));

    let source = url("fork-source");
    let text = |r: reqwest::RequestBuilder| r.header("content-type", "text/plain");
    let parts = ["source: Grüße ", "more source 🦀 ", "end of source\r\n"];
    let fork_at = write(text(http.put(&source)).body(parts[0]), StatusCode::CREATED).await;
    write(
        text(http.post(&source)).body(parts[1]),
        StatusCode::NO_CONTENT,
    )
    .await;
    let last = text(http.post(&source))
        .header(closed, "true")
        .body(parts[2]);
    write(last, StatusCode::NO_CONTENT).await;
    let chunks = parts.map(|p| p.as_bytes().to_vec()).to_vec();
    made.push(stream("fork-source", Kind::Text, chunks, 0, fork_at + 2));

    let fork = url("fork");
    let create = http
        .put(&fork)
        .header("stream-forked-from", "fork-source")
        .header("stream-fork-offset", http_offset(fork_at));
    write(create, StatusCode::CREATED).await;
    let own = ["fork's own 🦀 ", "and its end"];
    write(text(http.post(&fork)).body(own[0]), StatusCode::NO_CONTENT).await;
    write(
        text(http.post(&fork)).header(closed, "true").body(own[1]),
        StatusCode::NO_CONTENT,
    )
    .await;
    let mut chunks = vec![parts[0].as_bytes().to_vec()];
    chunks.extend(own.map(|p| p.as_bytes().to_vec()));
    made.push(stream("fork", Kind::Fork, chunks, 0, fork_at + 2));
    made
}

/// A stream made over HTTP whose content is `chunks` (or, for JSON, [`json_messages`] in
/// `len` bytes), closed, read from `middle` in the middle.
fn stream(path: &str, kind: Kind, chunks: Vec<Vec<u8>>, len: u64, middle: u64) -> Made {
    let body = match kind {
        // Its stored form (one message per chunk) is the server's: only its length is known.
        Kind::Json => vec![0; len as usize],
        _ => chunks.concat(),
    };
    Made {
        id: path.as_bytes().to_vec(),
        path: path.to_string(),
        kind,
        status: RecordingStatus::Completed,
        chunks,
        body,
        middle,
    }
}
