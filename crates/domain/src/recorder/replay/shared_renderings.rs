//! Replays of one live tape share a rendering only where it is true for them: taken by a
//! replay at the place it was rendered from, when it holds everything committed, and then the
//! replay is where reading would have left it.
use std::time::Duration;

use bytes::Bytes;

use crate::id::ConversationId;
use crate::recorder::test_recorder::fresh_recorder;
use crate::recorder::{Limits, Place, Producer, Recorder, Replay, StartOptions};

const LIMITS: Limits = Limits {
    max_chunk_bytes: 64 * 1024,
    max_recording_bytes: 1024 * 1024,
    max_retention: Duration::from_secs(3600),
};
const KIND: u8 = 1;

fn id() -> ConversationId {
    ConversationId::parse(b"shared-renderings").unwrap()
}

async fn start(recorder: &Recorder) -> Producer {
    let options = StartOptions {
        resume_from: None,
        retention: None,
    };
    recorder.start(id(), options).await.unwrap()
}

/// Appends `chunks` and waits for their commit.
async fn commit(producer: &mut Producer, chunks: &[&str]) {
    let messages = chunks.iter().map(|c| (Vec::new(), c.to_string()));
    let answers = producer.accept_all_answered(messages).await.unwrap();
    for answer in answers {
        answer.await.unwrap().unwrap();
    }
}

/// Everything committed after the replay's place, as one string.
async fn read(replay: &mut Replay) -> String {
    let mut text = String::new();
    while let Some(piece) = replay.next_ready(1 << 20).await.unwrap() {
        text.push_str(&piece.into_text());
    }
    text
}

#[tokio::test]
async fn a_rendering_is_taken_only_at_its_place_and_only_while_it_is_whole() {
    let (_dir, recorder) = fresh_recorder(LIMITS);
    let mut producer = start(&recorder).await;
    commit(&mut producer, &["a", "bc"]).await;
    let mut first = recorder.replay_bytes(&id(), 0).await.unwrap();
    let mut second = recorder.replay_bytes(&id(), 0).await.unwrap();
    let mut late = recorder.replay_bytes(&id(), 0).await.unwrap();

    // The first reads and renders; the second, at the same place, takes it and is then where
    // the first is.
    let from = first.place().unwrap();
    assert_eq!(
        from,
        Place {
            offset: 0,
            index: 0
        }
    );
    assert_eq!(read(&mut first).await, "abc");
    first.leave_rendering(KIND, from, Bytes::from_static(b"<abc>"));
    assert_eq!(second.take_rendering(KIND + 1), None, "another kind");
    assert_eq!(second.take_rendering(KIND).unwrap(), &b"<abc>"[..]);
    assert_eq!(second.place(), first.place());
    assert_eq!(
        second.place(),
        Some(Place {
            offset: 3,
            index: 2
        })
    );
    assert_eq!(read(&mut second).await, "", "nothing read twice");

    // More is committed: a rendering of less than all of it is not taken.
    let from = first.place().unwrap();
    commit(&mut producer, &["d"]).await;
    assert_eq!(read(&mut first).await, "d");
    first.leave_rendering(KIND, from, Bytes::from_static(b"<d>"));
    commit(&mut producer, &["e"]).await;
    assert_eq!(second.take_rendering(KIND), None, "it lacks the e");
    assert_eq!(
        second.place(),
        Some(Place {
            offset: 3,
            index: 2
        })
    );
    assert_eq!(read(&mut second).await, "de");

    // A whole rendering is not taken by a reader elsewhere.
    let from = first.place().unwrap();
    assert_eq!(read(&mut first).await, "e");
    first.leave_rendering(KIND, from, Bytes::from_static(b"<e>"));
    assert_eq!(late.take_rendering(KIND), None);
    assert_eq!(read(&mut late).await, "abcde");

    // Once the recording ends, readers read: the end is theirs to see.
    let mut third = recorder.replay_bytes(&id(), 4).await.unwrap();
    producer.complete().await.unwrap();
    assert_eq!(third.take_rendering(KIND), None);
    assert_eq!(read(&mut third).await, "e");
}
