//! One simulated node: the turmoil host software that opens its store and Raft log on its own
//! simulated disk, serves the other nodes, takes part in leading, and runs the workload's jobs.
//! Its disk outlives each boot; a power cut swaps it for what the cut left.
use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tapedeck_store::sim_disk::{Faults, SimDisk};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::ledger::{Ledger, Read, Replayed};
use super::net::{self, Connector};
use crate::clock::Clock;
use crate::cluster::node::{Timing, Wiring};
use crate::cluster::{Cluster, ClusterConfig, NodeId, network::Dialer};
use crate::id::ConversationId;
use crate::recorder::{Limits, LivePolicy, Recorder};
use crate::store::{Store, StoreOptions};

/// The port every node serves the others on.
pub(super) const PORT: u16 = 7000;

/// How long a detached recording waits for its producer: short, so that every recording a
/// fault left live ends within a seed.
const GRACE: Duration = Duration::from_millis(500);

/// How long (simulated) a replay has to reach the recording's end once the nodes agree.
pub(super) const READ_WITHIN: Duration = Duration::from_secs(30);

/// A node's host name on the simulated network.
pub(super) fn host(id: NodeId) -> String {
    format!("node{id}")
}

/// What the harness asks of a running node.
pub(super) enum Job {
    /// Records conversation `conversation` of the ledger through this node (forwarded to the
    /// leader, as the gRPC face does), resuming it if it was begun; says on `lost` when the
    /// session failed before the end, for the producer to resume through another node.
    Produce {
        conversation: usize,
        lost: mpsc::UnboundedSender<usize>,
    },
    /// Replays a conversation here to its end; answers what it read.
    Read {
        conversation: usize,
        answer: oneshot::Sender<Read>,
    },
}

/// One node: its settings, its disk across boots, and its current boot's handles.
pub(super) struct Slot {
    pub(super) id: NodeId,
    /// A real directory for the snapshot files (none is taken in a seed's length).
    dir: PathBuf,
    /// The disk the next boot opens.
    disk: Mutex<SimDisk>,
    /// This node's wall clock runs this far ahead (or behind).
    skew_ms: i64,
    /// How fast its Raft timers run.
    timing: Timing,
    /// Draws the duplicated RPCs.
    connector: Connector,
    /// The running boot, if any.
    running: Mutex<Option<Running>>,
}

/// A boot's handles, for the harness.
#[derive(Clone)]
pub(super) struct Running {
    pub(super) cluster: Cluster,
    pub(super) jobs: mpsc::UnboundedSender<Job>,
}

impl Slot {
    pub(super) fn new(
        id: NodeId,
        dir: PathBuf,
        seed: u64,
        faults: Faults,
        skew_ms: i64,
        scale: f64,
        duplicates: f64,
    ) -> Slot {
        Slot {
            id,
            dir,
            disk: Mutex::new(SimDisk::new(seed, faults)),
            skew_ms,
            timing: Timing { scale },
            connector: Connector::new(seed ^ 0x5eed, duplicates),
            running: Mutex::new(None),
        }
    }

    /// The running boot's handles, if the node is up.
    pub(super) fn running(&self) -> Option<Running> {
        lock(&self.running).clone()
    }

    /// Cuts the node's power: its disk keeps what was synced (and maybe part of the rest);
    /// the harness crashes its host in the same step.
    pub(super) fn power_cut(&self) {
        tracing::info!(node = self.id, "the power is cut");
        let mut disk = lock(&self.disk);
        let after = disk.power_cut();
        *disk = after;
        *lock(&self.running) = None;
    }

    /// The host software of one boot: runs until the host is crashed.
    pub(super) async fn boot(
        self: Arc<Self>,
        ledger: Arc<Ledger>,
    ) -> Result<(), Box<dyn StdError>> {
        let disk = lock(&self.disk).clone();
        let options = StoreOptions {
            clock: Arc::new(Skewed(self.skew_ms)),
            replicated: true,
            files: Arc::new(disk.clone()),
            ..StoreOptions::default()
        };
        let store = Store::open(&self.dir.join("tapedeck.redb"), options)?;
        let policy = LivePolicy {
            grace: GRACE,
            ..LivePolicy::default()
        };
        let recorder = Recorder::new(store, limits(), policy);
        let peers: BTreeMap<NodeId, String> = (1..=3)
            .map(|id| (id, format!("{}:{PORT}", host(id))))
            .collect();
        let config = ClusterConfig {
            node_id: self.id,
            listen: ([0, 0, 0, 0], PORT).into(),
            peers,
            snapshot_every: 1_000_000,
        };
        let wiring = Wiring {
            files: Arc::new(disk),
            dialer: Dialer::Simulated(self.connector.clone()),
            timing: self.timing,
        };
        let cluster = Cluster::open(&config, &self.dir, &recorder, None, wiring).await?;
        let listener = turmoil::net::TcpListener::bind(("0.0.0.0", PORT)).await?;
        let allowed = (1..=3).map(|id| turmoil::lookup(host(id))).collect();
        let stop = CancellationToken::new();
        tokio::spawn(crate::cluster::service::serve(
            net::incoming(listener),
            cluster.clone(),
            recorder.clone(),
            allowed,
            None,
            stop.clone().cancelled_owned(),
        ));
        tokio::spawn(cluster.clone().join());
        tokio::spawn(lead(cluster.clone(), recorder.clone(), stop));
        let (jobs, mut queue) = mpsc::unbounded_channel();
        *lock(&self.running) = Some(Running {
            cluster: cluster.clone(),
            jobs,
        });
        while let Some(job) = queue.recv().await {
            match job {
                Job::Produce { conversation, lost } => {
                    let (cluster, ledger) = (cluster.clone(), ledger.clone());
                    tokio::spawn(async move {
                        if produce(cluster, &ledger, conversation).await.is_none() {
                            let _ = lost.send(conversation);
                        }
                    });
                }
                Job::Read {
                    conversation,
                    answer,
                } => {
                    let recorder = recorder.clone();
                    let name = ledger.name(conversation);
                    tokio::spawn(async move {
                        let read = tokio::time::timeout(READ_WITHIN, read(&recorder, &name));
                        let read = match read.await {
                            Ok(read) => read,
                            Err(_) => Err(stuck(&recorder, &name).await),
                        };
                        let _ = answer.send(read);
                    });
                }
            }
        }
        Ok(())
    }
}

/// Generous limits: the workload's chunks are small.
fn limits() -> Limits {
    Limits {
        max_chunk_bytes: 1 << 20,
        max_recording_bytes: 1 << 30,
        max_retention: Duration::from_secs(24 * 3600),
    }
}

/// What the server does each time this node comes to lead (adopt what the last leader left
/// live) and stops (drop the recordings it held as leader).
async fn lead(cluster: Cluster, recorder: Recorder, stop: CancellationToken) {
    let deposing = recorder.clone();
    let adopt = move || {
        let recorder = recorder.clone();
        async move {
            if let Err(err) = recorder.adopt_left_live().await {
                tracing::warn!(error = %err, "could not adopt the recordings left live");
            }
        }
    };
    cluster
        .on_each_lead(stop, adopt, move || {
            deposing.depose_all();
        })
        .await;
}

/// Records one conversation of the ledger as a client would: opens a session on the leader
/// (a resume from the last acknowledged byte, if it was begun), sends each token not yet
/// acknowledged and notes each acknowledgement, then completes. `None` when the session
/// failed first.
async fn produce(cluster: Cluster, ledger: &Ledger, conversation: usize) -> Option<()> {
    let name = ledger.name(conversation);
    let id = ConversationId::parse(name.as_bytes()).ok()?;
    let (resume_from, tokens) = ledger.unacked(conversation);
    tracing::info!(%name, ?resume_from, "the workload opens a producer session");
    let mut producer = cluster
        .forward_producer(id, resume_from, None)
        .await
        .inspect_err(|err| tracing::info!(%name, %err, "the session was refused"))
        .ok()?;
    for (token, pause) in tokens {
        tokio::time::sleep(pause).await;
        let committed = producer.accept(b"", &token).await.ok()??;
        let end = committed
            .await
            .ok()?
            .inspect_err(|err| tracing::info!(%name, %err, "a token was not acknowledged"))
            .ok()?;
        tracing::info!(%name, end, "the workload heard an acknowledgement");
        ledger.acked(conversation, end);
    }
    ledger.completing(conversation);
    let progress = producer
        .complete()
        .await
        .inspect_err(|err| tracing::info!(%name, %err, "the completion was refused"))
        .ok()?;
    tracing::info!(%name, ?progress, "the workload's completion was answered");
    ledger.completed(conversation, progress.status);
    Some(())
}

/// Replays `name` here from the start to its end.
async fn read(recorder: &Recorder, name: &str) -> Read {
    let id = ConversationId::parse(name.as_bytes()).map_err(|err| err.to_string())?;
    let mut replay = match recorder.replay(&id, 0).await {
        Ok(replay) => replay,
        Err(crate::error::Error::RecordingNotFound { .. }) => return Ok(None),
        Err(err) => return Err(err.to_string()),
    };
    let mut text = String::new();
    while let Some(piece) = replay.next().await.map_err(|err| err.to_string())? {
        text.push_str(&piece.into_text());
    }
    let row = match recorder.deck().store().lookup(id.key()).await {
        Ok(crate::store::Lookup::Stored(meta)) => {
            Some((meta.generation, meta.status, meta.byte_len))
        }
        Ok(_) => None,
        Err(err) => return Err(err.to_string()),
    };
    Ok(Some(Replayed {
        text,
        ending: replay.ending(),
        row,
    }))
}

/// Why a replay of `name` here did not end: what the store and the live recordings say.
async fn stuck(recorder: &Recorder, name: &str) -> String {
    let Ok(id) = ConversationId::parse(name.as_bytes()) else {
        return "a bad name".into();
    };
    let found = recorder.get(&id).await;
    let tape = recorder.deck().live(id.key()).map(|tape| tape.progress());
    format!(
        "did not end within {READ_WITHIN:?}: the store says {found:?}; the live tape here: {tape:?}"
    )
}

/// The wall clock, this many ms off.
#[derive(Debug)]
struct Skewed(i64);

impl Clock for Skewed {
    fn now_ms(&self) -> u64 {
        crate::clock::SystemClock
            .now_ms()
            .saturating_add_signed(self.0)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
