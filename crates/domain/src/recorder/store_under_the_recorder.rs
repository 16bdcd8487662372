//! The recorder's sweeper over a real store: idle recordings interrupted, the periodic task.
//! The store's own tests run in its crate, over a stand-in for the recorder.
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use crate::clock::ManualClock;
use crate::error::Error;
use crate::id::ConversationId;
use crate::recorder::{Deck, LivePolicy, OnConflict, TapeWriter, sweeper};
use crate::status::Status;
use crate::store::{Committed, Store, StoreOptions};

const T0: u64 = 1_700_000_000_000;
const RETENTION: Duration = Duration::from_secs(10 * 60);
const IDLE: Duration = Duration::from_secs(60 * 60);
const WAIT: Duration = Duration::from_secs(20);
const MAX_LIVE: usize = 100;

/// Long enough that no test sees a grace period run out unless it moves time on.
const GRACE: Duration = Duration::from_secs(60 * 60);

/// A store in a temporary directory with the recorder's live recordings over it.
fn fresh_recorder() -> (TempDir, ManualClock, Deck) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let options = StoreOptions {
        retention: RETENTION,
        clock: Arc::new(clock.clone()),
        ..StoreOptions::default()
    };
    let store = Store::open(&dir.path().join("tapedeck.redb"), options).unwrap();
    let policy = LivePolicy {
        max_live: MAX_LIVE,
        grace: GRACE,
        on_conflict: OnConflict::Supersede,
    };
    (dir, clock, Deck::new(store, policy))
}

#[tokio::test]
async fn idle_recordings_are_interrupted() {
    let (_dir, clock, store) = fresh_recorder();
    let mut idle = store.start(&id("idle"), None).await.unwrap();
    record_on_tape(&mut idle, &["said ", "little"]).await;
    let mut busy = store.start(&id("busy"), None).await.unwrap();
    clock.advance(ms(IDLE) / 2);
    record_on_tape(&mut busy, &["talking"]).await;
    clock.advance(ms(IDLE) / 2);

    sweeper::sweep_once(&store, IDLE).await.unwrap();
    let progress = idle.tape().progress();
    assert_eq!(progress.status, Status::Interrupted);
    assert_eq!(progress.chunks, 2);
    assert!(idle.tape().end_message().unwrap().contains("idle"));
    let meta = store
        .store()
        .meta(idle.tape().key())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(meta.status, Status::Interrupted);
    assert_eq!(meta.expires_at_ms, Some(T0 + ms(IDLE) + ms(RETENTION)));
    assert!(store.live(idle.tape().key()).is_none());
    // Its producer is refused from now on.
    let late = idle.append("more").await.unwrap();
    assert!(matches!(acked(late).await, Err(Error::RecordingEnded)));

    assert_eq!(busy.tape().progress().status, Status::Recording);
    assert!(store.live(busy.tape().key()).is_some());
}

#[tokio::test]
async fn periodic_sweeper_runs_without_being_called() {
    let (_dir, clock, store) = fresh_recorder();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(sweeper::run(
        store.clone(),
        Duration::from_millis(10),
        IDLE,
        shutdown.clone(),
    ));
    // Each round needs a later tick than the last: the task keeps running on its own.
    let mut keys = Vec::new();
    for round in 0..3 {
        let writer = store
            .start(&id(&format!("idle-{round}")), None)
            .await
            .unwrap();
        keys.push(writer.tape().key());
        let mut progress = writer.tape().subscribe();
        // Round 1 also lets round 0's retention pass.
        let extra = if round == 1 { ms(RETENTION) } else { 0 };
        clock.advance(ms(IDLE) + extra + 1);
        let ended = tokio::time::timeout(WAIT, progress.wait_for(|p| !p.status.is_live()))
            .await
            .expect("the sweeper ended the idle recording in time")
            .unwrap()
            .status;
        assert_eq!(ended, Status::Interrupted, "round {round}");
    }
    // The tick that ended round 1 then collected round 0; round 2 came from a later tick.
    assert!(store.store().meta(keys[0]).await.unwrap().is_none());
    let read = store.store().read_chunks(keys[0], 0, 0, usize::MAX).await;
    assert!(read.is_err_and(|err| err.kind() == crate::error::Kind::NotFound));

    shutdown.cancel();
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the sweeper stops on shutdown")
        .unwrap();
}

/// Appends every text and waits for the last one to be committed.
async fn record_on_tape(writer: &mut TapeWriter, texts: &[&str]) {
    let mut last = None;
    for text in texts {
        last = Some(writer.append(text).await.unwrap());
    }
    if let Some(committed) = last {
        acked(committed).await.unwrap();
    }
}

fn id(name: &str) -> ConversationId {
    ConversationId::parse(name.as_bytes()).unwrap()
}

fn ms(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

/// The committed length an ack reports; panics if it does not come in time.
async fn acked(committed: Committed) -> crate::Result<u64> {
    tokio::time::timeout(WAIT, committed)
        .await
        .expect("the ack came in time")
        .expect("the writer answered")
}
