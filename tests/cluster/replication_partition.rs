//! Partitions of a three-node cluster of real `tapedeck` binaries, made by cutting the TCP
//! links between them (one proxy per direction): a leader cut off from the others
//! acknowledges nothing, the other two elect a new leader and go on, and after the heal no
//! node diverges; a follower cut off catches up after the heal.
use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::links::{Link, Links};
use common::{
    BinaryServer, LegacyProducer, RecorderClient, Recording, ResumerClient, free_port, replay_text,
    token,
};
use tapedeck::pb::tapedeck::{ClusterStatus, GetRecordingRequest};
use tapedeck::pb::{RecordRequest, RecordResponse, RecordStatus};
use tempfile::TempDir;
use tokio::sync::watch;
use tonic::{Code, Status};

/// How long a cluster may take to elect a leader, fail a producer session over to it, tell
/// a cut-off producer it cannot commit, or bring a node back up to date.
const SETTLE: Duration = Duration::from_secs(40);
/// Tokens each producer sends.
const TOKENS: usize = 300;
/// The links are cut once every legacy producer has this many tokens acknowledged ...
const CUT_AFTER: usize = 100;
/// ... and no producer sends the token at this index before they are.
const GATE_AT: usize = 150;

/// Three nodes whose every link, one per direction, can be cut and healed.
struct Partitioned {
    /// Declared first, so dropped first: the nodes go before the links between them.
    nodes: BTreeMap<u64, BinaryServer>,
    /// `(from, to)`: the link node `from` dials node `to` through.
    links: BTreeMap<(u64, u64), Link>,
    _proxies: Links,
    _dirs: Vec<TempDir>,
}

impl Partitioned {
    /// Starts three nodes of a new cluster, at once. Node `i` is told its own cluster address
    /// and, for every other node `j`, the link `i → j`.
    fn start() -> Partitioned {
        let dirs: Vec<TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let listens: BTreeMap<u64, SocketAddr> = (1..=3).map(|id| (id, free_port())).collect();
        let proxies = Links::new();
        let mut links = BTreeMap::new();
        for from in 1..=3 {
            for to in (1..=3).filter(|to| *to != from) {
                links.insert((from, to), proxies.to(listens[&to]));
            }
        }
        let peers_of = |id: u64| {
            (1..=3)
                .map(|peer| match peer == id {
                    true => format!("{peer}={}", listens[&id]),
                    false => format!("{peer}={}", links[&(id, peer)].addr),
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        // Each node waits to hear from a leader before it forms the cluster itself, so they
        // start together; the links run on their own runtime meanwhile.
        let nodes = std::thread::scope(|scope| {
            let spawns: Vec<_> = (1..=3)
                .map(|id| {
                    let (dir, listen, peers) = (
                        dirs[id - 1].path(),
                        listens[&(id as u64)],
                        peers_of(id as u64),
                    );
                    scope.spawn(move || {
                        let args = [
                            "--node-id".to_string(),
                            id.to_string(),
                            "--cluster-listen".to_string(),
                            listen.to_string(),
                            "--cluster-peers".to_string(),
                            peers,
                        ];
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        (id as u64, BinaryServer::spawn(dir, &args))
                    })
                })
                .collect();
            spawns.into_iter().map(|s| s.join().unwrap()).collect()
        });
        Partitioned {
            nodes,
            links,
            _proxies: proxies,
            _dirs: dirs,
        }
    }

    /// Cuts node `id` off: every link from it and to it.
    fn isolate(&self, id: u64) {
        for ((from, to), link) in &self.links {
            if *from == id || *to == id {
                link.cut();
            }
        }
    }

    /// Heals every link.
    fn heal(&self) {
        for link in self.links.values() {
            link.heal();
        }
    }

    /// The status of the node among `among` that leads in a term after `after`, once the
    /// others of `among` follow it; within [`SETTLE`].
    async fn leader_of(&self, among: &[u64], after: u64) -> ClusterStatus {
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let mut seen = Vec::new();
            for id in among {
                seen.push(status_of(&self.nodes[id]).await);
            }
            let leader = seen.iter().flatten().find(|status| {
                status.role == "leader"
                    && status.term > after
                    && status.leader_id == Some(status.node_id)
            });
            if let Some(leader) = leader
                && seen.iter().all(|status| {
                    status.as_ref().is_ok_and(|status| {
                        status.leader_id == Some(leader.node_id) && status.term == leader.term
                    })
                })
            {
                return leader.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no leader among nodes {among:?} in a term after {after} within {SETTLE:?}: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The leader's status once all three nodes follow it and each has applied its last log
    /// entry; within [`SETTLE`].
    async fn settled(&self) -> ClusterStatus {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let leader = self.leader_of(&ids, 0).await;
            let mut behind = Vec::new();
            for (id, node) in &self.nodes {
                match status_of(node).await {
                    Ok(status)
                        if status.leader_id == Some(leader.node_id)
                            && status.applied_index >= leader.last_log_index => {}
                    other => behind.push((*id, other)),
                }
            }
            if behind.is_empty() {
                return leader;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the nodes did not all apply the leader's log within {SETTLE:?}: leader \
                 {leader:?}, behind {behind:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Node `node`'s view of the cluster.
async fn status_of(node: &BinaryServer) -> Result<ClusterStatus, Status> {
    let config = tapedeck::client::ClientConfig::new(node.addr.to_string());
    let client = tapedeck::client::Client::connect(config).await?;
    client.cluster_status().await
}

/// What node `node` knows of conversation `id`, without what is local to it (its readers).
async fn recording_on(node: &BinaryServer, id: &[u8]) -> tapedeck::pb::tapedeck::Recording {
    let mut recording = node
        .recordings()
        .await
        .get(GetRecordingRequest {
            conversation_id: id.to_vec(),
        })
        .await
        .unwrap_or_else(|err| panic!("Get {}: {err:?}", String::from_utf8_lossy(id)))
        .into_inner();
    recording.live_readers = 0;
    recording
}

fn tokens(tag: &str) -> Vec<String> {
    (0..TOKENS).map(|i| format!("{tag}-{i}|")).collect()
}

/// The byte offset just after each of `tokens`.
fn ends(tokens: &[String]) -> Vec<u64> {
    tokens
        .iter()
        .scan(0, |end, token| {
            *end += token.len() as u64;
            Some(*end)
        })
        .collect()
}

/// How a legacy producer's stream ended.
#[derive(Debug)]
enum LegacyEnd {
    /// Every token acknowledged, then closed with OK.
    Completed,
    /// A response with `success=false`.
    Refused(String),
    /// The call failed.
    Failed(Status),
    /// No response within [`SETTLE`]: the producer gave up on it.
    Stalled,
}

/// Streams `tokens` to `id` on the legacy API, waiting for each acknowledgement before the
/// next token, and for `gate` before the token at [`GATE_AT`]; `acked` is its ledger, the
/// committed length the last acknowledgement gave (`from` before any).
async fn stream_legacy(
    client: ResumerClient,
    id: Vec<u8>,
    tokens: Vec<String>,
    from: u64,
    mut gate: watch::Receiver<bool>,
    acked: watch::Sender<u64>,
) -> LegacyEnd {
    let ends: Vec<u64> = ends(&tokens).iter().map(|end| end + from).collect();
    let mut first = token(&id, &tokens[0], tokens.len() == 1);
    first.resume_from_offset = (from > 0).then_some(from as i64);
    let producer = LegacyProducer::try_open(&client, Some(first), 4).await;
    let mut producer = match producer {
        Ok(producer) => producer,
        Err(status) => return LegacyEnd::Failed(status),
    };
    for (i, text) in tokens.iter().enumerate() {
        if i > 0 {
            if i == GATE_AT {
                gate.wait_for(|open| *open).await.unwrap();
            }
            producer.send(b"", text, i + 1 == tokens.len()).await;
        }
        match tokio::time::timeout(SETTLE, producer.acks.message()).await {
            Err(_) => return LegacyEnd::Stalled,
            Ok(Err(status)) => return LegacyEnd::Failed(status),
            Ok(Ok(None)) => panic!("the stream closed before token {i} was acknowledged"),
            Ok(Ok(Some(ack))) if !ack.success => return LegacyEnd::Refused(ack.error_message),
            Ok(Ok(Some(ack))) => {
                assert_eq!(ack.current_offset as u64, ends[i], "token {i}: {ack:?}");
                acked.send_replace(ends[i]);
            }
        }
    }
    match tokio::time::timeout(SETTLE, producer.acks.message()).await {
        Ok(Ok(None)) => LegacyEnd::Completed,
        other => panic!("the completed stream did not close with OK: {other:?}"),
    }
}

/// Streams `tokens` to `id` in one Record call (a resume from `from`, if given): those before
/// [`GATE_AT`], then, once `gate` opens, the rest and `complete=true`; returns the answer.
async fn stream_current(
    client: RecorderClient,
    id: Vec<u8>,
    tokens: Vec<String>,
    from: Option<u64>,
    mut gate: watch::Receiver<bool>,
) -> Result<RecordResponse, Status> {
    let first = RecordRequest {
        conversation_id: id,
        resume_from_offset: from.map(|from| from as i64),
        ..Default::default()
    };
    let recording = Recording::open_with(&client, first).await;
    for (i, text) in tokens.iter().enumerate() {
        if i == GATE_AT {
            gate.wait_for(|open| *open).await.unwrap();
        }
        // The call may have ended already (refused); its answer says why.
        if recording
            .tx
            .send(RecordRequest {
                content: text.clone(),
                ..Default::default()
            })
            .await
            .is_err()
        {
            break;
        }
    }
    let _ = recording
        .tx
        .send(RecordRequest {
            complete: true,
            ..Default::default()
        })
        .await;
    tokio::time::timeout(SETTLE, recording.answer)
        .await
        .expect("Record did not answer in time")
        .unwrap()
}

/// A gate open from the start.
fn open_gate() -> watch::Receiver<bool> {
    watch::channel(true).1
}

/// What differs, on any node, from what `expected` says each conversation holds: its replay
/// (text, end offset, `completed` in its trailer), and its Get, which every node must answer
/// alike.
async fn divergences(cluster: &Partitioned, expected: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = Vec::new();
    for (name, text) in expected {
        let mut first: Option<(u64, tapedeck::pb::tapedeck::Recording)> = None;
        for (id, node) in &cluster.nodes {
            let replayed = replay_text(&node.recorder().await, name.as_bytes())
                .await
                .unwrap_or_else(|err| panic!("{name} on node {id}: {err:?}"));
            if replayed.text != *text {
                found.push(format!(
                    "{name} on node {id}: {} bytes replayed, not the {} expected",
                    replayed.text.len(),
                    text.len()
                ));
            }
            let end = (replayed.status.as_deref(), replayed.end_offset);
            if end != (Some("completed"), Some(text.len() as u64)) {
                found.push(format!("{name} on node {id}: the replay ended {end:?}"));
            }
            let recording = recording_on(node, name.as_bytes()).await;
            match &first {
                None => first = Some((*id, recording)),
                Some((other, theirs)) if recording != *theirs => found.push(format!(
                    "{name}: node {id}'s Get {recording:?} is not node {other}'s {theirs:?}"
                )),
                Some(_) => {}
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_acknowledges_nothing_and_the_rest_go_on_without_divergence() {
    let cluster = Partitioned::start();
    let before = cluster.leader_of(&[1, 2, 3], 0).await;
    let cut_off = before.node_id;
    let rest: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != cut_off).collect();

    // On every node a legacy producer (acknowledged token by token: the ledger) and a
    // Record call (acknowledged at its end), each to its own conversation.
    let (open, gate) = watch::channel(false);
    let mut legacy = BTreeMap::new();
    let mut current = BTreeMap::new();
    for (id, node) in &cluster.nodes {
        let name = format!("legacy-{id}");
        let (acked, ledger) = watch::channel(0);
        let run = tokio::spawn(stream_legacy(
            node.resumer().await,
            name.clone().into_bytes(),
            tokens(&name),
            0,
            gate.clone(),
            acked,
        ));
        legacy.insert(*id, (name, ledger, run));
        let name = format!("current-{id}");
        let run = tokio::spawn(stream_current(
            node.recorder().await,
            name.clone().into_bytes(),
            tokens(&name),
            None,
            gate.clone(),
        ));
        current.insert(*id, (name, run));
    }
    for (name, ledger, _) in legacy.values_mut() {
        let enough = ends(&tokens(name))[CUT_AFTER - 1];
        tokio::time::timeout(SETTLE, ledger.wait_for(|acked| *acked >= enough))
            .await
            .unwrap_or_else(|_| panic!("{name}: {CUT_AFTER} tokens not acknowledged in time"))
            .unwrap();
    }
    cluster.isolate(cut_off);
    open.send_replace(true);

    // The two connected nodes elect a leader of their own, and their producers finish.
    let after = cluster.leader_of(&rest, before.term).await;
    assert_ne!(after.node_id, cut_off);
    for id in &rest {
        let (name, ledger, run) = legacy.remove(id).unwrap();
        let end = run.await.unwrap();
        assert!(
            matches!(end, LegacyEnd::Completed),
            "{name} on node {id}: {end:?}"
        );
        assert_eq!(*ledger.borrow(), ends(&tokens(&name))[TOKENS - 1], "{name}");
        let (name, run) = current.remove(id).unwrap();
        let answer = run.await.unwrap();
        assert!(
            matches!(&answer, Ok(answer) if answer.status == RecordStatus::Success as i32),
            "{name} on node {id}: {answer:?}"
        );
    }

    // The cut-off node says it cannot commit (or, on the legacy API, stops acknowledging),
    // and acknowledged nothing the majority lacks. What it said is a finding, not a stop: the
    // test goes on to show what the partition left behind.
    let mut findings = Vec::new();
    let (legacy_name, legacy_ledger, run) = legacy.remove(&cut_off).unwrap();
    let end = run.await.unwrap();
    let says_so = match &end {
        LegacyEnd::Refused(message) => message.contains("cannot commit"),
        LegacyEnd::Failed(status) => status.code() == Code::Unavailable,
        LegacyEnd::Stalled => true,
        LegacyEnd::Completed => false,
    };
    if !says_so {
        findings.push(format!(
            "{legacy_name} on the cut-off node {cut_off} ended {end:?}, not saying it cannot commit"
        ));
    }
    let (current_name, run) = current.remove(&cut_off).unwrap();
    let answer = run.await.unwrap();
    if !matches!(&answer, Err(status) if status.code() == Code::Unavailable) {
        findings.push(format!(
            "{current_name} on the cut-off node {cut_off} was answered {answer:?}, not UNAVAILABLE"
        ));
    }
    let acked = *legacy_ledger.borrow();
    let majority = &cluster.nodes[&after.node_id];
    let held = recording_on(majority, legacy_name.as_bytes()).await;
    assert!(
        held.byte_length >= acked,
        "the cut-off node acknowledged {acked} bytes of {legacy_name}; the majority holds {}",
        held.byte_length
    );

    // Their clients resume on a connected node: the legacy one from its last acknowledged
    // offset, the Record call (which had nothing acknowledged) from the start.
    let legacy_tokens = tokens(&legacy_name);
    let done = ends(&legacy_tokens)
        .iter()
        .position(|end| *end == acked)
        .map_or(0, |last| last + 1);
    assert!(acked == 0 || done > 0, "{acked} is not a token boundary");
    let (resumed_acked, resumed_ledger) = watch::channel(acked);
    let end = stream_legacy(
        majority.resumer().await,
        legacy_name.clone().into_bytes(),
        legacy_tokens[done..].to_vec(),
        acked,
        open_gate(),
        resumed_acked,
    )
    .await;
    assert!(
        matches!(end, LegacyEnd::Completed),
        "{legacy_name} resumed: {end:?}"
    );
    assert_eq!(*resumed_ledger.borrow(), ends(&legacy_tokens)[TOKENS - 1]);
    let answer = stream_current(
        majority.recorder().await,
        current_name.clone().into_bytes(),
        tokens(&current_name),
        Some(0),
        open_gate(),
    )
    .await;
    assert!(
        matches!(&answer, Ok(answer) if answer.status == RecordStatus::Success as i32),
        "{current_name} resumed: {answer:?}"
    );

    cluster.heal();
    let settled = cluster.settled().await;
    assert!(settled.term >= after.term, "{settled:?}");
    let expected: BTreeMap<String, String> = (1..=3)
        .flat_map(|id| [format!("legacy-{id}"), format!("current-{id}")])
        .map(|name| {
            let text = tokens(&name).concat();
            (name, text)
        })
        .collect();
    findings.extend(divergences(&cluster, &expected).await);
    assert!(
        findings.is_empty(),
        "node {cut_off} was cut off while it led:\n{}",
        findings.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_follower_catches_up_after_the_heal() {
    let cluster = Partitioned::start();
    let before = cluster.leader_of(&[1, 2, 3], 0).await;
    let leader = before.node_id;
    let follower = *cluster.nodes.keys().find(|id| **id != leader).unwrap();
    cluster.isolate(follower);

    // The leader and the other follower are a majority: a producer on the leader completes.
    let name = "while-cut".to_string();
    let answer = stream_current(
        cluster.nodes[&leader].recorder().await,
        name.clone().into_bytes(),
        tokens(&name),
        None,
        open_gate(),
    )
    .await;
    assert!(
        matches!(&answer, Ok(answer) if answer.status == RecordStatus::Success as i32),
        "{answer:?}"
    );
    // The follower has not heard of it.
    let unseen = replay_text(&cluster.nodes[&follower].recorder().await, name.as_bytes()).await;
    assert!(
        matches!(&unseen, Err(status) if status.code() == Code::NotFound),
        "the cut-off follower replayed {name}: {:?}",
        unseen.map(|replayed| (replayed.text.len(), replayed.status))
    );

    cluster.heal();
    cluster.settled().await;
    let expected = BTreeMap::from([(name.clone(), tokens(&name).concat())]);
    let found = divergences(&cluster, &expected).await;
    assert!(found.is_empty(), "{}", found.join("\n"));
}
