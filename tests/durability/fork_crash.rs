//! A fork and its source's fork count are one commit: the real binary is SIGKILLed while
//! forks of one source are being made, at a different point each round; after the restarts
//! every fork answered 201 exists, and the source's count is exactly the forks that exist, so deleting them and then the source
//! lets the source go (a count left over would keep it, soft-deleted, for ever).
use crate::common;

use std::path::Path;

use common::*;
use reqwest::StatusCode;

/// Rounds of forking and killing.
const ROUNDS: usize = 6;
/// Clients forking at once.
const FORKERS: usize = 8;

/// Starts the binary with its HTTP face; returns it and the face's stream URL prefix.
fn serve(dir: &Path) -> (BinaryServer, String) {
    let server = BinaryServer::spawn(dir, &["--http-listen", "127.0.0.1:0"]);
    let base = format!("{}/v1/stream", server.http_base());
    (server, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fork_and_its_source_count_survive_a_sigkill_together() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let (server, base) = serve(dir.path());
    let created = client
        .put(format!("{base}/source"))
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .body("inherited bytes")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    drop(server);

    let mut attempted = Vec::new();
    // Forks answered 201: each must exist after the restarts.
    let mut acknowledged = std::collections::HashSet::new();
    for round in 0..ROUNDS {
        let (server, base) = serve(dir.path());
        let (made, mut forks_made) = tokio::sync::mpsc::unbounded_channel();
        let (names, mut tried) = tokio::sync::mpsc::unbounded_channel();
        let forkers: Vec<_> = (0..FORKERS)
            .map(|forker| {
                let (client, base, made, names) =
                    (client.clone(), base.clone(), made.clone(), names.clone());
                tokio::spawn(async move {
                    for i in 0.. {
                        let name = format!("fork-{round}-{forker}-{i}");
                        let _ = names.send(name.clone());
                        let forked = client
                            .put(format!("{base}/{name}"))
                            .header("stream-forked-from", "source")
                            .send()
                            .await;
                        match forked {
                            Ok(r) if r.status() == StatusCode::CREATED => {
                                let _ = made.send(name);
                            }
                            Ok(r) => panic!("fork {name}: {}", r.status()),
                            Err(_) => return, // the server was killed
                        }
                    }
                })
            })
            .collect();
        // A different point each round, with forks in flight on every client.
        for _ in 0..(3 + 5 * round) {
            let name = tokio::time::timeout(WAIT, forks_made.recv())
                .await
                .expect("forks stopped being made")
                .unwrap();
            acknowledged.insert(name);
        }
        server.kill();
        for forker in forkers {
            forker.await.unwrap();
        }
        drop(made);
        while let Some(name) = forks_made.recv().await {
            acknowledged.insert(name);
        }
        drop(names);
        while let Some(name) = tried.recv().await {
            attempted.push(name);
        }
    }

    let (server, base) = serve(dir.path());
    let mut existing = 0;
    for name in &attempted {
        let head = client.head(format!("{base}/{name}")).send().await.unwrap();
        match head.status() {
            StatusCode::OK => {
                existing += 1;
                let deleted = client
                    .delete(format!("{base}/{name}"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(deleted.status(), StatusCode::NO_CONTENT, "{name}");
            }
            StatusCode::NOT_FOUND => assert!(
                !acknowledged.contains(name),
                "fork {name} was answered 201, and is gone after the restart"
            ),
            other => panic!("fork {name}: {other}"),
        }
    }
    assert!(existing > 0, "no fork was made");
    assert!(existing >= acknowledged.len());
    let deleted = client
        .delete(format!("{base}/source"))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    // Its last fork is gone, so the source goes at once: not kept soft-deleted (410).
    let head = client.head(format!("{base}/source")).send().await.unwrap();
    assert_eq!(
        head.status(),
        StatusCode::NOT_FOUND,
        "the source outlived its {existing} forks: a count survived without its fork"
    );
    drop(server);
}
