//! Torture with an acknowledged-byte ledger: three real nodes, producers on grpcio (Python)
//! and tonic streaming to all three, while a loop SIGKILLs a node every couple of seconds —
//! the leader every other time — and sometimes wipes its data dir before restarting it (once
//! every node votes again: one lost disk at a time, as a three-node cluster allows). At the
//! end, on every node: every recording a producer had acknowledged is there byte for byte and
//! completed; every other one is a prefix of what was sent (nothing duplicated, nothing
//! foreign); and the three nodes agree on every byte and every status.
//!
//! The number of kill cycles is `TAPEDECK_TORTURE_CYCLES` (default 4, about half a minute);
//! raise it for a long run.
use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::python::{generate_stubs, script};
use common::trio::Trio;
use common::{read_all, replay_from};
use tapedeck::pb::RecordRequest;
use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

/// One recording a producer made: what it sent, and whether Record answered SUCCESS.
#[derive(Debug, Clone, serde::Deserialize)]
struct Made {
    id: String,
    sent: String,
    acked: bool,
}

const TOKENS: usize = 30;

/// Records one response after another, each to the next node, until `stop`.
async fn tonic_producer(
    targets: Vec<SocketAddr>,
    prefix: String,
    stop: CancellationToken,
) -> Vec<Made> {
    let mut made = Vec::new();
    let mut n = 0;
    while !stop.is_cancelled() {
        n += 1;
        let id = format!("{prefix}-{n}");
        let tokens: Vec<String> = (0..TOKENS).map(|i| format!("{id}:{i}|")).collect();
        let target = targets[n % targets.len()];
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{target}"))
            .unwrap()
            .connect_lazy();
        let mut client = ResponseRecorderServiceClient::new(channel);
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let sending = {
            let (id, tokens) = (id.clone(), tokens.clone());
            tokio::spawn(async move {
                let first = RecordRequest {
                    conversation_id: id.into_bytes(),
                    ..Default::default()
                };
                let _ = tx.send(first).await;
                for token in tokens {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let message = RecordRequest {
                        content: token,
                        ..Default::default()
                    };
                    let _ = tx.send(message).await;
                }
                let complete = RecordRequest {
                    complete: true,
                    ..Default::default()
                };
                let _ = tx.send(complete).await;
            })
        };
        let answer = tokio::time::timeout(
            Duration::from_secs(40),
            client.record(ReceiverStream::new(rx)),
        )
        .await;
        sending.abort();
        let acked = matches!(&answer, Ok(Ok(answer))
            if answer.get_ref().status == tapedeck::pb::RecordStatus::Success as i32);
        made.push(Made {
            id,
            sent: tokens.concat(),
            acked,
        });
        if !acked {
            // No node took it (all down a moment, or no leader yet): not in a tight loop.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    made
}

/// A small xorshift, seeded from the clock or `TAPEDECK_TORTURE_SEED` (the seed is printed, to
/// replay a run).
struct Dice(u64);

impl Dice {
    fn roll(&mut self, sides: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % sides
    }
}

/// How a recording stands on one node: its text and how it ended, or that it is unknown.
async fn seen_on(
    node: SocketAddr,
    id: &str,
) -> Result<Option<(String, Option<String>)>, tonic::Status> {
    let client = common::recorder_client(node).await;
    let stream = replay_from(&client, id.as_bytes(), 0).await?;
    match read_all(stream).await {
        Ok(replayed) => Ok(Some((replayed.text, replayed.status))),
        // An empty stream naming why: nothing there.
        Err(status) if status.code() == tonic::Code::NotFound => Ok(None),
        Err(status) => Err(status),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_bytes_survive_nodes_killed_and_wiped_under_producers_on_every_node() {
    let cycles: u64 = std::env::var("TAPEDECK_TORTURE_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    // TAPEDECK_TORTURE_SEED replays a run whose seed was printed.
    let seed = match std::env::var("TAPEDECK_TORTURE_SEED") {
        Ok(seed) => seed.parse::<u64>().unwrap_or_else(|_| {
            panic!("TAPEDECK_TORTURE_SEED must be a whole number, not {seed:?}")
        }),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    } | 1;
    eprintln!("torture: {cycles} cycles, seed {seed} (TAPEDECK_TORTURE_SEED={seed} replays it)");
    let mut dice = Dice(seed);
    // Recordings whose producers were cut off by a kill end soon, detached or idle, so that
    // every one settles. Snapshots are frequent: nodes restart past a purged log start, and
    // a wiped one is sent a snapshot as often as not.
    let mut trio = Trio::start(&[
        "--producer-grace",
        "2s",
        "--idle-timeout",
        "3s",
        "--gc-interval",
        "1s",
        "--cluster-snapshot-every",
        "200",
    ]);
    trio.leader().await;
    let targets: Vec<SocketAddr> = trio.grpc.values().copied().collect();
    let target_list = targets
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(",");

    let stubs = tempfile::tempdir().unwrap();
    generate_stubs(stubs.path());
    let stop_file = stubs.path().join("stop");
    let python = script(stubs.path(), "tests/foreign/grpcio_ledger.py")
        .arg(&target_list)
        .arg("grpcio")
        .arg(&stop_file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stop = CancellationToken::new();
    // A failed assertion stops the producers too.
    let _stop_on_panic = stop.clone().drop_guard();
    let tonic_producers: Vec<_> = (0..2)
        .map(|p| {
            tokio::spawn(tonic_producer(
                targets.clone(),
                format!("tonic{p}"),
                stop.clone(),
            ))
        })
        .collect();

    for cycle in 0..cycles {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // One lost disk at a time, as with any three-node cluster.
        trio.all_vote(Duration::from_secs(60)).await;
        let leader = trio.leader().await;
        let victim = if cycle % 2 == 0 {
            leader
        } else {
            let followers: Vec<u64> = trio
                .nodes
                .keys()
                .copied()
                .filter(|id| *id != leader)
                .collect();
            followers[dice.roll(followers.len() as u64) as usize]
        };
        let wipe = dice.roll(3) == 0;
        eprintln!("torture: cycle {cycle}: SIGKILL node {victim} (leader {leader}), wipe {wipe}");
        trio.kill(victim);
        if wipe {
            trio.wipe(victim);
        }
        trio.restart(victim);
    }

    std::fs::write(&stop_file, b"").unwrap();
    stop.cancel();
    let mut made: Vec<Made> = Vec::new();
    for producer in tonic_producers {
        made.extend(producer.await.unwrap());
    }
    let output = tokio::task::spawn_blocking(move || python.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(output.status.success(), "the grpcio producer failed");
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        made.push(serde_json::from_str(line).unwrap());
    }
    let acked = made.iter().filter(|m| m.acked).count();
    eprintln!(
        "torture: {} recordings made, {acked} acknowledged",
        made.len()
    );
    assert!(acked > 0, "no recording was acknowledged: {made:?}");

    // Every node has applied everything, and detached recordings have ended.
    trio.converged(Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    trio.converged(Duration::from_secs(60)).await;

    let nodes: Vec<(u64, SocketAddr)> = trio.nodes.iter().map(|(id, n)| (*id, n.addr)).collect();
    for recording in &made {
        let mut seen = BTreeMap::new();
        for (id, addr) in &nodes {
            let view = seen_on(*addr, &recording.id)
                .await
                .unwrap_or_else(|status| {
                    panic!(
                        "replaying {} on node {id}: {status:?}; the nodes' errors:\n{}",
                        recording.id,
                        trio.errors(nodes.iter().map(|(id, _)| *id))
                    )
                });
            seen.insert(*id, view);
        }
        let (first_node, first) = seen.iter().next().unwrap();
        for (node, view) in &seen {
            assert_eq!(
                view, first,
                "{}: node {node} and node {first_node} disagree",
                recording.id
            );
        }
        match first {
            Some((text, status)) if recording.acked => {
                assert_eq!(
                    text,
                    &recording.sent,
                    "{}: acknowledged bytes lost or doubled; seen {seen:?}; the nodes' lines naming it:\n{}",
                    recording.id,
                    trio.lines_with(&recording.id)
                );
                assert_eq!(
                    status.as_deref(),
                    Some("completed"),
                    "{}: acknowledged as completed; the nodes' lines naming it:\n{}",
                    recording.id,
                    trio.lines_with(&recording.id)
                );
            }
            None if recording.acked => panic!("{}: acknowledged and lost", recording.id),
            Some((text, _)) => assert!(
                recording.sent.starts_with(text.as_str()),
                "{}: {text:?} is not a prefix of what was sent",
                recording.id
            ),
            None => {}
        }
    }
}
