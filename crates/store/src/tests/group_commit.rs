//! The commit pipeline's queue and pacing, on the real pipeline over a slow disk: after a commit
//! of several ops the next one waits, for as long as that commit took, until as many ops are
//! in hand; after a commit of one op, nothing waits. Chunks larger than the queue's room for
//! bytes still go through it. A node of a cluster takes more ops into one commit (a log entry)
//! than a single node.
use std::time::Instant;

use super::*;
use crate::ops::Queued;

/// The most `--commit-interval` allows: longer than any wait these tests expect.
const INTERVAL: Duration = Duration::from_secs(1);
/// How long each sync of the log takes in these tests: a slow disk, so that the waits the
/// pacing chooses are far longer than the machine's noise.
const SLOW_SYNC: Duration = Duration::from_millis(200);

/// A store whose log syncs take [`SLOW_SYNC`], its pipeline running and pacing at
/// [`INTERVAL`], after a first commit of two ops (one append by each of two producers).
struct SlowPipeline {
    _dir: tempfile::TempDir,
    store: TestStore,
    ops: mpsc::Sender<Queued>,
    pipeline: std::thread::JoinHandle<()>,
    producers: [Producer; 2],
}

impl SlowPipeline {
    async fn after_a_commit_of_two() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let files = super::watched_files::Watched::with_slow_log_syncs(SLOW_SYNC);
        let options = StoreOptions {
            files: Arc::new(files),
            ..options(&clock)
        };
        let store = open_path(&db_path(&dir), options);
        let first = store.start(&id("first")).await.unwrap();
        let second = store.start(&id("second")).await.unwrap();
        let handle = store.clone();
        store.close().await;
        let writer = pipeline_over(&handle, &clock, INTERVAL);
        let (ops, queue) = mpsc::channel(8);
        // Queued before the writer runs: one commit of two ops.
        let (_, a) = append(&ops, &first, 0);
        let (_, b) = append(&ops, &second, 0);
        let pipeline = std::thread::spawn(move || writer.run(queue));
        committed(a).await;
        committed(b).await;
        Self {
            _dir: dir,
            store: handle,
            ops,
            pipeline,
            producers: [first, second],
        }
    }

    /// Closes the pipeline; returns how many chunks each producer's recording holds.
    fn close(self) -> [usize; 2] {
        self.ops.try_send(Op::Close.into()).unwrap();
        self.pipeline.join().unwrap();
        self.producers
            .each_ref()
            .map(|p| stored_chunks(&self.store, p.recording().key()))
    }
}

/// Queues a one-byte append by `producer` at `index`; returns when it was sent and its ack.
fn append(
    ops: &mpsc::Sender<Queued>,
    producer: &Producer,
    index: u64,
) -> (Instant, oneshot::Receiver<crate::Result<u64>>) {
    let (op, ack) = one_byte_append(producer.recording(), producer.session(), index);
    ops.try_send(op.into()).unwrap();
    (Instant::now(), ack)
}

/// When `ack` came.
async fn committed(ack: oneshot::Receiver<crate::Result<u64>>) -> Instant {
    tokio::time::timeout(WAIT, ack)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    Instant::now()
}

/// After a commit of two ops, the next commit waits for a second op (it came 50 ms after the
/// first, well within the 200 ms the last commit took), and starts as soon as it is there.
#[tokio::test]
async fn after_a_commit_of_two_ops_the_next_waits_for_two_and_starts_when_they_are_in() {
    let slow = SlowPipeline::after_a_commit_of_two().await;
    let (ops, [first, second]) = (&slow.ops, &slow.producers);
    let (_, a) = append(ops, first, 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (b_sent, b) = append(ops, second, 1);
    let (a_done, b_done) = (committed(a).await, committed(b).await);
    assert!(
        b_done - a_done < SLOW_SYNC / 2,
        "the first op waited for the second, and one commit took both ({:?} apart)",
        b_done - a_done
    );
    // Had it waited out the 200 ms, it would have ended about 350 ms after the second was
    // sent.
    assert!(
        a_done - b_sent < SLOW_SYNC + SLOW_SYNC / 3,
        "the commit started when the second op came ({:?} after it was sent)",
        a_done - b_sent
    );

    assert_eq!(slow.close(), [2, 2]);
}

/// A lone op after a commit of two waits no longer than that commit took (200 ms), far less
/// than the interval (1 s); after a commit of that one op, the next op does not wait at all.
#[tokio::test]
async fn a_lone_op_waits_no_longer_than_the_last_commit_took_and_never_after_a_lone_op() {
    let slow = SlowPipeline::after_a_commit_of_two().await;
    let (ops, [first, _]) = (&slow.ops, &slow.producers);
    let (sent, ack) = append(ops, first, 1);
    let took = committed(ack).await - sent;
    assert!(
        took >= SLOW_SYNC + SLOW_SYNC / 2,
        "the lone op waited for company before its own commit ({took:?})"
    );
    assert!(
        took < INTERVAL - SLOW_SYNC,
        "the lone op waited no longer than the last commit took, not the interval ({took:?})"
    );

    let (sent, ack) = append(ops, first, 2);
    let took = committed(ack).await - sent;
    assert!(
        took < SLOW_SYNC + SLOW_SYNC / 2,
        "after a commit of one op, the next starts at once ({took:?})"
    );

    assert_eq!(slow.close(), [3, 1]);
}

#[tokio::test]
async fn chunks_larger_than_the_queue_s_room_wait_for_it_and_are_all_committed() {
    let (_dir, _clock, store) = fresh();
    let mut writer = store.start(&id("large")).await.unwrap();
    let big = "x".repeat(super::super::QUEUE_BYTES + 1);
    let half = "y".repeat(super::super::QUEUE_BYTES / 2 + 1);
    // Queued back to back: each waits for the room the ones before it take.
    let end = tokio::time::timeout(WAIT, record(&mut writer, &[&big, &half, &half, &big]))
        .await
        .expect("every chunk found room in the queue");
    assert_eq!(end as usize, 2 * big.len() + 2 * half.len());
    let chunks = all_chunks(
        &store,
        writer.recording().key(),
        writer.recording().generation(),
    )
    .await;
    assert_eq!(
        chunks.iter().map(|c| c.data.len()).collect::<Vec<_>>(),
        [big.len(), half.len(), half.len(), big.len()]
    );
}

/// Applies each proposal at once, as a cluster of one node would, and counts them.
#[derive(Default)]
struct CountedProposals {
    store: std::sync::OnceLock<Store>,
    proposals: std::sync::atomic::AtomicUsize,
}

impl crate::Replication for CountedProposals {
    fn propose(
        &self,
        changes: Vec<u8>,
        checkpoint: bool,
        _seen: Option<Vec<u8>>,
    ) -> crate::Result<()> {
        self.proposals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let store = self.store.get().expect("set before the first commit");
        store.apply_entry(Some(&changes), checkpoint, b"applied")
    }

    fn leads(&self) -> bool {
        true
    }
}

/// A node of a cluster proposes more ops in one log entry than a single node commits at once
/// (4,096): 10,000 appends queued together go in one entry.
#[tokio::test]
async fn a_node_of_a_cluster_proposes_ten_thousand_queued_ops_in_one_entry() {
    const OPS: u64 = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let options = StoreOptions {
        replicated: true,
        ..options(&clock)
    };
    let store = open_path(&db_path(&dir), options);
    let cluster = Arc::new(CountedProposals::default());
    let _ = cluster.store.set((*store).clone());
    store.replicate_through(cluster.clone());
    let producer = store.start(&id("many")).await.unwrap();
    let handle = store.clone();
    store.close().await;
    let writer = pipeline_over(&handle, &clock, INTERVAL);
    let (ops, queue) = mpsc::channel(OPS as usize + 1);
    // Queued before the writer runs: one batch.
    let acks: Vec<_> = (0..OPS).map(|i| append(&ops, &producer, i).1).collect();
    let before = cluster.proposals.load(std::sync::atomic::Ordering::Relaxed);
    let pipeline = std::thread::spawn(move || writer.run(queue));
    for ack in acks {
        committed(ack).await;
    }
    let proposed = cluster.proposals.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert_eq!(proposed, 1, "{OPS} queued appends went in one entry");
    ops.try_send(Op::Close.into()).unwrap();
    pipeline.join().unwrap();
    let chunks = all_chunks(
        &handle,
        producer.recording().key(),
        producer.recording().generation(),
    )
    .await;
    assert_eq!(chunks.len() as u64, OPS);
}
