//! Large chunks read again come from memory, and never from an earlier recording that held
//! the same key, generation and index.
use super::*;

#[tokio::test]
async fn large_chunks_read_again_come_from_memory_and_never_from_an_earlier_recording() {
    let (_dir, clock, store) = fresh();
    let key = id("cached").key();
    let large = |c: &str| c.repeat(5000);
    let mut writer = store.start(&id("cached")).await.unwrap();
    record(&mut writer, &[&large("a"), "small", &large("b")]).await;
    writer.finish(Status::Completed, None).await.unwrap();
    let generation = store.meta(key).await.unwrap().unwrap().generation;

    let once = store
        .read_chunks(key, generation, 0, usize::MAX)
        .await
        .unwrap();
    let again = store
        .read_chunks(key, generation, 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(again, once);
    let same_bytes = |a: &Chunk, b: &Chunk| a.data.as_ptr() == b.data.as_ptr();
    assert!(same_bytes(&once[0], &again[0]), "a large chunk is kept");
    assert!(!same_bytes(&once[1], &again[1]), "a small one is copied");
    assert!(same_bytes(&once[2], &again[2]), "kept, after a small one");
    let from_last = store
        .read_chunks(key, generation, 2, usize::MAX)
        .await
        .unwrap();
    assert!(same_bytes(&once[2], &from_last[0]));

    // Collected, then recorded anew: the new recording has the same generation (nothing is
    // left of the old one) and the same chunk indexes, and its own bytes are read.
    clock.advance(ms(RETENTION) + 1);
    store.collect_expired().await.unwrap();
    assert!(store.meta(key).await.unwrap().is_none());
    let mut writer = store.start(&id("cached")).await.unwrap();
    record(&mut writer, &[&large("c")]).await;
    writer.finish(Status::Completed, None).await.unwrap();
    assert_eq!(
        store.meta(key).await.unwrap().unwrap().generation,
        generation
    );
    let anew = store
        .read_chunks(key, generation, 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(texts_of(&anew), [large("c")]);
}
