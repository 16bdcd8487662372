//! The object-store tier's lifecycle, with the real binary against a real S3 server
//! (SeaweedFS): a SIGKILL after each step of a seal, an outage of the store, delete, and expiry
//! collected by instances other than the one that recorded; a bad `--object-store` refused.
use crate::common;

use std::ffi::OsStr;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::seaweed::Seaweed;
use common::*;
use prometheus_parse::Value;
use tapedeck::id::ConversationId;
use tapedeck::pb::tapedeck::{
    DeleteRecordingRequest, GetRecordingRequest, Location, Recording as RecordingRow,
    RecordingStatus,
};
use tempfile::TempDir;
use tonic::Code;

/// The prefix every test's objects go under, in the test's own bucket.
const PREFIX: &str = "lifecycle";
/// How long sealing may take once the object store is back: the sealer's longest backoff
/// (30 s) may have started just before the store returned, plus a normal wait.
const AFTER_OUTAGE: Duration = Duration::from_secs(30 + 15);

/// One instance of the binary on its own data dir, sealing into `s3` under [`PREFIX`].
struct Instance {
    server: BinaryServer,
    log: LogLines,
    /// Its own data dir; `None` when the test keeps the data dir (to restart on it).
    dir: Option<TempDir>,
}

impl Instance {
    /// Starts one on a new, empty data dir.
    fn fresh(s3: &Seaweed, args: &[&str], env: &[(&str, &str)]) -> Instance {
        let dir = TempDir::new().unwrap();
        let mut instance = Self::on(dir.path(), s3, args, env);
        instance.dir = Some(dir);
        instance
    }

    /// Starts one on `data_dir` (kept by the caller), with the object store's `AWS_*`
    /// variables and `env` set.
    fn on(data_dir: &Path, s3: &Seaweed, args: &[&str], env: &[(&str, &str)]) -> Instance {
        let url = s3.url(PREFIX);
        let mut all = vec!["--object-store", url.as_str()];
        all.extend_from_slice(args);
        let mut envs = s3.env();
        envs.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let (server, log) = BinaryServer::spawn_logged_with_env(data_dir, &all, &envs);
        Instance {
            server,
            log,
            dir: None,
        }
    }

    /// Get of `id` on the management API.
    async fn get(&self, id: &[u8]) -> Result<RecordingRow, tonic::Status> {
        self.server
            .recordings()
            .await
            .get(GetRecordingRequest {
                conversation_id: id.to_vec(),
            })
            .await
            .map(|r| r.into_inner())
    }

    /// Waits until Get of `id` says its bytes are kept at `location` (failing with the last
    /// row seen and the instance's log).
    async fn wait_location(&self, id: &[u8], location: Location, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let row = self.get(id).await;
            if row
                .as_ref()
                .is_ok_and(|row| row.location == location as i32)
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} not at {location:?} within {within:?}: {row:?}\nlog:\n{}",
                String::from_utf8_lossy(id),
                self.log.lock().unwrap().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the log has a line for which `wanted` holds, and returns it.
    async fn wait_log(&self, what: &str, wanted: impl Fn(&serde_json::Value) -> bool) -> String {
        eventually(what, WAIT, || async {
            let lines = self.log.lock().unwrap();
            lines
                .iter()
                .find(|line| {
                    serde_json::from_str::<serde_json::Value>(line).is_ok_and(|line| wanted(&line))
                })
                .cloned()
        })
        .await
    }

    /// Whether any log line so far contains `text`.
    fn logged(&self, text: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(text))
    }
}

/// Retries `attempt` until it returns `Some`, for at most `within` (then the test fails,
/// naming `what`).
async fn eventually<T, F: Future<Output = Option<T>>>(
    what: &str,
    within: Duration,
    mut attempt: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = attempt().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Tokens of a recording of `id`: a few hundred, of varied sizes, some not ASCII.
fn tokens(id: &str) -> Vec<String> {
    (0..300)
        .map(|i| match i % 4 {
            0 => format!("{id}:{i} "),
            1 => "é€😀 ".repeat(i % 7 + 1),
            2 => "x".repeat(i * 13 % 1000),
            _ => format!("[{i}]\n"),
        })
        .collect()
}

/// Records `id` as one completed recording of [`tokens`]; returns the text.
async fn record(server: &BinaryServer, id: &str) -> String {
    let tokens = tokens(id);
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    record_all(&server.recorder().await, id.as_bytes(), &refs).await;
    tokens.concat()
}

/// The keys of the objects holding `id`'s sealed copies.
async fn copies(s3: &Seaweed, id: &str) -> Vec<String> {
    s3.keys(&format!("{PREFIX}/recordings/{}", hex(id))).await
}

/// The keys of the object naming `id`'s newest sealed copy (none or one).
async fn named_newest(s3: &Seaweed, id: &str) -> Vec<String> {
    let name = format!("{PREFIX}/newest/{}", hex(id));
    let mut named = s3.keys(&format!("{PREFIX}/newest")).await;
    named.retain(|key| *key == name);
    named
}

/// `id`'s storage key as the object names spell it.
fn hex(id: &str) -> String {
    format!(
        "{:032x}",
        ConversationId::parse(id.as_bytes()).unwrap().key()
    )
}

/// Checks that a replay of `id` on `server` failed with NOT_FOUND for `reason`.
async fn assert_gone(server: &BinaryServer, id: &str, reason: &str) {
    let err = match replay_text(&server.recorder().await, id.as_bytes()).await {
        Ok(replayed) => panic!("{id} replayed: {replayed:?}"),
        Err(err) => err,
    };
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert_eq!(
        err.metadata()
            .get("tapedeck-reason")
            .and_then(|v| v.to_str().ok()),
        Some(reason),
        "{err:?}"
    );
    assert!(err.message().starts_with(&format!("{reason}:")), "{err:?}");
}

/// The value of gauge `name` at `addr`, if it is exported.
fn gauge(addr: SocketAddr, name: &str) -> Option<f64> {
    scrape(addr)
        .samples
        .into_iter()
        .find(|s| s.metric == name)
        .and_then(|s| match s.value {
            Value::Gauge(v) | Value::Untyped(v) => Some(v),
            _ => None,
        })
}

// ---- Crash during sealing -------------------------------------------------------------------

/// A SIGKILL right after seal step `step` (`TAPEDECK_TEST_SEAL_STOP`), with local copies
/// dropped as soon as they are sealed: after a restart without the stop, the recording is
/// whole (byte-exact, same chunk offsets), sealed (only the object store holds it) and sealed
/// once (one object, one expiry marker). Returns the S3 server, the data dir, the id and what
/// was replayed, for the caller's own checks.
async fn crash_after(step: &str) -> (Seaweed, TempDir, &'static str, Replayed) {
    let s3 = Seaweed::start();
    let dir = TempDir::new().unwrap();
    let id = "crash-during-seal";
    let zero = ["--local-retention", "0s"];
    let a = Instance::on(dir.path(), &s3, &zero, &[("TAPEDECK_TEST_SEAL_STOP", step)]);
    let text = record(&a.server, id).await;
    let before = replay_text(&a.server.recorder().await, id.as_bytes())
        .await
        .unwrap();
    assert_eq!(before.text, text);

    a.wait_log("the seal to stop for the test", |line| {
        line["fields"]["message"] == "seal stopped for a test" && line["fields"]["step"] == step
    })
    .await;
    // Where the crash leaves it: written to the object store at every step; marked (and so
    // its local chunks gone) only after the last one.
    assert_eq!(copies(&s3, id).await.len(), 1);
    let row = a.get(id.as_bytes()).await.unwrap();
    let expected = match step {
        "marked" => Location::ObjectStore,
        _ => Location::Local,
    };
    assert_eq!(row.location, expected as i32, "{row:?}");
    a.server.kill();

    let b = Instance::on(dir.path(), &s3, &zero, &[]);
    b.wait_location(id.as_bytes(), Location::ObjectStore, WAIT)
        .await;
    let after = replay_text(&b.server.recorder().await, id.as_bytes())
        .await
        .unwrap();
    assert_eq!(after.text, text, "not byte-exact after the restart");
    assert_eq!(after.offsets, before.offsets);
    assert_eq!(after.status, before.status);
    assert_eq!(after.end_offset, before.end_offset);
    let row = b.get(id.as_bytes()).await.unwrap();
    assert_eq!(row.status, RecordingStatus::Completed as i32, "{row:?}");
    assert_eq!(row.byte_length, text.len() as u64, "{row:?}");

    let copies = copies(&s3, id).await;
    assert_eq!(copies.len(), 1, "sealed more than once: {copies:?}");
    let markers: Vec<String> = s3
        .keys(&format!("{PREFIX}/expiry"))
        .await
        .into_iter()
        .filter(|key| key.contains(&hex(id)))
        .collect();
    assert_eq!(markers.len(), 1, "expiry markers: {markers:?}");
    assert!(!b.logged("seal stopped for a test"));
    b.server.kill();
    (s3, dir, id, after)
}

#[tokio::test]
async fn a_crash_after_the_upload_reseals_the_recording_once() {
    crash_after("uploaded").await;
}

#[tokio::test]
async fn a_crash_after_the_verify_reseals_the_recording_once() {
    crash_after("verified").await;
}

/// After the mark, the local chunks were already gone: the object store is the only copy, and
/// an instance that lost the data dir as well serves it from there.
#[tokio::test]
async fn a_crash_after_the_mark_leaves_the_recording_served_from_the_object_store() {
    let (s3, dir, id, replayed) = crash_after("marked").await;
    drop(dir);
    let c = Instance::fresh(&s3, &[], &[]);
    c.wait_location(id.as_bytes(), Location::ObjectStore, WAIT)
        .await;
    let served = replay_text(&c.server.recorder().await, id.as_bytes())
        .await
        .unwrap();
    assert_eq!(served.text, replayed.text);
    assert_eq!(served.offsets, replayed.offsets);
    assert_eq!(copies(&s3, id).await.len(), 1);
}

// ---- Outage --------------------------------------------------------------------------------

/// With the object store down, producers record and end recordings as usual, and they replay
/// from local disk; the seal backlog shows; once the store is back every one is sealed and the
/// backlog is empty.
#[tokio::test]
async fn recordings_that_end_while_the_object_store_is_down_are_sealed_when_it_returns() {
    let mut s3 = Seaweed::start();
    let a = Instance::fresh(&s3, &["--metrics-listen", "127.0.0.1:0"], &[]);
    let metrics = a.server.metrics_addr.expect("it serves metrics");
    // One sealed before the outage: the sealer has talked to the store, and its connection is
    // what the outage breaks.
    let before = record(&a.server, "outage-before").await;
    a.wait_location(b"outage-before", Location::LocalAndObjectStore, WAIT)
        .await;

    s3.stop();
    let ids: Vec<String> = (0..5).map(|i| format!("outage-{i}")).collect();
    let mut recorded = Vec::new();
    for id in &ids {
        // A producer never waits on the object store: well within a few seconds, whatever
        // the sealer is doing.
        let text = tokio::time::timeout(Duration::from_secs(5), record(&a.server, id)).await;
        let text = text.unwrap_or_else(|_| panic!("recording {id} hung on the outage"));
        recorded.push((id.clone(), text));
    }
    let recorder = a.server.recorder().await;
    for (id, text) in &recorded {
        let replayed = replay_text(&recorder, id.as_bytes()).await.unwrap();
        assert_eq!(&replayed.text, text);
        let row = a.get(id.as_bytes()).await.unwrap();
        assert_eq!(row.location, Location::Local as i32, "{row:?}");
    }
    let backlog = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let backlog = gauge(metrics, "tapedeck_seal_backlog").unwrap_or(0.0);
            if backlog > 0.0 || std::time::Instant::now() >= deadline {
                return backlog;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    assert!(backlog > 0.0, "no seal backlog while the store is down");
    // Logged once the seal's own tries (and their timeouts) have failed.
    eventually("the sealer logs that it waits", WAIT, || async {
        a.logged("sealing waits for the object store").then_some(())
    })
    .await;
    // Still local: nothing was marked that is not in the store.
    for id in &ids {
        let row = a.get(id.as_bytes()).await.unwrap();
        assert_eq!(row.location, Location::Local as i32, "{row:?}");
    }

    s3.restart();
    for id in &ids {
        a.wait_location(id.as_bytes(), Location::LocalAndObjectStore, AFTER_OUTAGE)
            .await;
        assert_eq!(copies(&s3, id).await.len(), 1);
    }
    eventually("the backlog to empty", WAIT, || async {
        let backlog = tokio::task::spawn_blocking(move || gauge(metrics, "tapedeck_seal_backlog"))
            .await
            .unwrap();
        (backlog == Some(0.0)).then_some(())
    })
    .await;
    // Nothing lost: an instance on an empty dir reads each one from the object store.
    let b = Instance::fresh(&s3, &[], &[]);
    let recorder = b.server.recorder().await;
    recorded.push(("outage-before".to_string(), before));
    for (id, text) in &recorded {
        let replayed = replay_text(&recorder, id.as_bytes()).await.unwrap();
        assert_eq!(&replayed.text, text, "{id}");
    }
    assert!(!a.logged(s3.secret()) && !b.logged(s3.secret()));
}

/// A replay of a recording whose only copy is in the object store answers UNAVAILABLE, naming
/// the object store, while the store is down; once it is back, it reads.
#[tokio::test]
async fn a_recording_only_the_object_store_holds_is_unavailable_while_it_is_down() {
    let mut s3 = Seaweed::start();
    let a = Instance::fresh(&s3, &["--local-retention", "0s"], &[]);
    let id = "outage-remote-only";
    let text = record(&a.server, id).await;
    a.wait_location(id.as_bytes(), Location::ObjectStore, WAIT)
        .await;

    s3.stop();
    let recorder = a.server.recorder().await;
    let replay = tokio::time::timeout(WAIT, replay_text(&recorder, id.as_bytes()))
        .await
        .expect("the replay did not answer while the store is down");
    let err = replay.expect_err("replayed while the only copy is unreachable");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("object store"), "{err:?}");
    assert!(!err.message().contains(s3.secret()), "{err:?}");
    // Its row is local: Get answers, and says where the bytes are.
    let row = a.get(id.as_bytes()).await.unwrap();
    assert_eq!(row.location, Location::ObjectStore as i32, "{row:?}");
    // `tapedeck ls` lists what is local, and says what it could not reach.
    let server = a.server.addr.to_string();
    let ls = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
            .args(["ls", "--server", &server])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8(ls.stdout).unwrap(),
        String::from_utf8(ls.stderr).unwrap(),
    );
    assert!(ls.status.success(), "{stderr}");
    assert!(stdout.contains(id), "{stdout}");
    assert!(
        stderr.contains("the object store did not answer")
            && stderr.contains("the recordings only it holds are missing above"),
        "{stderr}"
    );

    // Back, it may answer 500 for a moment while its volume server rejoins ("try again
    // later", as the message says): the replay is asked again until it answers.
    s3.restart();
    let deadline = tokio::time::Instant::now() + WAIT;
    let replayed = loop {
        match replay_text(&recorder, id.as_bytes()).await {
            Ok(replayed) => break replayed,
            Err(err)
                if err.code() == Code::Unavailable && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => panic!("no replay once the object store is back: {err:?}"),
        }
    };
    assert_eq!(replayed.text, text);
}

// ---- Delete --------------------------------------------------------------------------------

/// A recording sealed by an instance that is gone, with its disk: another instance deletes it
/// from the object store, leaving a tombstone there, so that every instance (one on an empty
/// dir too) answers "deleted".
#[tokio::test]
async fn delete_by_another_instance_removes_the_copies_and_leaves_a_tombstone() {
    let s3 = Seaweed::start();
    let id = "delete-me";
    let kept = "keep-me";
    let a = Instance::fresh(&s3, &[], &[]);
    record(&a.server, id).await;
    let kept_text = record(&a.server, kept).await;
    for id in [id, kept] {
        a.wait_location(id.as_bytes(), Location::LocalAndObjectStore, WAIT)
            .await;
    }
    // The newest copy is named once it is marked sealed.
    eventually("the copy to be named the newest", WAIT, || async {
        (named_newest(&s3, id).await.len() == 1).then_some(())
    })
    .await;
    a.server.kill();
    drop(a.dir);

    let b = Instance::fresh(&s3, &[], &[]);
    let row = b.get(id.as_bytes()).await.unwrap();
    assert_eq!(row.location, Location::ObjectStore as i32, "{row:?}");
    let existed = b
        .server
        .recordings()
        .await
        .delete(DeleteRecordingRequest {
            conversation_id: id.as_bytes().to_vec(),
        })
        .await
        .unwrap()
        .into_inner()
        .existed;
    assert!(existed);

    assert_eq!(copies(&s3, id).await, Vec::<String>::new());
    assert_eq!(named_newest(&s3, id).await, Vec::<String>::new());
    assert_eq!(
        s3.keys(&format!("{PREFIX}/tombstones")).await,
        [format!("{PREFIX}/tombstones/{}", hex(id))]
    );
    assert_gone(&b.server, id, "deleted").await;
    let c = Instance::fresh(&s3, &[], &[]);
    assert_gone(&c.server, id, "deleted").await;
    let row = c.get(id.as_bytes()).await.unwrap();
    assert_eq!(row.status, RecordingStatus::Deleted as i32, "{row:?}");
    // Only that one: the other recording is still served.
    assert_eq!(copies(&s3, kept).await.len(), 1);
    let replayed = replay_text(&c.server.recorder().await, kept.as_bytes())
        .await
        .unwrap();
    assert_eq!(replayed.text, kept_text);
}

/// A reader finds a recording's newest copy by its name, in one request, not by a listing: with
/// the versioned copy taken out from under the name (which no seal, delete or collection
/// does), an instance with no data of its own still replays the recording whole.
#[tokio::test]
async fn a_reader_finds_the_newest_copy_by_its_name_without_a_listing() {
    let s3 = Seaweed::start();
    let id = "find-me-by-name";
    let a = Instance::fresh(&s3, &[], &[]);
    let text = record(&a.server, id).await;
    eventually("the copy to be named the newest", WAIT, || async {
        (named_newest(&s3, id).await.len() == 1).then_some(())
    })
    .await;
    a.server.kill();
    for copy in copies(&s3, id).await {
        use object_store::ObjectStore as _;
        let path = object_store::path::Path::from(copy.as_str());
        s3.store().delete(&path).await.unwrap();
    }

    let b = Instance::fresh(&s3, &[], &[]);
    let replayed = replay_text(&b.server.recorder().await, id.as_bytes())
        .await
        .unwrap();
    assert_eq!(replayed.text, text);
    assert_eq!(replayed.status.as_deref(), Some("completed"));
}

// ---- Expiry --------------------------------------------------------------------------------

/// A recording whose retention passes after its recorder and its disk are gone is collected
/// from the object store by the other instances, two of them at once: its copy and expiry
/// marker go, and every instance answers "expired".
#[tokio::test]
async fn expiry_is_collected_by_other_instances_after_the_recorder_is_gone() {
    let s3 = Seaweed::start();
    let id = "expire-me";
    let a = Instance::fresh(&s3, &["--retention", "2s"], &[]);
    record(&a.server, id).await;
    // A long-lived one from the same instance (its producer asked for an hour): not collected.
    let kept = "outlive-me";
    let kept_tokens = tokens(kept);
    let recording = Recording::open_with(
        &a.server.recorder().await,
        tapedeck::pb::RecordRequest {
            conversation_id: kept.as_bytes().to_vec(),
            retention_seconds: 3600,
            ..Default::default()
        },
    )
    .await;
    for token in &kept_tokens {
        recording.send(token).await;
    }
    recording.complete().await.unwrap();
    for id in [id, kept] {
        a.wait_location(id.as_bytes(), Location::LocalAndObjectStore, WAIT)
            .await;
    }
    assert_eq!(copies(&s3, id).await.len(), 1);
    eventually("the copy to be named the newest", WAIT, || async {
        (named_newest(&s3, id).await.len() == 1).then_some(())
    })
    .await;
    a.server.kill();
    drop(a.dir);

    let collectors = ["--gc-interval", "100ms"];
    let b = Instance::fresh(&s3, &collectors, &[]);
    let c = Instance::fresh(&s3, &collectors, &[]);
    eventually("the copy to be collected", WAIT, || async {
        copies(&s3, id).await.is_empty().then_some(())
    })
    .await;
    for instance in [&b, &c] {
        assert_gone(&instance.server, id, "expired").await;
        let row = instance.get(id.as_bytes()).await.unwrap();
        assert_eq!(row.status, RecordingStatus::Expired as i32, "{row:?}");
    }
    assert_eq!(named_newest(&s3, id).await, Vec::<String>::new());
    let tombstone = format!("{PREFIX}/tombstones/{}", hex(id));
    assert_eq!(s3.keys(&format!("{PREFIX}/tombstones")).await, [tombstone]);
    // Its expiry marker went with it; the long-lived one's stays, and so does its copy.
    let markers = s3.keys(&format!("{PREFIX}/expiry")).await;
    assert!(!markers.iter().any(|m| m.contains(&hex(id))), "{markers:?}");
    assert!(
        markers.iter().any(|m| m.contains(&hex(kept))),
        "{markers:?}"
    );
    let replayed = replay_text(&c.server.recorder().await, kept.as_bytes())
        .await
        .unwrap();
    assert_eq!(replayed.text, kept_tokens.concat());
    // Racing collectors did not trip over each other.
    for instance in [&b, &c] {
        assert!(!instance.logged("collecting expired copies in the object store failed"));
    }
}

// ---- Settings ------------------------------------------------------------------------------

/// `serve`'s arguments on a free port, with `data_dir` and `--object-store object_store`.
fn serve_args<'a>(data_dir: &'a Path, object_store: &'a str) -> Vec<&'a OsStr> {
    vec![
        OsStr::new("--listen"),
        OsStr::new("127.0.0.1:0"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
        OsStr::new("--object-store"),
        OsStr::new(object_store),
    ]
}

/// An `s3://` store with no credentials is refused at start-up, before the S3 client would
/// ask the cloud's metadata address for them (`--object-store-instance-credentials` asks for
/// that; not started here, as it would try to leave the machine).
#[test]
fn an_s3_store_without_credentials_is_refused_unless_instance_credentials_are_asked_for() {
    let dir = TempDir::new().unwrap();
    let data_dir = dir.path().join("data");
    let args = serve_args(&data_dir, "s3://bucket/prefix");
    let none = [("AWS_ACCESS_KEY_ID", ""), ("AWS_SECRET_ACCESS_KEY", "")];
    let (status, stderr) = run_binary_to_exit_with_env(&args, &none);
    assert_eq!(status.code(), Some(2), "{status}: {stderr}");
    assert!(!data_dir.exists(), "the data dir was created");
    assert_one_clear_line(
        &stderr,
        "no S3 credentials",
        "--object-store-instance-credentials (TAPEDECK_OBJECT_STORE_INSTANCE_CREDENTIALS)",
    );
}

/// A bad `--object-store` is refused as a bad command line (exit code 2, nothing created) with
/// one line naming the flag and its variable, and saying what it takes; the AWS secret never
/// shows.
#[test]
fn a_bad_object_store_url_is_refused_with_one_clear_line() {
    let secret = "a-secret-that-must-not-show";
    for url in [
        "ftp://x",
        "s3://",
        "s3:///prefix",
        "file://relative/path",
        "bucket",
    ] {
        let dir = TempDir::new().unwrap();
        let data_dir = dir.path().join("data");
        let args = serve_args(&data_dir, url);
        let (status, stderr) =
            run_binary_to_exit_with_env(&args, &[("AWS_SECRET_ACCESS_KEY", secret)]);
        assert_eq!(status.code(), Some(2), "{url} gave {status}: {stderr}");
        assert!(!data_dir.exists(), "{url}: the data dir was created");
        assert_one_clear_line(&stderr, "--object-store", "TAPEDECK_OBJECT_STORE");
        assert!(
            stderr.contains("s3://BUCKET/PREFIX") || stderr.contains("file:///PATH"),
            "{url}: no hint of what it takes: {stderr}"
        );
        assert!(!stderr.contains(secret), "{url}: {stderr}");
    }
    // The variable is read as well, and refused the same way.
    let dir = TempDir::new().unwrap();
    let data_dir = dir.path().join("data");
    let args: Vec<&OsStr> = vec![
        OsStr::new("--listen"),
        OsStr::new("127.0.0.1:0"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
    ];
    let (status, stderr) =
        run_binary_to_exit_with_env(&args, &[("TAPEDECK_OBJECT_STORE", "ftp://x")]);
    assert_eq!(status.code(), Some(2), "{status}: {stderr}");
    assert!(!data_dir.exists(), "the data dir was created");
    assert_one_clear_line(&stderr, "--object-store", "TAPEDECK_OBJECT_STORE");
}
