//! The commit pipeline's queue and pacing, on the real pipeline: chunks larger than the queue's
//! room for bytes still go through it; a commit of several ops holds the next one back for the
//! interval, or until as many ops are in hand; a commit of one op does not.
use std::time::Instant;

use super::*;

const INTERVAL: Duration = Duration::from_millis(300);
/// Less than the interval by more than a commit takes on any disk these tests run on.
const CLEARLY_PACED: Duration = Duration::from_millis(200);

#[tokio::test]
async fn a_commit_of_several_ops_holds_the_next_back_and_one_of_a_single_op_does_not() {
    let (_dir, clock, store) = fresh();
    let handle = store.clone();
    let first = store.start(&id("first")).await.unwrap();
    let second = store.start(&id("second")).await.unwrap();
    store.close().await;

    let writer = pipeline_over(&handle, &clock, INTERVAL);
    let (ops, queue) = mpsc::channel(8);
    let append = |writer: &Producer, index: u64| {
        let (op, ack) = one_byte_append(writer.recording(), writer.session(), index);
        ops.try_send(op.into()).unwrap();
        ack
    };
    async fn committed(ack: oneshot::Receiver<crate::Result<u64>>) -> Instant {
        tokio::time::timeout(WAIT, ack)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        Instant::now()
    }

    // Queued before the writer runs: one commit of two ops.
    let (a, b) = (append(&first, 0), append(&second, 0));
    let pipeline = std::thread::spawn(move || writer.run(queue));
    let two = committed(a).await;
    committed(b).await;

    let one = committed(append(&first, 1)).await;
    assert!(
        one - two >= CLEARLY_PACED,
        "the commit after one of two ops waited out the interval ({:?})",
        one - two
    );

    let next = committed(append(&first, 2)).await;
    assert!(
        next - one < CLEARLY_PACED,
        "the commit after one of a single op was not held back ({:?})",
        next - one
    );

    ops.try_send(Op::Close.into()).unwrap();
    pipeline.join().unwrap();
    assert_eq!(stored_chunks(&handle, first.recording().key()), 3);
}

/// Writers that each wait for their acknowledgement (a closed loop) are all back before the
/// interval is up: their commit starts as soon as it has as many ops as the last one.
#[tokio::test]
async fn a_commit_starts_as_soon_as_it_has_as_many_ops_as_the_last_one() {
    let (_dir, clock, store) = fresh();
    let handle = store.clone();
    let first = store.start(&id("first")).await.unwrap();
    let second = store.start(&id("second")).await.unwrap();
    store.close().await;

    let writer = pipeline_over(&handle, &clock, INTERVAL);
    let (ops, queue) = mpsc::channel(8);
    let append = |writer: &Producer, index: u64| {
        let (op, ack) = one_byte_append(writer.recording(), writer.session(), index);
        ops.try_send(op.into()).unwrap();
        ack
    };
    let committed = |ack: oneshot::Receiver<crate::Result<u64>>| async move {
        tokio::time::timeout(WAIT, ack)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        Instant::now()
    };

    let (a, b) = (append(&first, 0), append(&second, 0));
    let pipeline = std::thread::spawn(move || writer.run(queue));
    let two = committed(a).await;
    committed(b).await;

    // Both writers are back, one after the other.
    let a = append(&first, 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let b = append(&second, 1);
    let again = committed(a).await;
    committed(b).await;
    assert!(
        again - two < CLEARLY_PACED,
        "the commit waited out the interval although both writers were back ({:?})",
        again - two
    );

    ops.try_send(Op::Close.into()).unwrap();
    pipeline.join().unwrap();
    assert_eq!(stored_chunks(&handle, first.recording().key()), 2);
    assert_eq!(stored_chunks(&handle, second.recording().key()), 2);
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
