//! Three real `tapedeck` binaries as one cluster on loopback: each node's data dir, its gRPC
//! address and its cluster address fixed for the test's length (a node restarts where its
//! clients and peers know it), killed, wiped and restarted at will; who leads, as the nodes'
//! `tapedeck.v1.Cluster/Status` say.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tempfile::TempDir;

use super::{BinaryServer, LogLines, WAIT, free_port};

/// Three nodes' data dirs and addresses, and the nodes running now.
pub(crate) struct Trio {
    dirs: Vec<TempDir>,
    /// Each node's gRPC address, by id: the port its first start bound (port 0 picks it),
    /// kept across restarts.
    pub(crate) grpc: BTreeMap<u64, SocketAddr>,
    /// Each node's HTTP face, by id, when the trio serves it (else the face is off); as
    /// `grpc`.
    pub(crate) http: BTreeMap<u64, SocketAddr>,
    with_http: bool,
    /// The cluster's addresses: picked here, as every node must know the others' before any
    /// starts.
    peers: String,
    extra_args: Vec<String>,
    /// Environment variables every node is started with.
    envs: Vec<(String, String)>,
    pub(crate) nodes: BTreeMap<u64, BinaryServer>,
    /// Every log line of each node, all its runs together.
    logs: BTreeMap<u64, LogLines>,
}

impl Trio {
    /// Starts three nodes of a new cluster at once (each waits to hear from a leader before
    /// it forms the cluster itself), with `extra_args` on each.
    pub(crate) fn start(extra_args: &[&str]) -> Trio {
        Self::start_serving(extra_args, false, &[])
    }

    /// As [`Trio::start`], each node serving its HTTP face too.
    pub(crate) fn start_with_http(extra_args: &[&str]) -> Trio {
        Self::start_serving(extra_args, true, &[])
    }

    /// As [`Trio::start`], each node with the environment variables `envs` too.
    pub(crate) fn start_with_env(extra_args: &[&str], envs: &[(String, String)]) -> Trio {
        Self::start_serving(extra_args, false, envs)
    }

    /// As [`Trio::start_with_env`], each node serving its HTTP face too.
    pub(crate) fn start_with_http_and_env(extra_args: &[&str], envs: &[(String, String)]) -> Trio {
        Self::start_serving(extra_args, true, envs)
    }

    /// Starts the three nodes. Their cluster ports are picked here (each node must know the
    /// others' before any starts); one another process took before its node bound it makes
    /// that node exit ("Address already in use"), and the trio is started again on fresh ports
    /// and data dirs, a few times.
    fn start_serving(extra_args: &[&str], http: bool, envs: &[(String, String)]) -> Trio {
        const TRIES: usize = 5;
        for _ in 0..TRIES {
            let peers = (1..=3)
                .map(|id| format!("{id}={}", free_port()))
                .collect::<Vec<_>>()
                .join(",");
            let mut trio = Trio {
                dirs: (0..3).map(|_| tempfile::tempdir().unwrap()).collect(),
                grpc: BTreeMap::new(),
                http: BTreeMap::new(),
                with_http: http,
                peers,
                extra_args: extra_args.iter().map(|arg| arg.to_string()).collect(),
                envs: envs.to_vec(),
                nodes: BTreeMap::new(),
                logs: (1..=3).map(|id| (id, LogLines::default())).collect(),
            };
            let started: Vec<(u64, Result<BinaryServer, String>)> = std::thread::scope(|scope| {
                let spawns: Vec<_> = (1..=3)
                    .map(|id| {
                        let trio = &trio;
                        scope.spawn(move || (id, trio.spawn_node(id)))
                    })
                    .collect();
                spawns.into_iter().map(|s| s.join().unwrap()).collect()
            });
            if let Some((id, Err(log))) = started.iter().find(|(_, node)| node.is_err()) {
                if log.contains("Address already in use") {
                    // The nodes that did start are killed as they drop, with their data dirs.
                    continue;
                }
                panic!("node {id} exited before listening:\n{log}");
            }
            for (id, node) in started {
                let node = node.unwrap_or_else(|_| unreachable!("checked above"));
                trio.grpc.insert(id, node.addr);
                if let Some(http) = node.http_addr.filter(|_| trio.with_http) {
                    trio.http.insert(id, http);
                }
                trio.nodes.insert(id, node);
            }
            return trio;
        }
        panic!("no free cluster ports found in {TRIES} tries");
    }

    fn spawn_node(&self, id: u64) -> Result<BinaryServer, String> {
        let listen = self.cluster_addr(id).to_string();
        let id_text = id.to_string();
        let mut args = vec![
            "--node-id",
            &id_text,
            "--cluster-listen",
            &listen,
            "--cluster-peers",
            &self.peers,
        ];
        // Port 0 at the first start; the same port again after a restart.
        let any = || SocketAddr::from(([127, 0, 0, 1], 0));
        let http = self
            .with_http
            .then(|| self.http.get(&id).copied().unwrap_or_else(any).to_string());
        if let Some(http) = &http {
            args.extend(["--http-listen", http.as_str()]);
        }
        args.extend(self.extra_args.iter().map(String::as_str));
        let dir = self.dirs[(id - 1) as usize].path();
        BinaryServer::try_spawn_at(
            self.grpc.get(&id).copied().unwrap_or_else(any),
            dir,
            &args,
            self.logs[&id].clone(),
            &self.envs,
        )
    }

    /// Node `id`'s cluster port (`--cluster-listen`).
    pub(crate) fn cluster_addr(&self, id: u64) -> SocketAddr {
        self.peers
            .split(',')
            .find_map(|peer| peer.strip_prefix(&format!("{id}=")))
            .and_then(|addr| addr.parse().ok())
            .unwrap()
    }

    /// Starts node `id` again on its data dir and addresses.
    pub(crate) fn restart(&mut self, id: u64) {
        let node = self
            .spawn_node(id)
            .unwrap_or_else(|log| panic!("node {id} exited before listening:\n{log}"));
        self.nodes.insert(id, node);
    }

    /// SIGKILLs node `id`.
    pub(crate) fn kill(&mut self, id: u64) {
        self.nodes.remove(&id).unwrap().kill();
    }

    /// The nodes other than `id`, in id order.
    pub(crate) fn others(&self, id: u64) -> Vec<u64> {
        self.nodes
            .keys()
            .copied()
            .filter(|other| *other != id)
            .collect()
    }

    /// SIGKILLs every node, starts each again on its data dir and addresses, and waits until
    /// they have a leader; returns their ids.
    pub(crate) async fn kill_and_restart_all(&mut self) -> Vec<u64> {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in &ids {
            self.kill(*id);
        }
        for id in &ids {
            self.restart(*id);
        }
        self.leader().await;
        ids
    }

    /// Stops node `id` as an operator would (SIGTERM), and waits for it to exit.
    pub(crate) async fn stop(&mut self, id: u64) {
        let status = self.nodes.remove(&id).unwrap().terminate().await;
        assert!(status.success(), "node {id} stopped with {status}");
    }

    /// Node `id`'s data dir.
    pub(crate) fn data_dir(&self, id: u64) -> &std::path::Path {
        self.dirs[(id - 1) as usize].path()
    }

    /// Empties node `id`'s data dir (it must be stopped): its disk is lost.
    pub(crate) fn wipe(&self, id: u64) {
        let dir = self.dirs[(id - 1) as usize].path();
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::create_dir_all(dir).unwrap();
    }

    /// The node that leads now, within [`WAIT`]: the one that says it leads, once a majority
    /// of the nodes answer and every node that answers names it. While the first election
    /// settles, two nodes may each lead for a moment (openraft lets each node stand in a
    /// term; the higher id wins), so one node's word alone may name a node about to step down.
    pub(crate) async fn leader(&self) -> u64 {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let mut statuses = Vec::new();
            for (id, node) in &self.nodes {
                if let Ok(status) = status_of(node).await {
                    statuses.push((*id, status));
                }
            }
            let leading: Vec<u64> = statuses
                .iter()
                .filter(|(_, status)| status.role == "leader")
                .map(|(id, _)| *id)
                .collect();
            if let [leader] = leading[..]
                && statuses.len() > self.nodes.len() / 2
                && statuses
                    .iter()
                    .all(|(_, status)| status.leader_id == Some(leader))
            {
                return leader;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no node led within {WAIT:?}; the nodes' last words:\n{}",
                self.last_lines(12)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until no running node is rejoining (each has its vote), within `wait`: a node
    /// that lost its disk must be caught up before another may lose its own.
    pub(crate) async fn all_vote(&self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut rejoining = Vec::new();
            for (id, node) in &self.nodes {
                if !status_of(node).await.is_ok_and(|status| !status.rejoining) {
                    rejoining.push(*id);
                }
            }
            if rejoining.is_empty() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "nodes {rejoining:?} still rejoining after {wait:?}; their last words:\n{}",
                self.last_lines(12)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every running node has applied the leader's whole log, within `wait`.
    pub(crate) async fn converged(&self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let leader = self.leader().await;
            if let Ok(led) = status_of(&self.nodes[&leader]).await {
                let mut behind = Vec::new();
                for (id, node) in &self.nodes {
                    match status_of(node).await {
                        Ok(status) if status.applied_index >= led.last_log_index => {}
                        other => behind.push((*id, other.map(|s| s.applied_index).ok())),
                    }
                }
                if behind.is_empty() {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "nodes {behind:?} did not apply the leader's log (index {}) within {wait:?}; \
                     their errors:\n{}",
                    led.last_log_index,
                    self.errors(behind.iter().map(|(id, _)| *id))
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Trio {
    /// Fails the test unless some node installed a snapshot sent to it.
    pub(crate) fn assert_a_snapshot_was_installed(&self) {
        assert!(
            !self.lines_with("installed a snapshot").is_empty(),
            "no node was sent a snapshot; the nodes' last words:\n{}",
            self.last_lines(20)
        );
    }

    /// The last `n` lines each node logged.
    pub(crate) fn last_lines(&self, n: usize) -> String {
        self.logs
            .iter()
            .flat_map(|(id, lines)| {
                let lines = lines.lock().unwrap();
                // The calls logged are mostly the test's own status polls.
                let told: Vec<&String> = lines
                    .iter()
                    .filter(|line| !line.contains("tapedeck::grpc::telemetry"))
                    .collect();
                let from = told.len().saturating_sub(n);
                told[from..]
                    .iter()
                    .map(|line| format!("node {id}: {line}"))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The lines any node logged that contain `needle`.
    pub(crate) fn lines_with(&self, needle: &str) -> String {
        self.logs
            .iter()
            .flat_map(|(id, lines)| {
                let lines = lines.lock().unwrap();
                lines
                    .iter()
                    .filter(|line| line.contains(needle))
                    .map(|line| format!("node {id}: {line}"))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The error lines the nodes `ids` logged.
    pub(crate) fn errors(&self, ids: impl Iterator<Item = u64>) -> String {
        ids.flat_map(|id| {
            let lines = self.logs[&id].lock().unwrap();
            lines
                .iter()
                .filter(|line| line.contains("\"ERROR\"") || line.contains("panicked"))
                .map(|line| format!("node {id}: {line}"))
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .join("\n")
    }
}

/// Node `node`'s view of the cluster.
pub(crate) async fn status_of(
    node: &BinaryServer,
) -> Result<tapedeck::pb::tapedeck::ClusterStatus, tonic::Status> {
    let config = tapedeck::client::ClientConfig::new(node.addr.to_string());
    let client = tapedeck::client::Client::connect(config).await?;
    client.cluster_status().await
}

/// With `TAPEDECK_TEST_LOGS=DIR`, every node's log is kept in `DIR/node-N.log` when the trio
/// goes, to read after a failed run.
impl Drop for Trio {
    fn drop(&mut self) {
        let Ok(dir) = std::env::var("TAPEDECK_TEST_LOGS") else {
            return;
        };
        // The test's thread is named after it: each test's nodes in a directory of their own.
        let test = std::thread::current()
            .name()
            .unwrap_or("trio")
            .replace("::", "-");
        let dir = format!("{dir}/{test}");
        let _ = std::fs::create_dir_all(&dir);
        for (id, lines) in &self.logs {
            let lines = lines.lock().unwrap_or_else(|e| e.into_inner());
            let _ = std::fs::write(format!("{dir}/node-{id}.log"), lines.join("\n"));
        }
    }
}
