//! Several instances behind one address: three real `tapedeck` binaries located through a real
//! `redis-server`. Replay, cancel and the live check from every instance, on both APIs, for
//! live and completed recordings; supersede and reject across instances; resumes sent to the
//! owner; an owner SIGKILLed and restarted; Redis killed and restarted; a stale owner that
//! cannot overwrite or remove a newer owner's entry.
use crate::common;

use std::future::Future;
use std::time::Duration;

use common::redis_server::RedisServer;
use common::{
    BinaryServer, CuttableProxy, LegacyProducer, LogLines, Recording, WAIT, record_all,
    replay_from, replay_text,
};
use redis::AsyncCommands;
use tapedeck::pb::{
    CancelRecordRequest, CancelResponseRequest, CheckConversationsRequest, CheckRecordingsRequest,
    RecordStatus, ReplayResponseTokensRequest,
};
use tempfile::TempDir;
use tonic::Code;

/// A fleet: Redis and three instances located through it, each with its own data dir.
struct Fleet {
    redis: RedisServer,
    instances: Vec<Instance>,
}

struct Instance {
    server: BinaryServer,
    log: LogLines,
    data_dir: TempDir,
}

impl Fleet {
    fn start(extra_args: &[&str]) -> Fleet {
        let redis = RedisServer::start();
        let instances = (0..3)
            .map(|_| {
                let data_dir = TempDir::new().unwrap();
                let (server, log) =
                    BinaryServer::spawn_located(data_dir.path(), &redis.url(), extra_args);
                Instance {
                    server,
                    log,
                    data_dir,
                }
            })
            .collect();
        Fleet { redis, instances }
    }

    fn addr(&self, i: usize) -> String {
        self.instances[i].server.addr.to_string()
    }
}

/// Retries `attempt` until it returns `Some`, for at most [`WAIT`] (then the test fails with
/// `what`).
async fn eventually<T, F: Future<Output = Option<T>>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + WAIT * 2;
    loop {
        if let Some(value) = attempt().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The redirect address a current-API replay of `id` on `server` answers with ("" if it
/// served the replay itself).
async fn replay_redirect(server: &BinaryServer, id: &[u8]) -> Result<String, tonic::Status> {
    let mut stream = replay_from(&server.recorder().await, id, 0).await?;
    let first = stream.message().await?.unwrap_or_default();
    Ok(first.redirect_address)
}

/// The `x-resumer-redirect-host:port` of a legacy replay of `id` on `server`, if it was
/// redirected.
async fn legacy_replay_redirect(server: &BinaryServer, id: &[u8]) -> Option<String> {
    let request = ReplayResponseTokensRequest {
        conversation_id: id.to_vec(),
        resume_position: 0,
    };
    let err = server
        .resumer()
        .await
        .replay_response_tokens(request)
        .await
        .err()?;
    legacy_redirect(&err)
}

/// The address in a legacy redirect status.
fn legacy_redirect(status: &tonic::Status) -> Option<String> {
    if status.code() != Code::Unavailable {
        return None;
    }
    let header = |name| {
        status
            .metadata()
            .get(name)?
            .to_str()
            .ok()
            .map(str::to_string)
    };
    Some(format!(
        "{}:{}",
        header("x-resumer-redirect-host")?,
        header("x-resumer-redirect-port")?
    ))
}

/// Which of `ids` `server` reports live, on the current and on the legacy API.
async fn live_at(server: &BinaryServer, ids: &[&[u8]]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let ids: Vec<Vec<u8>> = ids.iter().map(|id| id.to_vec()).collect();
    let current = server
        .recorder()
        .await
        .check_recordings(CheckRecordingsRequest {
            conversation_ids: ids.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .conversation_ids;
    let legacy = server
        .resumer()
        .await
        .check_conversations(CheckConversationsRequest {
            conversation_ids: ids,
        })
        .await
        .unwrap()
        .into_inner()
        .conversation_ids;
    (current, legacy)
}

/// Waits until `server` reports exactly `expected` among `ids` as live, on both APIs.
async fn wait_live_at(server: &BinaryServer, ids: &[&[u8]], expected: &[&[u8]]) {
    let expected: Vec<Vec<u8>> = expected.iter().map(|id| id.to_vec()).collect();
    eventually("the live check to agree", || async {
        let (current, legacy) = live_at(server, ids).await;
        (current == expected && legacy == expected).then_some(())
    })
    .await;
}

/// Waits until a replay of `id` on `server` redirects to `owner`, on both APIs.
async fn wait_redirected(server: &BinaryServer, id: &[u8], owner: &str) {
    eventually("a replay to be redirected", || async {
        let current = replay_redirect(server, id).await.ok()?;
        let legacy = legacy_replay_redirect(server, id).await?;
        (current == owner && legacy == owner).then_some(())
    })
    .await;
}

#[tokio::test]
async fn live_and_completed_recordings_are_found_from_every_instance() {
    let fleet = Fleet::start(&[]);
    let owner = &fleet.instances[0].server;
    let recorder = owner.recorder().await;
    let live = Recording::open(&recorder, b"chat-live").await;
    live.send("hello ").await;
    record_all(&recorder, b"chat-done", &["all ", "done"]).await;

    let ids: [&[u8]; 3] = [b"chat-live", b"chat-done", b"chat-never"];
    for other in &fleet.instances[1..] {
        wait_live_at(&other.server, &ids, &[b"chat-live"]).await;
        wait_redirected(&other.server, b"chat-live", &fleet.addr(0)).await;
        wait_redirected(&other.server, b"chat-done", &fleet.addr(0)).await;
        // Nobody holds it: answered here, as an empty stream naming why.
        let unknown = replay_from(&other.server.recorder().await, b"chat-never", 0).await;
        let unknown = common::read_all(unknown.unwrap()).await.unwrap_err();
        assert_eq!(unknown.code(), Code::NotFound);
        assert_eq!(
            unknown.metadata().get("tapedeck-reason").unwrap(),
            "unknown"
        );
    }
    // The owner serves its own recordings, and follows the live one to its end.
    assert_eq!(replay_redirect(owner, b"chat-done").await.unwrap(), "");
    let following = replay_from(&recorder, b"chat-live", 0).await.unwrap();
    live.send("world").await;
    assert_eq!(
        live.complete().await.unwrap().status,
        RecordStatus::Success as i32
    );
    assert_eq!(
        common::read_all(following).await.unwrap().text,
        "hello world"
    );

    // Once it ended, no instance reports it live, and every other one still redirects.
    for other in &fleet.instances[1..] {
        wait_live_at(&other.server, &ids, &[]).await;
        wait_redirected(&other.server, b"chat-live", &fleet.addr(0)).await;
    }
    let text = replay_text(&recorder, b"chat-live").await.unwrap().text;
    assert_eq!(text, "hello world");
}

#[tokio::test]
async fn a_cancel_on_any_instance_reaches_the_owner_and_is_answered_truthfully() {
    let fleet = Fleet::start(&[]);
    let owner = &fleet.instances[0].server;
    let (b, c) = (&fleet.instances[1].server, &fleet.instances[2].server);

    // Current API: forwarded through Redis, answered by the owner; nothing to follow.
    let current = Recording::open(&owner.recorder().await, b"chat-c1").await;
    current.send("partial").await;
    wait_live_at(b, &[b"chat-c1"], &[b"chat-c1"]).await;
    let cancel = CancelRecordRequest {
        conversation_id: b"chat-c1".to_vec(),
    };
    let answer = b
        .recorder()
        .await
        .cancel(cancel.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(answer.accepted, "{answer:?}");
    assert_eq!(answer.redirect_address, "");
    let ended = current.answer().await.unwrap();
    assert_eq!(ended.status, RecordStatus::Cancelled as i32, "{ended:?}");

    // Legacy API, from the third instance: the producer is told to stop.
    let mut legacy = LegacyProducer::start(&owner.resumer().await, b"chat-c2", "tok").await;
    assert!(legacy.ack().await.success);
    wait_live_at(c, &[b"chat-c2"], &[b"chat-c2"]).await;
    let request = CancelResponseRequest {
        conversation_id: b"chat-c2".to_vec(),
    };
    let answer = c.resumer().await.cancel_response(request).await.unwrap();
    assert!(answer.into_inner().accepted);
    assert!(legacy.ack().await.cancel_requested);

    // A completed recording cannot be cancelled: the owner says so, from any instance.
    record_all(&owner.recorder().await, b"chat-c3", &["done"]).await;
    wait_redirected(c, b"chat-c3", &fleet.addr(0)).await;
    let late = CancelRecordRequest {
        conversation_id: b"chat-c3".to_vec(),
    };
    let answer = c.recorder().await.cancel(late).await.unwrap().into_inner();
    assert!(!answer.accepted, "{answer:?}");
    assert_eq!(answer.redirect_address, "");
    // Cancelling the cancelled one again, from elsewhere, is accepted (as on one instance).
    let again = c
        .recorder()
        .await
        .cancel(cancel)
        .await
        .unwrap()
        .into_inner();
    assert!(again.accepted, "{again:?}");
}

#[tokio::test]
async fn a_new_recording_on_another_instance_supersedes_the_live_one() {
    let fleet = Fleet::start(&[]);
    let (a, b, c) = (
        &fleet.instances[0].server,
        &fleet.instances[1].server,
        &fleet.instances[2].server,
    );
    let old = Recording::open(&a.recorder().await, b"chat-s").await;
    old.send("old ").await;
    wait_live_at(c, &[b"chat-s"], &[b"chat-s"]).await;

    let new = Recording::open(&b.recorder().await, b"chat-s").await;
    new.send("new").await;
    let ended = old.answer().await.unwrap();
    assert_eq!(ended.status, RecordStatus::Error as i32, "{ended:?}");
    assert!(
        ended.error_message.contains("superseded") && ended.error_message.contains(&fleet.addr(1)),
        "{ended:?}"
    );
    // Every instance now sends readers to the new owner, the old one included.
    wait_redirected(a, b"chat-s", &fleet.addr(1)).await;
    wait_redirected(c, b"chat-s", &fleet.addr(1)).await;
    wait_live_at(a, &[b"chat-s"], &[b"chat-s"]).await;
    assert_eq!(
        new.complete().await.unwrap().status,
        RecordStatus::Success as i32
    );
    let text = replay_text(&b.recorder().await, b"chat-s")
        .await
        .unwrap()
        .text;
    assert_eq!(text, "new");
}

#[tokio::test]
async fn under_reject_a_new_recording_on_another_instance_is_refused() {
    let fleet = Fleet::start(&["--on-conflict", "reject"]);
    let (a, b) = (&fleet.instances[0].server, &fleet.instances[1].server);
    let first = Recording::open(&a.recorder().await, b"chat-r").await;
    first.send("first").await;
    wait_live_at(b, &[b"chat-r"], &[b"chat-r"]).await;

    let refused = Recording::open(&b.recorder().await, b"chat-r").await;
    let err = refused.answer().await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    let legacy = LegacyProducer::try_open(
        &b.resumer().await,
        Some(common::token(b"chat-r", "x", false)),
        8,
    )
    .await;
    let err = match legacy {
        Ok(mut producer) => producer.next().await.unwrap_err(),
        Err(err) => err,
    };
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    // The first producer was not disturbed.
    assert_eq!(
        first.complete().await.unwrap().status,
        RecordStatus::Success as i32
    );
    // Once it ended, a new recording may start anywhere.
    wait_live_at(b, &[b"chat-r"], &[]).await;
    record_all(&b.recorder().await, b"chat-r", &["second"]).await;
}

#[tokio::test]
async fn a_producer_resume_on_another_instance_is_sent_to_the_owner() {
    let fleet = Fleet::start(&["--producer-grace", "60s"]);
    let (a, b) = (&fleet.instances[0].server, &fleet.instances[1].server);
    let proxy = CuttableProxy::start(a.addr).await;
    let first = Recording::open(&proxy.recorder().await, b"chat-p").await;
    first.send("before the cut").await;
    wait_live_at(b, &[b"chat-p"], &[b"chat-p"]).await;
    proxy.cut(); // the producer's connection breaks; the recording waits for it

    let resumed = Recording::resume(&b.recorder().await, b"chat-p", 14).await;
    let err = resumed.answer().await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let redirect = err.metadata().get("tapedeck-redirect").unwrap();
    assert_eq!(redirect.to_str().unwrap(), fleet.addr(0));
    assert!(err.message().contains(&fleet.addr(0)), "{err:?}");

    let mut first_token = common::token(b"chat-p", "", false);
    first_token.resume_from_offset = Some(14);
    let legacy = LegacyProducer::try_open(&b.resumer().await, Some(first_token), 8).await;
    let err = match legacy {
        Ok(mut producer) => producer.next().await.unwrap_err(),
        Err(err) => err,
    };
    assert_eq!(legacy_redirect(&err), Some(fleet.addr(0)), "{err:?}");

    // tapedeck's own client, asked on B, resumes at the owner (Get says where).
    use tapedeck::client::{Client, ClientConfig, RecordOptions};
    let client = Client::connect(ClientConfig::new(fleet.addr(1)))
        .await
        .unwrap();
    let options = RecordOptions {
        resume_from: Some(14),
        ..RecordOptions::default()
    };
    let resumed = client.record(b"chat-p", options).await.unwrap();
    resumed.send(", after").await.unwrap();
    resumed.complete().await.unwrap();
    let text = replay_text(&a.recorder().await, b"chat-p")
        .await
        .unwrap()
        .text;
    assert_eq!(text, "before the cut, after");
}

#[tokio::test]
async fn a_killed_owners_entries_expire_and_come_back_when_it_restarts() {
    let mut fleet = Fleet::start(&["--producer-grace", "5m"]);
    let owner = &fleet.instances[0].server;
    let live = Recording::open(&owner.recorder().await, b"chat-k").await;
    live.send("kept").await;
    record_all(&owner.recorder().await, b"chat-k-done", &["done"]).await;
    let b = &fleet.instances[1].server;
    wait_live_at(b, &[b"chat-k"], &[b"chat-k"]).await;
    wait_redirected(b, b"chat-k-done", &fleet.addr(0)).await;

    let killed = fleet.instances.remove(0);
    let old_address = killed.server.addr.to_string();
    killed.server.kill();
    // Until its entry expires, a cancel cannot be answered by the owner: the client is sent
    // there (current API: redirect_address; legacy: the redirect metadata).
    let b = &fleet.instances[0].server;
    let cancel = CancelRecordRequest {
        conversation_id: b"chat-k".to_vec(),
    };
    let answer = b
        .recorder()
        .await
        .cancel(cancel)
        .await
        .unwrap()
        .into_inner();
    assert!(!answer.accepted, "{answer:?}");
    assert_eq!(answer.redirect_address, old_address);
    let legacy = CancelResponseRequest {
        conversation_id: b"chat-k".to_vec(),
    };
    let err = b.resumer().await.cancel_response(legacy).await.unwrap_err();
    assert_eq!(legacy_redirect(&err), Some(old_address), "{err:?}");
    // No refresh: the live entry expires (its TTL is 10 s); the completed one is kept.
    wait_live_at(b, &[b"chat-k"], &[]).await;

    let (restarted, _log) = BinaryServer::spawn_located(
        killed.data_dir.path(),
        &fleet.redis.url(),
        &["--producer-grace", "5m"],
    );
    let new_address = restarted.addr.to_string();
    wait_live_at(b, &[b"chat-k"], &[b"chat-k"]).await;
    wait_redirected(b, b"chat-k", &new_address).await;
    wait_redirected(b, b"chat-k-done", &new_address).await;
    // The recording waits for its producer: a replay follows it live, so only its start is
    // read here.
    let mut following = replay_from(&restarted.recorder().await, b"chat-k", 0)
        .await
        .unwrap();
    let first = tokio::time::timeout(WAIT, following.message())
        .await
        .unwrap();
    assert_eq!(first.unwrap().unwrap().content, "kept");
}

#[tokio::test]
async fn redis_dying_leaves_every_instance_serving_and_they_converge_when_it_returns() {
    let mut fleet = Fleet::start(&[]);
    record_all(
        &fleet.instances[0].server.recorder().await,
        b"chat-before",
        &["a"],
    )
    .await;
    let b = &fleet.instances[1].server;
    wait_redirected(b, b"chat-before", &fleet.addr(0)).await;

    fleet.redis.kill();
    // Each instance keeps recording and serving what it holds, and the live check answers
    // from local state.
    let b = &fleet.instances[1].server;
    let during = Recording::open(&b.recorder().await, b"chat-during").await;
    during.send("while Redis is down").await;
    wait_live_at(b, &[b"chat-during", b"chat-before"], &[b"chat-during"]).await;
    let a = &fleet.instances[0].server;
    assert_eq!(replay_redirect(a, b"chat-before").await.unwrap(), "");
    // Get and List answer from what each instance holds: B knows nothing of A's recording.
    let get = tapedeck::pb::tapedeck::GetRecordingRequest {
        conversation_id: b"chat-before".to_vec(),
    };
    let err = b.recordings().await.get(get).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let list = tapedeck::pb::tapedeck::ListRecordingsRequest::default();
    let page = b.recordings().await.list(list).await.unwrap().into_inner();
    let ids: Vec<&[u8]> = page
        .recordings
        .iter()
        .map(|r| &r.conversation_id[..])
        .collect();
    assert_eq!(ids, [b"chat-during".as_slice()]);

    fleet.redis.restart();
    // Redis came back empty: everything is registered again, by every instance.
    wait_live_at(a, &[b"chat-during"], &[b"chat-during"]).await;
    wait_redirected(a, b"chat-during", &fleet.addr(1)).await;
    wait_redirected(b, b"chat-before", &fleet.addr(0)).await;
    assert_eq!(
        during.complete().await.unwrap().status,
        RecordStatus::Success as i32
    );
    let log = fleet.instances[1].log.lock().unwrap().join("\n");
    let outages = log.matches("Redis is unreachable;").count();
    assert_eq!(outages, 1, "the outage is logged once:\n{log}");
    let local_checks = log.matches("live checks answer from this instance's recordings only");
    assert_eq!(
        local_checks.count(),
        1,
        "and the local live checks once:\n{log}"
    );
}

#[tokio::test]
async fn a_stale_owner_never_overwrites_or_removes_a_newer_owners_entry() {
    let fleet = Fleet::start(&[]);
    let a = &fleet.instances[0].server;
    record_all(&a.recorder().await, b"chat-o", &["old"]).await;
    wait_redirected(&fleet.instances[1].server, b"chat-o", &fleet.addr(0)).await;

    // A newer recording of the conversation, registered by an instance that started it later.
    let key = format!(
        "tapedeck:rec:{:032x}",
        tapedeck::id::ConversationId::parse(b"chat-o")
            .unwrap()
            .key()
    );
    let mut redis = fleet.redis.connection().await;
    let () = redis
        .hset_multiple(
            &key,
            &[
                ("owner", "newer-instance:9"),
                ("started", "99999999999999"),
                ("instance", "newer-instance"),
                ("address", "127.0.0.1:1"),
                ("status", "completed"),
            ],
        )
        .await
        .unwrap();
    // A start on the stale owner changes its own recording only, and ends superseded.
    let live = Recording::open(&a.recorder().await, b"chat-o").await;
    live.send("stale").await;
    let ended = live.answer().await.unwrap();
    assert!(
        ended.error_message.contains("127.0.0.1:1"),
        "the stale start is superseded: {ended:?}"
    );
    // A delete there is the newer owner's to make: it is sent there, which does not answer.
    let mut recordings = a.recordings().await;
    let refused = recordings
        .delete(tapedeck::pb::tapedeck::DeleteRecordingRequest {
            conversation_id: b"chat-o".to_vec(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("127.0.0.1:1"), "{refused:?}");
    // A marker changed after the stale recording ended: once its entry is there, that end
    // was settled too.
    record_all(&a.recorder().await, b"chat-o-marker", &["m"]).await;
    wait_redirected(&fleet.instances[2].server, b"chat-o-marker", &fleet.addr(0)).await;
    let owner: Option<String> = redis.hget(&key, "owner").await.unwrap();
    assert_eq!(owner.as_deref(), Some("newer-instance:9"));
    assert_eq!(
        replay_redirect(&fleet.instances[2].server, b"chat-o")
            .await
            .unwrap(),
        "127.0.0.1:1"
    );
}

#[tokio::test]
async fn memory_services_python_client_replays_through_a_redirect() {
    let fleet = Fleet::start(&[]);
    let owner = &fleet.instances[0].server;
    let live = Recording::open(&owner.recorder().await, b"chat-py-live").await;
    live.send("still going").await;
    record_all(
        &owner.recorder().await,
        b"chat-py",
        &["Hello", " from", " A"],
    )
    .await;
    let asked = &fleet.instances[1].server;
    wait_redirected(asked, b"chat-py", &fleet.addr(0)).await;
    wait_live_at(asked, &[b"chat-py-live"], &[b"chat-py-live"]).await;

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/replay_through_redirect.py"
    );
    let output = tokio::process::Command::new(common::python::python())
        .arg(script)
        .args(["chat-py", "chat-py-live"])
        .env(
            "PYTHONPATH",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python"),
        )
        .env("MEMORY_SERVICE_GRPC_TARGET", asked.addr.to_string())
        .env("MEMORY_SERVICE_GRPC_MAX_REDIRECTS", "3")
        .output();
    let output = tokio::time::timeout(WAIT * 3, output)
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python client failed:\n{stderr}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let answer = stdout.lines().last().unwrap_or_default();
    assert_eq!(
        answer, r#"{"live": ["chat-py-live"], "replayed": "Hello from A"}"#,
        "{stderr}"
    );
    assert!(
        stderr.contains("response replay redirect") && stderr.contains(&fleet.addr(0)),
        "the client followed a redirect to the owner:\n{stderr}"
    );
    live.complete().await.unwrap();
}

#[tokio::test]
async fn the_rust_client_and_the_cli_follow_redirects_to_the_owner() {
    use tapedeck::client::{Client, ClientConfig, RecordOptions};
    let fleet = Fleet::start(&[]);
    let owner = &fleet.instances[0].server;
    let asked = &fleet.instances[1].server;
    record_all(
        &owner.recorder().await,
        b"chat-rc",
        &["through ", "a redirect"],
    )
    .await;
    wait_redirected(asked, b"chat-rc", &fleet.addr(0)).await;

    let client = Client::connect(ClientConfig::new(asked.addr.to_string()))
        .await
        .unwrap();
    let mut replay = client.replay(b"chat-rc", 0).await.unwrap();
    let mut text = String::new();
    while let Some(piece) = replay.next().await.unwrap() {
        text.push_str(&piece.content);
    }
    assert_eq!(text, "through a redirect");
    assert_eq!(replay.ended_as(), Some("completed"));

    let live = client
        .record(b"chat-rc-live", RecordOptions::default())
        .await
        .unwrap();
    live.send("going").await.unwrap();
    wait_live_at(owner, &[b"chat-rc-live"], &[b"chat-rc-live"]).await;
    // Recorded on the instance asked; cancelled through another one.
    let other = Client::connect(ClientConfig::new(fleet.addr(2)))
        .await
        .unwrap();
    assert!(other.cancel(b"chat-rc-live").await.unwrap());
    assert_eq!(live.complete().await.unwrap_err().code(), Code::Cancelled);

    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["replay", "chat-rc", "--server", &fleet.addr(2)])
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "through a redirect"
    );
}

/// Runs the CLI with `args` (at most [`WAIT`]); its exit status, stdout and stderr.
async fn cli(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let output = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
            .args(args)
            .output(),
    )
    .await
    .expect("the CLI did not end in time")
    .unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (output.status, text(output.stdout), text(output.stderr))
}

#[tokio::test]
async fn get_and_delete_on_any_instance_are_answered_by_the_owner() {
    use tapedeck::pb::tapedeck::{DeleteRecordingRequest, GetRecordingRequest, RecordingStatus};
    let fleet = Fleet::start(&[]);
    let owner = &fleet.instances[0].server;
    let (b, c) = (&fleet.instances[1].server, &fleet.instances[2].server);
    record_all(&owner.recorder().await, b"chat-g", &["two ", "chunks"]).await;
    let live = Recording::open(&owner.recorder().await, b"chat-g-live").await;
    live.send("so far").await;
    wait_redirected(b, b"chat-g", &fleet.addr(0)).await;
    wait_live_at(b, &[b"chat-g-live"], &[b"chat-g-live"]).await;

    let get = |id: &[u8]| GetRecordingRequest {
        conversation_id: id.to_vec(),
    };
    let done = b.recordings().await.get(get(b"chat-g")).await.unwrap();
    let done = done.into_inner();
    assert_eq!(done.status(), RecordingStatus::Completed, "{done:?}");
    assert_eq!((done.chunk_count, done.byte_length), (2, 10), "{done:?}");
    let going = b.recordings().await.get(get(b"chat-g-live")).await.unwrap();
    let going = going.into_inner();
    assert_eq!(going.status(), RecordingStatus::Recording, "{going:?}");
    assert!(going.producer_attached, "{going:?}");

    // The CLI, on an instance that holds nothing: inspect tells the owner's answer, and a
    // replay without --follow prints what is committed and ends while the recording goes on.
    let (status, out, err) = cli(&["inspect", "chat-g", "--server", &fleet.addr(1)]).await;
    assert!(status.success(), "{err}");
    assert!(out.contains("completed"), "{out}");
    let (status, out, err) = cli(&["replay", "chat-g-live", "--server", &fleet.addr(2)]).await;
    assert!(status.success(), "{err}");
    assert_eq!(out, "so far");

    // Delete from another instance: the owner deletes, and says whether there was one.
    let delete = |id: &[u8]| DeleteRecordingRequest {
        conversation_id: id.to_vec(),
    };
    let deleted = c.recordings().await.delete(delete(b"chat-g")).await;
    assert!(deleted.unwrap().into_inner().existed);
    let after = owner.recordings().await.get(get(b"chat-g")).await.unwrap();
    assert_eq!(after.into_inner().status(), RecordingStatus::Deleted);
    // A live one is cancelled first: its producer is told.
    let (status, out, err) = cli(&["rm", "chat-g-live", "--server", &fleet.addr(1)]).await;
    assert!(status.success(), "{err}");
    assert!(out.contains("deleted"), "{out}");
    assert_eq!(
        live.answer().await.unwrap().status,
        RecordStatus::Cancelled as i32
    );
}

#[tokio::test]
async fn get_and_delete_of_a_recording_whose_owner_is_down_say_so() {
    use tapedeck::pb::tapedeck::{DeleteRecordingRequest, GetRecordingRequest};
    let mut fleet = Fleet::start(&[]);
    let owner_address = fleet.addr(0);
    record_all(
        &fleet.instances[0].server.recorder().await,
        b"chat-down",
        &["kept"],
    )
    .await;
    wait_redirected(&fleet.instances[1].server, b"chat-down", &owner_address).await;
    fleet.instances.remove(0).server.kill();

    let b = &fleet.instances[0].server;
    let get = GetRecordingRequest {
        conversation_id: b"chat-down".to_vec(),
    };
    let err = b.recordings().await.get(get).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains(&owner_address), "{err:?}");
    let delete = DeleteRecordingRequest {
        conversation_id: b"chat-down".to_vec(),
    };
    let err = b.recordings().await.delete(delete).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains(&owner_address), "{err:?}");
    // Never "nothing to delete": the CLI fails, naming the owner.
    let (status, out, err) = cli(&["rm", "chat-down", "--server", &fleet.addr(1)]).await;
    assert!(!status.success(), "{out}");
    assert!(err.contains(&owner_address), "{err}");
}

#[tokio::test]
async fn list_on_any_instance_shows_what_every_instance_holds_with_its_owner() {
    use tapedeck::pb::tapedeck::ListRecordingsRequest;
    let mut fleet = Fleet::start(&[]);
    for (i, id) in [
        (0, "chat-l0"),
        (1, "chat-l1"),
        (2, "chat-l2"),
        (0, "chat-l3"),
    ] {
        let recorder = fleet.instances[i].server.recorder().await;
        record_all(&recorder, id.as_bytes(), &["x"]).await;
    }
    let c = &fleet.instances[2].server;
    // The other two have registered (and so announced themselves).
    wait_redirected(c, b"chat-l0", &fleet.addr(0)).await;
    wait_redirected(c, b"chat-l1", &fleet.addr(1)).await;
    // Pages of one row, so that paging goes across instances.
    let listed = |token: String| ListRecordingsRequest {
        status: 0,
        page_size: 1,
        page_token: token,
    };
    let mut rows = Vec::new();
    let mut token = String::new();
    loop {
        let page = c.recordings().await.list(listed(token)).await.unwrap();
        let page = page.into_inner();
        assert!(page.unanswered_instances.is_empty(), "{page:?}");
        rows.extend(page.recordings.into_iter().map(|r| {
            let id = String::from_utf8(r.conversation_id).unwrap();
            (id, r.owner_address)
        }));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let expected: Vec<(String, String)> = [
        (0, "chat-l0"),
        (1, "chat-l1"),
        (2, "chat-l2"),
        (0, "chat-l3"),
    ]
    .map(|(i, id)| (id.to_string(), fleet.addr(i)))
    .into();
    assert_eq!(rows, expected);

    // The CLI shows each row's owner.
    let (status, out, err) = cli(&["ls", "--server", &fleet.addr(1)]).await;
    assert!(status.success(), "{err}");
    assert!(out.contains("OWNER"), "{out}");
    let l0 = out
        .lines()
        .find(|line| line.starts_with("chat-l0"))
        .unwrap();
    assert!(l0.ends_with(&fleet.addr(0)), "{out}");

    // An instance that is down is named, and its recordings are missing.
    let down = fleet.addr(0);
    fleet.instances.remove(0).server.kill();
    let c = &fleet.instances[1].server;
    let page = c
        .recordings()
        .await
        .list(ListRecordingsRequest::default())
        .await;
    let page = page.unwrap().into_inner();
    assert_eq!(page.unanswered_instances, std::slice::from_ref(&down));
    let ids: Vec<&[u8]> = page
        .recordings
        .iter()
        .map(|r| &r.conversation_id[..])
        .collect();
    assert_eq!(ids, [b"chat-l1".as_slice(), b"chat-l2".as_slice()]);
    let (status, _, err) = cli(&["ls", "--server", &fleet.addr(1)]).await;
    assert!(status.success(), "{err}");
    assert!(err.contains(&down), "{err}");
}

/// An instance on `redis` serving its HTTP face too, advertised to the others.
fn spawn_with_http(data_dir: &std::path::Path, redis: &RedisServer) -> (BinaryServer, String) {
    let http = common::free_port().to_string();
    let args = ["--http-listen", &http, "--advertised-http-address", &http];
    let (server, _log) = BinaryServer::spawn_located(data_dir, &redis.url(), &args);
    (server, http)
}

#[tokio::test]
async fn the_http_face_of_any_instance_serves_the_streams_another_holds() {
    let redis = RedisServer::start();
    let (a_dir, b_dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (a, a_http) = spawn_with_http(a_dir.path(), &redis);
    let (b, b_http) = spawn_with_http(b_dir.path(), &redis);
    // The Durable Streams project's client and the browser's EventSource: every stream
    // written through A's face, and read through B's, live and as catch-up, byte for byte.
    let bases = [format!("http://{a_http}"), format!("http://{b_http}")];
    tokio::task::spawn_blocking(move || {
        common::node_clients::durable_streams_read_back_what_they_wrote(&bases)
    })
    .await
    .unwrap();

    // A stream whose owner is down: B says so, naming the owner's face.
    let http = reqwest::Client::new();
    let stream = format!("http://{a_http}/v1/stream/cl-down");
    let created = http
        .put(&stream)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let through_b = format!("http://{b_http}/v1/stream/cl-down?offset=-1");
    eventually("B to pass the read to A", || async {
        let answer = http.get(&through_b).send().await.ok()?;
        (answer.status() == 200).then_some(())
    })
    .await;
    // A stream made over HTTP is registered like a gRPC recording: found from B's gRPC too.
    wait_redirected(&b, b"cl-down", &a.addr.to_string()).await;
    a.kill();
    let answer = http.get(&through_b).send().await.unwrap();
    assert_eq!(answer.status(), 503);
    let text = answer.text().await.unwrap();
    assert!(text.contains(&a_http), "{text}");
}

#[tokio::test]
async fn a_stop_on_any_instances_http_face_reaches_the_producer_on_another() {
    let redis = RedisServer::start();
    let (a_dir, b_dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (a, _a_http) = spawn_with_http(a_dir.path(), &redis);
    let (b, b_http) = spawn_with_http(b_dir.path(), &redis);
    let recording = Recording::open(&a.recorder().await, b"chat-stop-b").await;
    recording.send("going on").await;
    wait_live_at(&b, &[b"chat-stop-b"], &[b"chat-stop-b"]).await;

    let stop = format!("http://{b_http}/v1/stop/chat-stop-b");
    let answer = reqwest::Client::new().post(&stop).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let answer: serde_json::Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    assert_eq!(answer["outcome"], "stopped");
    let told = recording.answer().await.unwrap();
    assert_eq!(told.status, tapedeck::pb::RecordStatus::Cancelled as i32);
    let again = reqwest::Client::new().post(&stop).send().await.unwrap();
    let again: serde_json::Value = serde_json::from_str(&again.text().await.unwrap()).unwrap();
    assert_eq!(again["outcome"], "already_stopped");
}
