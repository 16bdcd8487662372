//! The HTTP face (Durable Streams) against a real server on real sockets: one store behind
//! both faces, byte streams refused to gRPC's text replay, access control over HTTP (header
//! and `token` parameter), and streams, producer state and closure surviving a SIGKILL of the
//! real binary. The protocol itself is checked by its own conformance suite
//! (`scripts/conformance.sh`).
use crate::common;

use common::*;
use reqwest::StatusCode;
use tapedeck::access::{AccessConfig, Role, Secret};

const CLOSED: &str = "stream-closed";
const NEXT: &str = "stream-next-offset";

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

#[tokio::test]
async fn a_grpc_recording_reads_over_http_and_an_http_stream_replays_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let recorder = server.recorder().await;

    record_all(&recorder, b"chat-42", &["Hello", ", ", "world"]).await;
    let read = http()
        .get(server.stream_url("chat-42"))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(
        header(&read, "content-type").unwrap(),
        "text/plain; charset=utf-8"
    );
    assert_eq!(header(&read, CLOSED).as_deref(), Some("true"));
    assert_eq!(read.text().await.unwrap(), "Hello, world");

    let url = server.stream_url("made-over-http");
    let created = http()
        .put(&url)
        .header("content-type", "text/plain")
        .body("first ")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let appended = http()
        .post(&url)
        .header("content-type", "text/plain")
        .header(CLOSED, "true")
        .body("and last")
        .send()
        .await
        .unwrap();
    assert_eq!(appended.status(), StatusCode::NO_CONTENT);
    let replayed = replay_text(&recorder, b"made-over-http").await.unwrap();
    assert_eq!(replayed.text, "first and last");
    assert_eq!(replayed.status.as_deref(), Some("completed"));
    server.stop().await;
}

#[tokio::test]
async fn grpc_replay_of_a_byte_stream_names_its_content_type() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let bytes = vec![0xff, 0x00, 0xfe, 0x80];
    let created = http()
        .put(server.stream_url("blob"))
        .header("content-type", "application/x-protobuf")
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);

    let err = replay_text(&server.recorder().await, b"blob")
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(
        err.message().contains("application/x-protobuf"),
        "{}",
        err.message()
    );

    // The bytes themselves are intact over HTTP.
    let read = http().get(server.stream_url("blob")).send().await.unwrap();
    assert_eq!(read.bytes().await.unwrap().to_vec(), bytes);
    server.stop().await;
}

const SECRET: &str = "http-grant-secret-of-at-least-32-bytes";

/// A grant of `conversations`, signed with the server's secret.
fn grant(conversations: &[(&str, Role)]) -> String {
    common::grant(SECRET, conversations)
}

#[tokio::test]
async fn grants_open_streams_by_header_or_token_parameter_and_refusals_are_401_or_403() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.access = AccessConfig {
        jwt_secret: Some(Secret::new(SECRET)),
        ..AccessConfig::default()
    };
    let server = TestServer::start_with_http(config).await;
    let url = server.stream_url("private");
    let writer = grant(&[("private", Role::Writer)]);
    let reader = grant(&[("private", Role::Reader)]);
    let other = grant(&[("someone-else", Role::Writer)]);

    let anonymous = http().put(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let garbage = http()
        .get(&url)
        .bearer_auth("not-a-jwt")
        .send()
        .await
        .unwrap();
    assert_eq!(garbage.status(), StatusCode::UNAUTHORIZED);
    assert!(!garbage.text().await.unwrap().contains("not-a-jwt"));
    let elsewhere = http().put(&url).bearer_auth(&other).send().await.unwrap();
    assert_eq!(elsewhere.status(), StatusCode::FORBIDDEN);

    let created = http()
        .put(&url)
        .bearer_auth(&writer)
        .header("content-type", "text/plain")
        .body("secret words")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let read_only = http()
        .post(&url)
        .bearer_auth(&reader)
        .header("content-type", "text/plain")
        .body("more")
        .send()
        .await
        .unwrap();
    assert_eq!(read_only.status(), StatusCode::FORBIDDEN);

    // EventSource cannot set headers: the same grant rides in `token`.
    let by_token = http()
        .get(format!("{url}?offset=-1&token={reader}"))
        .send()
        .await
        .unwrap();
    assert_eq!(by_token.status(), StatusCode::OK);
    assert_eq!(by_token.text().await.unwrap(), "secret words");
    server.stop().await;
}

#[tokio::test]
async fn streams_producer_state_and_closure_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let http_addr = free_port().to_string();
    // No grace period: an open stream must not need one to survive the restart.
    let args = [
        "--http-listen",
        http_addr.as_str(),
        "--producer-grace",
        "0s",
    ];
    let server = BinaryServer::spawn(dir.path(), &args);
    let url = format!("http://{http_addr}/v1/stream/survivor");
    let closed_url = format!("http://{http_addr}/v1/stream/finished");
    let append = |seq: u64, body: &'static str| {
        http()
            .post(&url)
            .header("content-type", "text/plain")
            .header("producer-id", "agent-1")
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(body)
            .send()
    };
    let created = http()
        .put(&url)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(append(0, "one ").await.unwrap().status(), StatusCode::OK);
    assert_eq!(append(1, "two ").await.unwrap().status(), StatusCode::OK);
    let finished = http()
        .put(&closed_url)
        .header("content-type", "text/plain")
        .header(CLOSED, "true")
        .body("done")
        .send()
        .await
        .unwrap();
    assert_eq!(finished.status(), StatusCode::CREATED);
    server.kill();

    let _server = BinaryServer::spawn(dir.path(), &args);
    // The retry of an acknowledged append is a duplicate; the next one is new.
    let retried = append(1, "two ").await.unwrap();
    assert_eq!(retried.status(), StatusCode::NO_CONTENT);
    assert_eq!(append(2, "three").await.unwrap().status(), StatusCode::OK);
    let read = http().get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(header(&read, CLOSED), None, "the stream is still open");
    let next = header(&read, NEXT).unwrap();
    assert_eq!(read.text().await.unwrap(), "one two three");
    assert!(next.ends_with("0013"), "{next}");

    let closed = http().get(&closed_url).send().await.unwrap();
    assert_eq!(header(&closed, CLOSED).as_deref(), Some("true"));
    assert_eq!(closed.text().await.unwrap(), "done");
    let refused = http()
        .post(&closed_url)
        .header("content-type", "text/plain")
        .body("more")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn a_new_grpc_recording_replaces_an_http_stream_at_the_same_path() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let url = server.stream_url("shared-path");
    let created = http()
        .put(&url)
        .header("content-type", "application/json")
        .body(r#"[{"old":true}]"#)
        .header(CLOSED, "true")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let before = http().get(&url).send().await.unwrap();
    assert_eq!(before.text().await.unwrap(), r#"[{"old":true}]"#);

    record_all(&server.recorder().await, b"shared-path", &["new ", "text"]).await;
    let after = http().get(&url).send().await.unwrap();
    assert_eq!(
        header(&after, "content-type").unwrap(),
        "text/plain; charset=utf-8"
    );
    assert_eq!(after.text().await.unwrap(), "new text");
    server.stop().await;
}

#[tokio::test]
async fn appends_over_the_producers_limits_are_413_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.recorder.max_chunk_bytes = 1024;
    config.recorder.max_recording_bytes = 3000;
    let server = TestServer::start_with_http(config).await;
    let url = server.stream_url("bounded");
    let create = http()
        .put(&url)
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), StatusCode::CREATED);
    let post = |len: usize| {
        http()
            .post(&url)
            .header("content-type", "application/octet-stream")
            .body(vec![7u8; len])
            .send()
    };
    let big = post(1025).await.unwrap();
    assert_eq!(big.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(big.text().await.unwrap().contains("--max-chunk-bytes"));
    for _ in 0..2 {
        assert_eq!(post(1024).await.unwrap().status(), StatusCode::NO_CONTENT);
    }
    let over = post(1000).await.unwrap();
    assert_eq!(over.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(over.text().await.unwrap().contains("--max-recording-bytes"));
    let read = http().get(&url).send().await.unwrap();
    assert_eq!(read.bytes().await.unwrap().len(), 2048);
    server.stop().await;
}

/// Stream `source` holding "abc", and stream `fork` forked from it at its tail: their URLs.
async fn source_and_fork(server: &TestServer) -> (String, String) {
    let (source, fork) = (server.stream_url("source"), server.stream_url("fork"));
    let made = http()
        .put(&source)
        .header("content-type", "text/plain")
        .body("abc")
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), StatusCode::CREATED);
    let forked = http()
        .put(&fork)
        .header("stream-forked-from", "source")
        .send()
        .await
        .unwrap();
    assert_eq!(forked.status(), StatusCode::CREATED);
    (source, fork)
}

#[tokio::test]
async fn a_source_whose_fork_went_elsewhere_is_deleted_with_its_data_not_kept_for_it() {
    // The store decides a soft delete on the fork count it reads, not on the face's copy: a
    // fork deleted through the management API leaves no count behind to keep its source.
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let (source, _) = source_and_fork(&server).await;

    let mut recordings = recordings_client(server.addr).await;
    let request = tapedeck::pb::tapedeck::DeleteRecordingRequest {
        conversation_id: b"fork".to_vec(),
    };
    let deleted = recordings.delete(request).await.unwrap().into_inner();
    assert!(deleted.existed);

    let delete = http().delete(&source).send().await.unwrap();
    assert_eq!(delete.status(), StatusCode::NO_CONTENT);
    let head = http().head(&source).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::NOT_FOUND, "kept as if forked");
    let again = http()
        .put(&source)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(
        again.status(),
        StatusCode::CREATED,
        "the path is free again"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_append_that_rewrites_a_sources_row_keeps_its_fork_count() {
    // An idempotent producer's append writes the stream's row anew; the fork count in it is
    // the store's, so the source still stays for its fork when it is deleted.
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let (source, fork) = source_and_fork(&server).await;
    let appended = http()
        .post(&source)
        .header("content-type", "text/plain")
        .header("producer-id", "p")
        .header("producer-epoch", "0")
        .header("producer-seq", "0")
        .body("def")
        .send()
        .await
        .unwrap();
    assert_eq!(appended.status(), StatusCode::OK);

    let delete = http().delete(&source).send().await.unwrap();
    assert_eq!(delete.status(), StatusCode::NO_CONTENT);
    let head = http().head(&source).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::GONE, "kept for its fork");
    let read = http().get(&fork).send().await.unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(read.text().await.unwrap(), "abc");
    server.stop().await;
}

/// A reader catching up on a long stream gets megabytes per response, not a request per MiB:
/// 3 MiB written in 64 KiB appends come back whole in one response, with their length.
#[tokio::test]
async fn a_catch_up_read_carries_megabytes_in_one_response() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let url = server.stream_url("long-stream");
    let appends: Vec<Vec<u8>> = (0..48u8).map(|i| vec![i; 64 * 1024]).collect();
    let written = appends.concat();
    write_stream(&url, "application/octet-stream", appends).await;
    let read = http().get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(header(&read, "stream-up-to-date").as_deref(), Some("true"));
    assert_eq!(
        header(&read, "content-length"),
        Some(written.len().to_string())
    );
    assert!(read.bytes().await.unwrap() == written, "the bytes differ");
}

/// A catch-up response that fills its room (8 MiB) exactly to the tail says it is up to date:
/// its reader needs no further request to learn that nothing follows. One more byte, and the
/// same response is not; the next one carries that byte and is. Filled exactly to a closed
/// stream's end, it says the stream is closed, and how it ended.
#[tokio::test]
async fn a_read_that_fills_its_room_to_the_tail_is_up_to_date() {
    const ROOM: usize = 8 * 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let post = |url: &str, body: Vec<u8>, close: bool| {
        let mut request = http()
            .post(url)
            .header("content-type", "application/octet-stream")
            .body(body);
        if close {
            request = request.header("stream-closed", "true");
        }
        request.send()
    };
    // Appends of `ROOM` bytes in all.
    let room = || (0..ROOM / (256 * 1024)).map(|_| vec![b'r'; 256 * 1024]);

    let url = server.stream_url("room-long");
    write_stream(&url, "application/octet-stream", room()).await;
    let read = http().get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(header(&read, "stream-up-to-date").as_deref(), Some("true"));
    assert_eq!(header(&read, "stream-closed"), None, "still open");
    let tag = header(&read, "etag").unwrap();
    assert_eq!(read.bytes().await.unwrap().len(), ROOM);
    // Revalidated unchanged: 304, with the caching the 200 had.
    let unchanged = http()
        .get(format!("{url}?offset=-1"))
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(unchanged.status(), StatusCode::NOT_MODIFIED);
    assert!(header(&unchanged, "cache-control").is_some_and(|c| c.contains("max-age")));

    // The same bytes with one more after them: not up to date, and not the same response
    // to a revalidation either.
    let appended = post(&url, b"!".to_vec(), false).await.unwrap();
    assert_eq!(appended.status(), StatusCode::NO_CONTENT);
    let read = http()
        .get(format!("{url}?offset=-1"))
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK, "revalidated as unchanged");
    assert_eq!(header(&read, "stream-up-to-date"), None, "one byte follows");
    let next = header(&read, "stream-next-offset").unwrap();
    assert_eq!(read.bytes().await.unwrap().len(), ROOM);
    let rest = http()
        .get(format!("{url}?offset={next}"))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&rest, "stream-up-to-date").as_deref(), Some("true"));
    assert_eq!(&rest.bytes().await.unwrap()[..], b"!");

    // Closed, a stream read exactly to its end says that too.
    let closed = server.stream_url("room-long-closed");
    write_stream(&closed, "application/octet-stream", room()).await;
    let closing = post(&closed, Vec::new(), true).await.unwrap();
    assert_eq!(closing.status(), StatusCode::NO_CONTENT);
    let read = http()
        .get(format!("{closed}?offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&read, "stream-up-to-date").as_deref(), Some("true"));
    assert_eq!(header(&read, "stream-closed").as_deref(), Some("true"));
    assert_eq!(
        header(&read, "tapedeck-ended-as").as_deref(),
        Some("completed")
    );
    assert_eq!(read.bytes().await.unwrap().len(), ROOM);

    // In JSON mode a read takes whole messages, so the last one may end past the room: at a
    // closed stream's end, that read says it is up to date and closed.
    let json = server.stream_url("room-long-json");
    let message = format!("\"{}\"", "j".repeat(950 * 1024)).into_bytes();
    write_stream(&json, "application/json", vec![message; 9]).await;
    let closing = http()
        .post(&json)
        .header("content-type", "application/json")
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(closing.status(), StatusCode::NO_CONTENT);
    let read = http()
        .get(format!("{json}?offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&read, "stream-up-to-date").as_deref(), Some("true"));
    assert_eq!(header(&read, "stream-closed").as_deref(), Some("true"));
    let messages: Vec<String> = serde_json::from_slice(&read.bytes().await.unwrap()).unwrap();
    assert_eq!(messages.len(), 9);
    server.stop().await;
}

/// Text its room cuts ends with whole characters: each response decodes on its own (as the
/// npm client's `text()` decodes it), and together they are what was written.
#[tokio::test]
async fn text_cut_by_a_reads_room_keeps_its_characters_whole() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let url = server.stream_url("euros");
    // One byte, then three-byte characters past 8 MiB: the room's end falls inside one.
    let euros = "€".repeat(349_525);
    let mut appends = vec![b"a".to_vec()];
    appends.extend((0..9).map(|_| euros.as_bytes().to_vec()));
    let written = String::from_utf8(appends.concat()).unwrap();
    write_stream(&url, "text/plain; charset=utf-8", appends).await;
    let (mut read, mut offset, mut responses) = (String::new(), "-1".to_string(), 0);
    loop {
        let response = http()
            .get(format!("{url}?offset={offset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let up_to_date = header(&response, "stream-up-to-date").is_some();
        offset = header(&response, "stream-next-offset").unwrap();
        let body = response.bytes().await.unwrap();
        let text = std::str::from_utf8(&body).expect("each response is whole characters");
        read.push_str(text);
        responses += 1;
        if up_to_date {
            break;
        }
    }
    assert!(responses > 1, "the room cut the text");
    assert!(read == written, "the text differs");
    server.stop().await;
}

/// An SSE reader whose first event is full (256 KiB, all that is committed) is told it is up
/// to date at once, by a control event of its own, not only when more data comes.
#[tokio::test]
async fn an_sse_reader_after_a_full_event_is_told_it_is_up_to_date() {
    const EVENT_BYTES: usize = 256 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_http(test_config(dir.path())).await;
    let url = server.stream_url("full-event");
    let appends = (0..EVENT_BYTES / (64 * 1024)).map(|_| vec![b'a'; 64 * 1024]);
    write_stream(&url, "text/plain", appends).await;
    let mut events = http()
        .get(format!("{url}?offset=-1&live=sse"))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    let mut got = String::new();
    let caught_up = tokio::time::timeout(WAIT, async {
        while let Some(piece) = events.chunk().await.unwrap() {
            got.push_str(&String::from_utf8_lossy(&piece));
            if got.contains("\"upToDate\":true") {
                return true;
            }
        }
        false
    })
    .await;
    let data: usize = got
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter(|data| !data.starts_with('{'))
        .map(str::len)
        .sum();
    assert_eq!(
        caught_up,
        Ok(true),
        "no upToDate control after {data} bytes"
    );
    assert_eq!(data, EVENT_BYTES);
    server.stop().await;
}

/// Creates the stream at `url` with `content_type`, and appends each of `appends` to it.
async fn write_stream(url: &str, content_type: &str, appends: impl IntoIterator<Item = Vec<u8>>) {
    let created = http()
        .put(url)
        .header("content-type", content_type)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    for append in appends {
        let appended = http()
            .post(url)
            .header("content-type", content_type)
            .body(append)
            .send()
            .await
            .unwrap();
        assert_eq!(appended.status(), StatusCode::NO_CONTENT);
    }
}
