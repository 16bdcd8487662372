//! A cluster whose disks fail: libfiu is preloaded into every node (`common::fiu`), and a
//! legacy producer on the leader has each token acknowledged only once a majority has synced
//! it. With one follower's syncs failing (EIO), or its writes (ENOSPC), the leader and the
//! other follower still make a majority; with both followers failing, no token may be
//! acknowledged (a node whose sync fails must not count towards a majority). With the leader's syncs failing, it acknowledges
//! nothing more, says why and stops, and the others elect a leader that takes new recordings.
//! After every node is restarted, every acknowledged byte is on every node.
use crate::common;

use std::time::Duration;

use common::fiu::*;
use common::trio::Trio;
use common::*;

/// The recording, read on node `id` until it has ended (the restarts left it detached; with
/// no grace it ends at once), must hold `acked` and nothing never `sent`.
async fn holds(trio: &Trio, id: u64, name: &[u8], acked: &str, sent: &str) {
    let client = trio.nodes[&id].recorder().await;
    let deadline = tokio::time::Instant::now() + WAIT * 3;
    let replayed = loop {
        match tokio::time::timeout(WAIT, replay_text(&client, name)).await {
            Ok(Ok(replayed)) if replayed.status.is_some() => break replayed,
            _ if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("node {id}: {other:?}"),
        }
    };
    assert_kept(&replayed.text, acked, sent, &format!("node {id}"));
}

/// Sends `text`; returns the committed length an acknowledgement then reports, if one comes
/// (acknowledgements are in order; one read here may be of an earlier token's, so the length
/// it reports is what counts).
async fn sent_and_acked(producer: &mut LegacyProducer, name: &[u8], text: &str) -> Option<usize> {
    // A proposal waits up to 5 s for a majority before it is refused.
    sent_and_acked_within(producer, name, text, WAIT).await
}

/// As [`sent_and_acked`], waiting up to `limit` for the answer.
async fn sent_and_acked_within(
    producer: &mut LegacyProducer,
    name: &[u8],
    text: &str,
    limit: Duration,
) -> Option<usize> {
    producer.tx.send(token(name, text, false)).await.ok()?;
    match tokio::time::timeout(limit, producer.acks.message()).await {
        Ok(Ok(Some(ack))) if ack.success => Some(ack.current_offset as usize),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_whose_syncs_fail_do_not_make_a_majority() {
    followers_fail_one_then_both(fail_syncs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_whose_disks_are_full_do_not_make_a_majority() {
    followers_fail_one_then_both(|prefix, pid| {
        fiu(
            prefix,
            pid,
            &format!("enable name=posix/io/rw/pwrite,failinfo={ENOSPC}"),
        );
    })
    .await;
}

/// A producer on the leader is acknowledged while `fail` has broken one follower's disk (the
/// leader and the other follower are a majority), and not once it has broken both; after a
/// restart of every node, every acknowledged byte is on every node.
async fn followers_fail_one_then_both(fail: impl Fn(&std::path::Path, i32)) {
    require_libfiu();
    let fifo = tempfile::tempdir().unwrap();
    let prefix = fifo.path().join("fiu-ctrl");
    let mut trio = Trio::start_with_env(&["--producer-grace", "0s"], &preloaded(&prefix));
    let leader = trio.leader().await;
    let followers = trio.others(leader);
    let name = b"synced-on-a-majority";
    let resumer = trio.nodes[&leader].resumer().await;
    let mut producer = LegacyProducer::start(&resumer, name, "t0 ").await;
    assert!(producer.ack().await.success);
    let (mut acked, mut sent) = (String::from("t0 "), String::from("t0 "));

    fail(&prefix, trio.nodes[&followers[0]].pid());
    for i in 1..20 {
        let text = format!("t{i} ");
        sent.push_str(&text);
        let committed = sent_and_acked(&mut producer, name, &text).await;
        assert_eq!(
            committed,
            Some(sent.len()),
            "{text}: the leader and a sound follower are a majority"
        );
        acked.push_str(&text);
    }
    fail(&prefix, trio.nodes[&followers[1]].pid());
    let text = "t20 ";
    sent.push_str(text);
    assert_eq!(
        sent_and_acked(&mut producer, name, text).await,
        None,
        "acknowledged with both followers' disks failing"
    );
    drop(producer);

    for id in trio.kill_and_restart_all().await {
        holds(&trio, id, name, &acked, &sent).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_syncs_fail_stops_and_is_replaced_and_nothing_acknowledged_is_lost() {
    require_libfiu();
    let fifo = tempfile::tempdir().unwrap();
    let prefix = fifo.path().join("fiu-ctrl");
    let mut trio = Trio::start_with_env(&["--producer-grace", "0s"], &preloaded(&prefix));
    let leader = trio.leader().await;
    let follower = trio.others(leader)[0];
    let name = b"leader-disk-fails";
    let resumer = trio.nodes[&leader].resumer().await;
    let mut producer = LegacyProducer::start(&resumer, name, "t0 ").await;
    assert!(producer.ack().await.success);
    let (mut acked, mut sent) = (String::from("t0 "), String::from("t0 "));
    // A producer on a follower too, its session forwarded to the leader.
    let forwarded = b"through-a-follower";
    let through = trio.nodes[&follower].resumer().await;
    let mut other = LegacyProducer::start(&through, forwarded, "f0 ").await;
    assert!(other.ack().await.success);
    let mut other_sent = String::from("f0 ");
    for i in 1..10 {
        let text = format!("t{i} ");
        sent.push_str(&text);
        let committed = sent_and_acked(&mut producer, name, &text).await;
        assert_eq!(committed, Some(sent.len()), "{text}");
        acked.push_str(&text);
        let text = format!("f{i} ");
        other_sent.push_str(&text);
        let committed = sent_and_acked(&mut other, forwarded, &text).await;
        assert_eq!(committed, Some(other_sent.len()), "{text}");
    }

    fail_syncs(&prefix, trio.nodes[&leader].pid());
    let text = "t10 ";
    sent.push_str(text);
    assert_eq!(
        sent_and_acked(&mut producer, name, text).await,
        None,
        "acknowledged by a leader whose log cannot sync"
    );
    drop(producer);
    // The follower's node moves its producer's session to the next leader: every token it
    // sends is acknowledged, none is lost or doubled.
    for i in 10..20 {
        let text = format!("f{i} ");
        other_sent.push_str(&text);
        // The first waits out the election and the hand-over, which a loaded machine (the
        // whole suite on two cores) slows down.
        let limit = if i == 10 { WAIT * 4 } else { WAIT };
        let committed = sent_and_acked_within(&mut other, forwarded, &text, limit).await;
        assert_eq!(
            committed,
            Some(other_sent.len()),
            "{text} through a follower, once the leader's disk failed"
        );
    }
    drop(other);
    let said = trio.lines_with("fdatasync failed");
    assert!(!said.is_empty(), "the leader's log says why it stopped");
    // The others elect a leader among themselves and take new recordings.
    let next = trio.leader().await;
    assert_ne!(
        next, leader,
        "a leader whose log cannot sync stays the leader"
    );
    record_all(
        &trio.nodes[&next].recorder().await,
        b"after",
        &["goes ", "on"],
    )
    .await;

    for id in trio.kill_and_restart_all().await {
        holds(&trio, id, name, &acked, &sent).await;
        holds(&trio, id, forwarded, &other_sent, &other_sent).await;
    }
}
