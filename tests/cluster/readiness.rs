//! `/readyz` and gRPC health on the nodes of a cluster, through its first election, the loss of
//! its leader, the loss of its majority and a node's return: ready while a leader is known and
//! the node has applied what that leader had committed; both probes always say the same.
use crate::common;

use std::net::SocketAddr;

use common::WAIT;
use common::trio::Trio;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// What node `id` says of itself: `/readyz`'s status and body, and gRPC health's status (1
/// SERVING, 2 NOT_SERVING).
async fn readiness(trio: &Trio, id: u64) -> (u16, String, i32) {
    let http: SocketAddr = trio.http[&id];
    let readyz = reqwest::get(format!("http://{http}/readyz")).await.unwrap();
    let status = readyz.status().as_u16();
    let body = readyz.text().await.unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", trio.grpc[&id]))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let request = HealthCheckRequest {
        service: String::new(),
    };
    let health = HealthClient::new(channel).check(request).await.unwrap();
    (status, body, health.into_inner().status)
}

/// Waits until node `id` is ready (`ready`) or not, by both probes at once.
async fn until(trio: &Trio, id: u64, ready: bool) -> (u16, String, i32) {
    let mut seen = None;
    let reached = tokio::time::timeout(WAIT, async {
        loop {
            let said = readiness(trio, id).await;
            let expected = if ready { (200, 1) } else { (503, 2) };
            if (said.0, said.2) == expected {
                return said;
            }
            seen = Some(said);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    reached.unwrap_or_else(|_| {
        panic!("node {id} was not ready={ready} within {WAIT:?}; it said {seen:?}")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_while_a_leader_is_known_and_its_log_applied_and_both_probes_agree() {
    let mut trio = Trio::start_with_http(&[]);
    // The first election: every node becomes ready.
    let leader = trio.leader().await;
    for id in [1, 2, 3] {
        let said = until(&trio, id, true).await;
        assert_eq!(said.1, "ready\n", "node {id}");
    }
    // The leader is lost: the other two elect another and are ready again.
    trio.kill(leader);
    let rest = trio.others(leader);
    let next = trio.leader().await;
    assert_ne!(next, leader);
    for &id in &rest {
        until(&trio, id, true).await;
    }
    // A majority is lost: the last node knows no leader, and says so.
    let follower = rest.iter().copied().find(|&id| id != next).unwrap();
    trio.kill(next);
    let said = until(&trio, follower, false).await;
    assert!(
        said.1.starts_with("not ready: no leader is known"),
        "node {follower}: {said:?}"
    );
    // Not ready, but alive: /healthz answers.
    let healthz = reqwest::get(format!("http://{}/healthz", trio.http[&follower]))
        .await
        .unwrap();
    assert_eq!(healthz.status().as_u16(), 200);
    // A node comes back: a leader again, and both are ready once they have applied its log.
    trio.restart(leader);
    for id in [follower, leader] {
        until(&trio, id, true).await;
    }
}
