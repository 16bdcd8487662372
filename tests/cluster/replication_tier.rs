//! A cluster of three real binaries with the object-store tier on a real S3 server (SeaweedFS):
//! ended recordings are sealed and their local chunks dropped through the log, on every node;
//! a node that lost its disk is sent a snapshot without them, and serves them from the object
//! store.
use crate::common;

use std::time::Duration;

use common::seaweed::Seaweed;
use common::trio::Trio;
use common::{WAIT, record_all, replay_text};
use tapedeck::pb::tapedeck::{GetRecordingRequest, Location};

/// How long sealing a few recordings may take.
const SEAL_WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_leaves_out_what_the_object_store_holds() {
    let s3 = Seaweed::start();
    let url = s3.url("cluster");
    let mut trio = Trio::start_with_env(
        &[
            "--object-store",
            &url,
            "--local-retention",
            "0s",
            "--producer-grace",
            "0s",
            "--cluster-snapshot-every",
            "10",
        ],
        &s3.env(),
    );
    let leader = trio.leader().await;
    let recorder = trio.nodes[&leader].recorder().await;
    // 20 recordings of 64 KiB each: 1.25 MiB of chunks in all.
    let token = "x".repeat(1024);
    let tokens: Vec<&str> = (0..64).map(|_| token.as_str()).collect();
    let ids: Vec<Vec<u8>> = (0..20)
        .map(|n| format!("sealed-{n}").into_bytes())
        .collect();
    for id in &ids {
        record_all(&recorder, id, &tokens).await;
    }
    let recordings = trio.nodes[&leader].recordings().await;
    let deadline = tokio::time::Instant::now() + SEAL_WAIT;
    for id in &ids {
        loop {
            let request = GetRecordingRequest {
                conversation_id: id.clone(),
            };
            let got = recordings.clone().get(request).await.unwrap().into_inner();
            if got.location() == Location::ObjectStore {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{id:?} is still at {:?}",
                got.location()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Entries enough after the drops that the next snapshot is built without their chunks.
    for n in 0..12 {
        record_all(&recorder, format!("small-{n}").as_bytes(), &["a", "b"]).await;
    }
    let follower = *trio.nodes.keys().find(|id| **id != leader).unwrap();
    trio.kill(follower);
    trio.wipe(follower);
    trio.restart(follower);
    trio.all_vote(WAIT).await;
    trio.assert_a_snapshot_was_installed();
    let snapshot = trio.data_dir(follower).join("raft").join("snapshot");
    let size = std::fs::metadata(&snapshot).unwrap().len();
    eprintln!("the snapshot the wiped node received: {size} bytes");
    assert!(
        size < 256 * 1024,
        "the snapshot the wiped node received is {size} bytes: the sealed chunks travelled"
    );
    let client = trio.nodes[&follower].recorder().await;
    for id in [&ids[0], &ids[19]] {
        let replayed = replay_text(&client, id).await.unwrap();
        assert_eq!(replayed.text, token.repeat(64), "{id:?}");
    }
}
