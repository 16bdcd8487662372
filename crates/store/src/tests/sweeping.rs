//! Collecting expired recordings: exactly the expired ones, bounded deletes, file size.
use super::*;

#[tokio::test]
async fn sweeper_deletes_exactly_the_expired_recordings() {
    let (_dir, clock, store) = fresh();
    let mut expired = Vec::new();
    for name in ["old-completed", "old-cancelled"] {
        let mut writer = store.start(&id(name)).await.unwrap();
        record(&mut writer, &["a", "b", "c"]).await;
        let status = if name == "old-completed" {
            Status::Completed
        } else {
            Status::Cancelled
        };
        writer.finish(status, None).await.unwrap();
        expired.push(id(name).key());
    }
    let mut live = store.start(&id("live")).await.unwrap();
    record(&mut live, &["still", "here"]).await;
    clock.advance(ms(RETENTION) / 2);
    let mut recent = store.start(&id("recent")).await.unwrap();
    record(&mut recent, &["new"]).await;
    recent.finish(Status::Completed, None).await.unwrap();

    clock.advance(ms(RETENTION) / 2 + 1);
    let report = store.collect_expired().await.unwrap();
    assert_eq!(
        report,
        SweepReport {
            recordings_deleted: 2,
            chunks_deleted: 6,
            more: false,
            tombstones_forgotten: 0,
        }
    );
    for key in expired {
        assert!(store.meta(key).await.unwrap().is_none());
        assert_eq!(stored_chunks(&store, key), 0);
        assert_eq!(expiry_entries(&store, key), 0);
        assert!(matches!(
            store.read_chunks(key, 1, 0, usize::MAX).await,
            Err(Error::RecordingNotFound { .. })
        ));
    }
    let recent_key = id("recent").key();
    assert_eq!(texts_of(&all_chunks(&store, recent_key, 1).await), ["new"]);
    assert_eq!(expiry_entries(&store, recent_key), 1);
    assert_eq!(live.recording().progress().status, Status::Recording);
    assert_eq!(
        texts_of(&all_chunks(&store, live.recording().key(), 1).await),
        ["still", "here"]
    );
    // A live recording keeps taking chunks after the sweep.
    assert_eq!(record(&mut live, &["!"]).await, 10);

    // Nothing more is due: the next sweep is a no-op.
    let again = store.collect_expired().await.unwrap();
    assert_eq!(again, SweepReport::default());
}

#[tokio::test]
async fn big_expired_recording_is_deleted_over_bounded_commits() {
    const CHUNKS: usize = 25_000;
    const BUDGET: u64 = 10_000;
    let (_dir, clock, store) = fresh();
    let mut writer = store.start(&id("big")).await.unwrap();
    let key = writer.recording().key();
    let mut last = None;
    for i in 0..CHUNKS {
        last = Some(writer.append(&format!("{i:07} ")).await.unwrap());
    }
    acked(last.unwrap()).await.unwrap();
    writer.finish(Status::Completed, None).await.unwrap();
    assert_eq!(stored_chunks(&store, key), CHUNKS);

    clock.advance(ms(RETENTION) + 1);
    let mut reports = Vec::new();
    loop {
        let report = store.sweep_expired(BUDGET).await.unwrap();
        reports.push(report);
        if !report.more {
            break;
        }
        // Between commits the recording is still known, with what is left of its chunks, but
        // a reader is not handed a recording with its beginning gone.
        assert!(store.meta(key).await.unwrap().is_some());
        // Whole segments go, as many as fit in the budget.
        assert!((BUDGET * 9 / 10..=BUDGET).contains(&report.chunks_deleted));
        let deleted: u64 = reports.iter().map(|r| r.chunks_deleted).sum();
        assert_eq!(stored_chunks(&store, key), CHUNKS - deleted as usize);
        assert!(matches!(
            store.read_chunks(key, 1, 0, usize::MAX).await,
            Err(Error::RecordingNotFound { .. })
        ));
        assert!(matches!(
            store.locate(key, 1, CHUNKS as u64, 0).await,
            Err(Error::RecordingNotFound { .. })
        ));
    }
    let report = |recordings_deleted, chunks_deleted, more| SweepReport {
        recordings_deleted,
        chunks_deleted,
        more,
        tombstones_forgotten: 0,
    };
    let deleted: Vec<u64> = reports.iter().map(|r| r.chunks_deleted).collect();
    assert_eq!(deleted.iter().sum::<u64>(), CHUNKS as u64);
    assert_eq!(
        reports,
        [
            report(0, deleted[0], true),
            report(0, deleted[1], true),
            report(1, deleted[2], false)
        ]
    );
    assert!(store.meta(key).await.unwrap().is_none());
    assert_eq!(stored_chunks(&store, key), 0);
    assert_eq!(expiry_entries(&store, key), 0);
}

#[tokio::test]
async fn file_size_levels_off_when_recordings_are_created_and_collected() {
    const ROUNDS: usize = 40;
    const RECORDINGS: usize = 20;
    const CHUNKS: usize = 20;
    let (dir, clock, store) = fresh();
    let text = "0123456789abcdef".repeat(16);
    let mut sizes = Vec::new();
    for round in 0..ROUNDS {
        // Concurrent starts and finishes share commits, as they do under load.
        let names: Vec<ConversationId> = (0..RECORDINGS)
            .map(|r| id(&format!("{round}-{r}")))
            .collect();
        let mut writers = futures::future::try_join_all(names.iter().map(|n| store.start(n)))
            .await
            .unwrap();
        let mut acks = Vec::new();
        for _ in 0..CHUNKS {
            for writer in &mut writers {
                acks.push(writer.append(&text).await.unwrap());
            }
        }
        for ack in acks {
            acked(ack).await.unwrap();
        }
        futures::future::try_join_all(
            writers
                .into_iter()
                .map(|w| w.finish(Status::Completed, None)),
        )
        .await
        .unwrap();
        clock.advance(ms(RETENTION) + 1);
        let report = store.collect_expired().await.unwrap();
        assert_eq!(report.recordings_deleted, RECORDINGS as u64);
        assert_eq!(report.chunks_deleted, (RECORDINGS * CHUNKS) as u64);
        sizes.push(std::fs::metadata(db_path(&dir)).unwrap().len());
    }
    // Observed (debug build, with the write-ahead log in front of redb): 1,056,768 bytes after
    // every round, while 40 x 102,400 = 4,096,000 bytes of text went through the file. Freed
    // pages are reused, so the size stays under a cap that a file keeping every round would
    // pass long before the end.
    const CAP: u64 = 1536 * 1024;
    let written = (ROUNDS * RECORDINGS * CHUNKS * text.len()) as u64;
    assert!(written > 2 * CAP);
    let peak = *sizes[ROUNDS / 2..].iter().max().unwrap();
    assert!(
        peak <= CAP,
        "file kept growing: {sizes:?} (bytes after each round)"
    );
}
