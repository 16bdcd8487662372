//! Quorum replication across three real `tapedeck` binaries on loopback: a recording made on
//! the leader is on every node byte for byte; a follower and a minority refuse to commit,
//! saying who leads; the leader SIGKILLed, the others elect a new one and lose nothing
//! acknowledged; a node whose disk was wiped rejoins and catches up from the log.
use crate::common;

use std::time::Duration;

use common::trio::{Trio, status_of};
use common::{Recording, WAIT, record_all, replay_text};
use tonic::Code;

fn tokens(n: usize, tag: &str) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i}|")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_made_on_the_leader_is_on_every_node_byte_for_byte() {
    let trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let tokens = tokens(200, "t");
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    record_all(&trio.nodes[&leader].recorder().await, b"everywhere", &refs).await;
    let expected: String = tokens.concat();
    for (id, node) in &trio.nodes {
        let replayed = replay_text(&node.recorder().await, b"everywhere")
            .await
            .unwrap_or_else(|err| panic!("node {id}: {err}"));
        assert_eq!(replayed.text, expected, "node {id}");
        assert_eq!(replayed.status.as_deref(), Some("completed"), "node {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_tells_each_nodes_progress() {
    let trio = Trio::start(&[]);
    let leader = trio.leader().await;
    record_all(
        &trio.nodes[&leader].recorder().await,
        b"progress",
        &["a", "b"],
    )
    .await;
    let status = status_of(&trio.nodes[&leader]).await.unwrap();
    assert_eq!(status.node_id, leader);
    assert_eq!(status.leader_id, Some(leader));
    assert_eq!(status.nodes.len(), 3);
    assert!(status.applied_index > 0);
    for node in &status.nodes {
        assert!(node.matched_index.is_some(), "{node:?}");
    }
    assert_eq!(status.progress_from, Some(leader));
    for node in &status.nodes {
        assert!(node.healthy, "{node:?}");
    }
    // A follower shows each node's progress as the leader sees it.
    let follower = *trio.nodes.keys().find(|id| **id != leader).unwrap();
    let seen = status_of(&trio.nodes[&follower]).await.unwrap();
    assert_eq!(
        (seen.role.as_str(), seen.leader_id, seen.progress_from),
        ("follower", Some(leader), Some(leader))
    );
    assert!(
        seen.nodes.iter().all(|node| node.matched_index.is_some()),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_is_shown_not_answering_on_the_leader_and_its_followers() {
    let mut trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let others = trio.others(leader);
    let (dead, alive) = (others[0], others[1]);
    trio.kill(dead);
    // Within a few heartbeats, with nothing new written (its lag stays small), the leader
    // says it does not answer; the living follower says what the leader sees.
    for asked in [leader, alive] {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let status = status_of(&trio.nodes[&asked]).await.unwrap();
            let row = status.nodes.iter().find(|node| node.id == dead).unwrap();
            if !row.healthy && row.silent_ms.is_some_and(|ms| ms >= 1_000) {
                assert_eq!(status.progress_from, Some(leader), "{status:?}");
                let others_healthy = status
                    .nodes
                    .iter()
                    .filter(|node| node.id != dead)
                    .all(|node| node.healthy);
                assert!(others_healthy, "{status:?}");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {asked} still shows node {dead} as {row:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // And `tapedeck cluster status` says it in words.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args([
            "cluster",
            "status",
            "--server",
            &trio.grpc[&alive].to_string(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains(&format!("as the leader, node {leader}, sees it")),
        "{text}"
    );
    let dead_row = text
        .lines()
        .find(|line| line.trim_start().starts_with(&format!("{dead} ")))
        .unwrap_or_else(|| panic!("no row for node {dead}: {text}"));
    assert!(dead_row.contains("not answering (silent for"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_may_stream_to_any_node() {
    let trio = Trio::start(&[]);
    for (id, node) in &trio.nodes {
        let name = format!("via-{id}");
        let tokens = tokens(100, &name);
        let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
        record_all(&node.recorder().await, name.as_bytes(), &refs).await;
    }
    for (id, node) in &trio.nodes {
        let client = node.recorder().await;
        for via in trio.nodes.keys() {
            let name = format!("via-{via}");
            let replayed = replay_text(&client, name.as_bytes()).await.unwrap();
            assert_eq!(
                replayed.text,
                tokens(100, &name).concat(),
                "node {id}, {name}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_on_the_surviving_nodes_keep_streaming_when_the_leader_is_killed() {
    let mut trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let survivors: Vec<u64> = trio
        .nodes
        .keys()
        .copied()
        .filter(|id| *id != leader)
        .collect();
    let tokens = tokens(400, "f");
    let mut producers = Vec::new();
    let mut readers = Vec::new();
    for id in &survivors {
        let client = trio.nodes[id].recorder().await;
        let name = format!("failover-{id}");
        let recording = common::Recording::open(&client, name.as_bytes()).await;
        for token in &tokens[..200] {
            recording.send(token).await;
        }
        // A reader on the other survivor follows it live.
        let other = survivors.iter().find(|other| *other != id).unwrap();
        let reader = trio.nodes[other].recorder().await;
        let live = common::replay_when_live(&reader, name.as_bytes(), 0)
            .await
            .unwrap();
        readers.push((name.clone(), tokio::spawn(common::read_all(live))));
        producers.push((name, recording));
    }
    trio.kill(leader);
    for (name, recording) in producers {
        for token in &tokens[200..] {
            recording.send(token).await;
        }
        let answer = recording.complete().await.unwrap();
        assert_eq!(
            answer.status,
            tapedeck::pb::RecordStatus::Success as i32,
            "{name}: {answer:?}"
        );
    }
    for id in &survivors {
        let client = trio.nodes[id].recorder().await;
        for other in &survivors {
            let name = format!("failover-{other}");
            let replayed = replay_text(&client, name.as_bytes()).await.unwrap();
            assert_eq!(replayed.text, tokens.concat(), "{name} on node {id}");
        }
    }
    for (name, reader) in readers {
        let followed = reader.await.unwrap().unwrap();
        assert_eq!(
            followed.text,
            tokens.concat(),
            "{name}, followed live, ended {:?} at {:?}",
            followed.status,
            followed.end_offset
        );
        assert_eq!(followed.status.as_deref(), Some("completed"), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_a_new_one_commits_and_nothing_acknowledged_is_lost() {
    let mut trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let before = tokens(100, "before");
    let refs: Vec<&str> = before.iter().map(String::as_str).collect();
    record_all(&trio.nodes[&leader].recorder().await, b"acked", &refs).await;
    trio.kill(leader);
    let next = trio.leader().await;
    assert_ne!(next, leader);
    let after = tokens(50, "after");
    let refs: Vec<&str> = after.iter().map(String::as_str).collect();
    record_all(&trio.nodes[&next].recorder().await, b"later", &refs).await;
    trio.restart(leader);
    for (id, node) in &trio.nodes {
        let client = node.recorder().await;
        let deadline = tokio::time::Instant::now() + WAIT;
        // The restarted node catches up from the log.
        let later = loop {
            match replay_text(&client, b"later").await {
                Ok(replayed) if replayed.status.as_deref() == Some("completed") => break replayed,
                _ if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => panic!("node {id}: {other:?}"),
            }
        };
        assert_eq!(later.text, after.concat(), "node {id}");
        let acked = replay_text(&client, b"acked").await.unwrap();
        assert_eq!(acked.text, before.concat(), "node {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_acknowledges_nothing_and_says_so() {
    let mut trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let others: Vec<u64> = trio
        .nodes
        .keys()
        .copied()
        .filter(|id| *id != leader)
        .collect();
    for id in others {
        trio.kill(id);
    }
    let client = trio.nodes[&leader].recorder().await;
    let recording = common::Recording::open(&client, b"alone").await;
    recording.send("x").await;
    let _ = recording
        .tx
        .send(tapedeck::pb::RecordRequest {
            complete: true,
            ..Default::default()
        })
        .await;
    // The node looks for a leader a while (the others might be back) before it gives up.
    let answer = tokio::time::timeout(Duration::from_secs(40), recording.answer)
        .await
        .expect("Record did not answer")
        .unwrap();
    let err = answer.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("cannot commit"), "{}", err.message());
    let replayed = replay_text(&client, b"alone").await;
    assert!(
        matches!(&replayed, Err(err) if err.code() == Code::NotFound),
        "{replayed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_made_through_one_node_is_found_at_once_on_another() {
    let trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let followers: Vec<u64> = trio
        .nodes
        .keys()
        .copied()
        .filter(|id| *id != leader)
        .collect();
    let writer = trio.nodes[&followers[0]].recorder().await;
    let behind = &trio.nodes[&followers[1]];
    let reader = behind.recorder().await;
    for i in 0..5 {
        let id = format!("at-once-{i}");
        // The reader's node is paused (for less than an election timeout) while the leader
        // and the writer's node commit the recording: when it goes on, it has not applied it.
        // SAFETY: signals a child process this test started.
        unsafe { libc::kill(behind.pid(), libc::SIGSTOP) };
        record_all(&writer, id.as_bytes(), &["a", "b", "c"]).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // SAFETY: as above.
        unsafe { libc::kill(behind.pid(), libc::SIGCONT) };
        // No waiting: the node catches up with the leader before it would say NOT_FOUND.
        let replayed = replay_text(&reader, id.as_bytes())
            .await
            .unwrap_or_else(|err| panic!("{id} on node {}: {err}", followers[1]));
        assert_eq!(replayed.text, "abc", "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_the_check_calls_live_is_found_by_a_replay_on_the_leader() {
    let trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let client = trio.nodes[&leader].recorder().await;
    for i in 0..20 {
        let id = format!("checked-{i}");
        let recording = common::Recording::open(&client, id.as_bytes()).await;
        recording.send("x").await;
        // As a subscriber does: wait until the check says live, then replay at once.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let live = client
                .clone()
                .check_recordings(tapedeck::pb::CheckRecordingsRequest {
                    conversation_ids: vec![id.as_bytes().to_vec()],
                })
                .await
                .unwrap()
                .into_inner()
                .conversation_ids;
            if !live.is_empty() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{id} never live");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let replay = common::replay_from(&client, id.as_bytes(), 0)
            .await
            .unwrap();
        recording.complete().await.unwrap();
        // Opened while live: it found the recording, not an empty stream naming its absence.
        let replayed = common::read_all(replay).await;
        assert!(replayed.is_ok(), "{id}: {:?}", replayed.err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_disk_was_wiped_rejoins_and_catches_up() {
    let mut trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let follower = *trio.nodes.keys().find(|id| **id != leader).unwrap();
    let tokens = tokens(300, "w");
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    record_all(&trio.nodes[&leader].recorder().await, b"kept", &refs).await;
    trio.kill(follower);
    trio.wipe(follower);
    trio.restart(follower);
    let client = trio.nodes[&follower].recorder().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match replay_text(&client, b"kept").await {
            Ok(replayed) if replayed.status.as_deref() == Some("completed") => {
                assert_eq!(replayed.text, tokens.concat());
                break;
            }
            _ if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("the wiped node did not catch up: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_and_started_again_keeps_every_chunk() {
    let mut trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let follower = *trio.nodes.keys().find(|id| **id != leader).unwrap();
    let tokens = tokens(300, "s");
    // Still live as the follower stops: its chunks are applied but not yet folded into the
    // file, on every node.
    let recording = Recording::open(&trio.nodes[&leader].recorder().await, b"stopped").await;
    for token in &tokens {
        recording.send(token).await;
    }
    // The tokens committed (no ack tells when: the leader's Get does), then applied on every
    // node.
    let length = tokens.concat().len() as u64;
    let recordings = trio.nodes[&leader].recordings().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let get = tapedeck::pb::tapedeck::GetRecordingRequest {
            conversation_id: b"stopped".to_vec(),
        };
        // NOT_FOUND until its start is committed.
        let got = recordings
            .clone()
            .get(get)
            .await
            .map(|got| got.into_inner());
        if got.as_ref().is_ok_and(|got| got.byte_length == length) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not committed: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    trio.converged(WAIT).await;
    trio.stop(follower).await;
    trio.restart(follower);
    trio.all_vote(WAIT).await;
    let answer = recording.complete().await.unwrap();
    assert_eq!(answer.status, tapedeck::pb::RecordStatus::Success as i32);
    trio.converged(WAIT).await;
    for (id, node) in &trio.nodes {
        let replayed = replay_text(&node.recorder().await, b"stopped")
            .await
            .unwrap_or_else(|err| panic!("node {id}: {err}"));
        assert_eq!(replayed.text, tokens.concat(), "node {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_behind_the_purged_log_catches_up_from_a_snapshot() {
    // A snapshot every 10 entries, and 10 kept before it: the log's start moves on quickly.
    let mut trio = Trio::start(&["--cluster-snapshot-every", "10"]);
    let leader = trio.leader().await;
    let follower = *trio.nodes.keys().find(|id| **id != leader).unwrap();
    let recorder = trio.nodes[&leader].recorder().await;
    // Live throughout: its chunks travel unfolded, in the snapshot.
    let live = Recording::open(&recorder, b"in-flight").await;
    let live_tokens = tokens(50, "l");
    for token in &live_tokens {
        live.send(token).await;
    }
    let ended_tokens = tokens(20, "e");
    let refs: Vec<&str> = ended_tokens.iter().map(String::as_str).collect();
    for n in 0..40 {
        record_all(&recorder, format!("ended-{n}").as_bytes(), &refs).await;
    }
    trio.kill(follower);
    trio.wipe(follower);
    trio.restart(follower);
    trio.all_vote(WAIT).await;
    trio.assert_a_snapshot_was_installed();
    let answer = live.complete().await.unwrap();
    assert_eq!(answer.status, tapedeck::pb::RecordStatus::Success as i32);
    trio.converged(WAIT).await;
    for (id, node) in &trio.nodes {
        let client = node.recorder().await;
        let replayed = replay_text(&client, b"in-flight")
            .await
            .unwrap_or_else(|err| panic!("node {id}: {err}"));
        assert_eq!(replayed.text, live_tokens.concat(), "node {id}");
        for n in [0, 17, 39] {
            let replayed = replay_text(&client, format!("ended-{n}").as_bytes())
                .await
                .unwrap_or_else(|err| panic!("node {id}: {err}"));
            assert_eq!(replayed.text, ended_tokens.concat(), "node {id}, ended-{n}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_gives_no_vote_until_it_has_caught_up() {
    let mut trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let mut followers = trio.nodes.keys().copied().filter(|id| *id != leader);
    let (wiped, other) = (followers.next().unwrap(), followers.next().unwrap());
    let tokens = tokens(100, "v");
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    record_all(&trio.nodes[&leader].recorder().await, b"voted", &refs).await;
    trio.kill(wiped);
    trio.wipe(wiped);
    // With the leader frozen, the wiped node hears from no leader and cannot catch up: the
    // other follower stands for election and must not win with the wiped node's vote.
    unsafe { libc::kill(trio.nodes[&leader].pid(), libc::SIGSTOP) };
    trio.restart(wiped);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let wiped_status = status_of(&trio.nodes[&wiped]).await.unwrap();
    let other_status = status_of(&trio.nodes[&other]).await.unwrap();
    unsafe { libc::kill(trio.nodes[&leader].pid(), libc::SIGCONT) };
    assert!(wiped_status.rejoining, "{wiped_status:?}");
    assert_ne!(wiped_status.role, "leader", "{wiped_status:?}");
    assert_ne!(other_status.role, "leader", "{other_status:?}");

    // With the leader back, it catches up, and votes again.
    trio.all_vote(WAIT).await;
    let replayed = replay_text(&trio.nodes[&wiped].recorder().await, b"voted")
        .await
        .unwrap();
    assert_eq!(replayed.text, tokens.concat());
}

/// A forwarded producer session whose open reached a leader that died before it answered opens
/// again on the next leader. What the lost open started must be taken over, not superseded:
/// a reader already following it would otherwise see it end `superseded`, empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_sent_again_after_its_answer_was_lost_takes_over_what_it_started() {
    use tapedeck::pb::cluster::{Open, Produced, Producing, cluster_client::ClusterClient};
    use tapedeck::pb::cluster::{produced::Kind, producing};
    use tokio_stream::wrappers::ReceiverStream;

    let trio = Trio::start(&[]);
    let leader = trio.leader().await;
    let follower = *trio.nodes.keys().find(|id| **id != leader).unwrap();
    // The forwarding node's side of the cluster port, played by the test (from loopback, as a
    // peer): the open, answered, then the call gone without a word, as with a dead leader.
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", trio.cluster_addr(leader)))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut cluster = ClusterClient::new(channel);
    let since_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let open = |retried_since_ms| Produced {
        kind: Some(Kind::Open(Open {
            conversation_id: b"lost-open".to_vec(),
            resume_from: None,
            retention_ms: None,
            retried_since_ms,
        })),
    };
    let (first, requests) = tokio::sync::mpsc::channel(4);
    first.send(open(None)).await.unwrap();
    let mut answers = cluster
        .produce(ReceiverStream::new(requests))
        .await
        .unwrap()
        .into_inner();
    let opened = answers.message().await.unwrap().unwrap();
    assert!(
        matches!(opened.kind, Some(producing::Kind::Opened(0))),
        "{opened:?}"
    );
    drop((first, answers));

    let reader = trio.nodes[&follower].recorder().await;
    let live = common::replay_when_live(&reader, b"lost-open", 0)
        .await
        .unwrap();
    let followed = tokio::spawn(common::read_all(live));

    let (again, requests) = tokio::sync::mpsc::channel(8);
    again.send(open(Some(since_ms))).await.unwrap();
    for content in ["hello, ", "world"] {
        let content = Kind::Content(content.to_string());
        again
            .send(Produced {
                kind: Some(content),
            })
            .await
            .unwrap();
    }
    again
        .send(Produced {
            kind: Some(Kind::Complete(true)),
        })
        .await
        .unwrap();
    let mut answers = cluster
        .produce(ReceiverStream::new(requests))
        .await
        .unwrap()
        .into_inner();
    let ended = loop {
        match answers.message().await.unwrap() {
            Some(Producing {
                kind: Some(producing::Kind::Ended(ended)),
            }) => break ended,
            Some(_) => continue,
            None => panic!("the session ended without saying how"),
        }
    };
    assert_eq!(ended.status, "completed", "{ended:?}");
    let followed = followed.await.unwrap().unwrap();
    assert_eq!(
        (followed.text.as_str(), followed.status.as_deref()),
        ("hello, world", Some("completed")),
        "the reader that followed the first open's recording"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_on_a_follower_is_answered_when_the_leader_refuses_its_message() {
    let trio = Trio::start(&["--max-recording-bytes", "16"]);
    let leader = trio.leader().await;
    let follower = *trio.nodes.keys().find(|id| **id != leader).unwrap();
    let client = trio.nodes[&follower].recorder().await;
    let recording = common::Recording::open(&client, b"too-long").await;
    // Accepted here and refused by the leader, which runs the session: the producer, which
    // sends nothing more, is told why rather than left waiting.
    recording.send("thirty-two bytes, over the limit").await;
    let err = recording.answer().await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("--max-recording-bytes"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_delete_and_resume_reach_across_nodes() {
    let trio = Trio::start(&[]);
    let ids: Vec<u64> = trio.nodes.keys().copied().collect();
    let (a, b, c) = (ids[0], ids[1], ids[2]);

    // A producer on node a is cancelled from node b.
    let recording = common::Recording::open(&trio.nodes[&a].recorder().await, b"to-cancel").await;
    recording.send("some words").await;
    let on_b = trio.nodes[&b].recorder().await;
    let live = common::replay_when_live(&on_b, b"to-cancel", 0)
        .await
        .unwrap();
    let cancelled = on_b
        .clone()
        .cancel(tapedeck::pb::CancelRecordRequest {
            conversation_id: b"to-cancel".to_vec(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cancelled.accepted, "{cancelled:?}");
    let answer = recording.answer().await.unwrap();
    assert_eq!(
        answer.status,
        tapedeck::pb::RecordStatus::Cancelled as i32,
        "{answer:?}"
    );
    let followed = common::read_all(live).await.unwrap();
    assert_eq!(followed.status.as_deref(), Some("cancelled"));
    for (id, node) in &trio.nodes {
        let replayed = replay_text(&node.recorder().await, b"to-cancel")
            .await
            .unwrap();
        assert_eq!(replayed.status.as_deref(), Some("cancelled"), "node {id}");
    }

    // A recording made through node a is deleted from node c, and is gone on every node.
    record_all(&trio.nodes[&a].recorder().await, b"to-delete", &["x", "y"]).await;
    let config = tapedeck::client::ClientConfig::new(trio.nodes[&c].addr.to_string());
    let client = tapedeck::client::Client::connect(config).await.unwrap();
    assert!(client.delete(b"to-delete").await.unwrap());
    for (id, node) in &trio.nodes {
        let err = replay_text(&node.recorder().await, b"to-delete")
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "node {id}: {err:?}");
    }

    // A producer that lets go on node a resumes on node b.
    let first = common::Recording::open(&trio.nodes[&a].recorder().await, b"resumed").await;
    first.send("abc").await;
    drop(first.tx);
    let detached = tokio::time::timeout(WAIT, first.answer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        detached.error_message.contains("resume_from_offset=3"),
        "{detached:?}"
    );
    let second = common::Recording::resume(&trio.nodes[&b].recorder().await, b"resumed", 3).await;
    second.send("def").await;
    let answer = second.complete().await.unwrap();
    assert_eq!(
        answer.status,
        tapedeck::pb::RecordStatus::Success as i32,
        "{answer:?}"
    );
    for (id, node) in &trio.nodes {
        let replayed = replay_text(&node.recorder().await, b"resumed")
            .await
            .unwrap();
        assert_eq!(replayed.text, "abcdef", "node {id}");
    }
}
