//! Whether this server takes traffic. `GET /readyz` on the HTTP face and gRPC health say the
//! same, from one value: ready once the store is open (its log replayed, before any face
//! serves); on a node of a cluster, while a leader is known and this node has applied what it
//! had committed when this process first heard from it; never again once shutting down.
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cluster::Cluster;
use crate::grpc::Health;

/// Why the server is not ready, in words for a probe's answer; `None` when it is.
pub type Unready = Option<String>;

/// The readiness both faces read. Clones share it.
#[derive(Clone, Debug)]
pub struct Readiness {
    state: watch::Sender<Unready>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            state: watch::Sender::new(Some("starting".into())),
        }
    }
}

impl Readiness {
    /// Why the server is not ready now, if it is not.
    pub fn unready(&self) -> Unready {
        self.state.borrow().clone()
    }

    /// Sets the readiness from `cluster` (a single node is ready), and gRPC `health` with it.
    pub async fn update(&self, cluster: Option<&Cluster>, health: &Health) {
        let unready = cluster.and_then(Cluster::unready);
        self.set(unready, health).await;
    }

    async fn set(&self, unready: Unready, health: &Health) {
        let ready = unready.is_none();
        let changed = self.state.send_if_modified(|state| {
            let changed = *state != unready;
            *state = unready;
            changed
        });
        if changed {
            health.set_serving(ready).await;
        }
    }

    /// Keeps the readiness up to date as `cluster`'s state changes, until `shutting_down` is
    /// cancelled; then says "shutting down" (and gRPC health NOT_SERVING) for good.
    pub async fn follow(
        self,
        cluster: Option<Cluster>,
        health: Health,
        shutting_down: CancellationToken,
    ) {
        let mut changes = cluster.as_ref().map(|cluster| cluster.raft().metrics());
        loop {
            self.update(cluster.as_ref(), &health).await;
            tokio::select! {
                () = shutting_down.cancelled() => break,
                Some(()) = changed(&mut changes) => {}
            }
        }
        self.set(Some("shutting down".into()), &health).await;
    }
}

/// Resolves once the cluster's state changes; never for a single node, or once its Raft stopped.
async fn changed<T>(changes: &mut Option<watch::Receiver<T>>) -> Option<()> {
    if let Some(changes) = changes
        && changes.changed().await.is_ok()
    {
        return Some(());
    }
    std::future::pending().await
}
