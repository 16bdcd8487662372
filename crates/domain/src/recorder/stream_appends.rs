//! Appends to streams over a real store, on a clock the tests move: an append finds what
//! became of its stream since the last one (expired, closed) whether or not this run holds
//! the stream's handle, and an empty append is refused only where a stream is.
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::clock::ManualClock;
use crate::id::ConversationId;
use crate::recorder::Limits;
use crate::recorder::streams::{AppendAsk, AppendRefused, Appended, CreateAsk, Streams};
use crate::recorder::test_recorder::recorder_on_clock;

const LIMITS: Limits = Limits {
    max_chunk_bytes: 1024,
    max_recording_bytes: 1024 * 1024,
    max_retention: Duration::from_secs(3600),
};
const TEXT: &str = "text/plain";

fn id(name: &str) -> ConversationId {
    ConversationId::parse(name.as_bytes()).unwrap()
}

fn text(body: &'static str) -> AppendAsk {
    AppendAsk {
        content_type: Some(TEXT.into()),
        body: Bytes::from_static(body.as_bytes()),
        ..AppendAsk::default()
    }
}

async fn create(streams: &Streams, name: &str, ttl_secs: Option<u64>) {
    let ask = CreateAsk {
        content_type: Some(TEXT.into()),
        ttl_secs,
        ..CreateAsk::default()
    };
    streams.create(&id(name), ask).await.unwrap();
}

/// The tail an append that went through left.
fn tail(appended: Result<Appended, AppendRefused>) -> u64 {
    match appended {
        Ok(Appended::Written { tail, .. }) => tail,
        other => panic!("not written: {other:?}"),
    }
}

#[tokio::test]
async fn an_append_after_its_streams_ttl_finds_it_gone() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (_dir, recorder) = recorder_on_clock(LIMITS, clock.clone());
    let streams = Streams::new(recorder);
    create(&streams, "ttl", Some(10)).await;
    assert_eq!(tail(streams.append(&id("ttl"), text("ab")).await), 2);
    // Each append slides the TTL on.
    clock.advance(8_000);
    assert_eq!(tail(streams.append(&id("ttl"), text("cd")).await), 4);
    clock.advance(8_000);
    assert_eq!(tail(streams.append(&id("ttl"), text("ef")).await), 6);
    // Then none for longer than it.
    clock.advance(10_001);
    let late = streams.append(&id("ttl"), text("gh")).await;
    assert!(matches!(late, Err(AppendRefused::Missing)), "{late:?}");
    let again = streams.append(&id("ttl"), text("gh")).await;
    assert!(matches!(again, Err(AppendRefused::Missing)), "{again:?}");
}

#[tokio::test]
async fn an_append_to_a_closed_stream_is_refused_whoever_holds_it() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (_dir, recorder) = recorder_on_clock(LIMITS, clock);
    let streams = Streams::new(recorder.clone());
    create(&streams, "closed", None).await;
    let closing = AppendAsk {
        closing: true,
        ..text("last")
    };
    assert_eq!(tail(streams.append(&id("closed"), closing).await), 4);
    let after = streams.append(&id("closed"), text("more")).await;
    assert!(
        matches!(after, Err(AppendRefused::Closed { tail: 4, .. })),
        "{after:?}"
    );
    // A run that has not held it yet loads it from the store, and refuses the same.
    let fresh = Streams::new(recorder);
    let after = fresh.append(&id("closed"), text("more")).await;
    assert!(
        matches!(after, Err(AppendRefused::Closed { tail: 4, .. })),
        "{after:?}"
    );
}

#[tokio::test]
async fn an_empty_append_is_refused_where_a_stream_is_and_missing_where_none_is() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (_dir, recorder) = recorder_on_clock(LIMITS, clock);
    let streams = Streams::new(recorder);
    create(&streams, "open", None).await;
    let empty = streams.append(&id("open"), text("")).await;
    assert!(matches!(empty, Err(AppendRefused::Empty)), "{empty:?}");
    let nowhere = streams.append(&id("nowhere"), text("")).await;
    assert!(
        matches!(nowhere, Err(AppendRefused::Missing)),
        "{nowhere:?}"
    );
    assert_eq!(tail(streams.append(&id("open"), text("x")).await), 1);
}
