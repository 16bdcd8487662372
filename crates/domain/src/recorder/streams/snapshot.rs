//! What a read knows of a stream when it starts: content type, tail, whether it is closed,
//! its fork and its lifetime; a read counts against a stream's sliding TTL.
use super::handle::{GRPC_CONTENT_TYPE, State, StreamAt};
use super::lineage::LineageReader;
use super::messages::is_json;
use super::{StreamRefused, Streams};
use crate::error::Result;
use crate::id::ConversationId;
use crate::store::{ForkOf, Lookup};
use crate::tier::Remote;

/// A stream as a read finds it.
#[derive(Debug, Clone)]
pub struct StreamSnapshot {
    /// Its content type.
    pub content_type: String,
    /// Its tail offset.
    pub tail: u64,
    /// Whether it is closed.
    pub closed: bool,
    /// The stream it was forked from, if any.
    pub fork: Option<ForkOf>,
    /// Its sliding TTL, in seconds.
    pub ttl_secs: Option<u64>,
    /// Its expiry time, in ms since the epoch.
    pub expires_at_ms: Option<u64>,
}

impl StreamSnapshot {
    fn of(state: &State) -> Self {
        Self {
            content_type: state.row.content_type.clone(),
            tail: state.tail(),
            closed: state.closed,
            fork: state.row.fork.clone(),
            ttl_secs: state.row.ttl_secs,
            expires_at_ms: state.row.expires_at_ms,
        }
    }

    /// Whether it is in JSON mode (reads return whole messages).
    pub fn is_json(&self) -> bool {
        is_json(&self.content_type)
    }
}

impl Streams {
    /// What is at stream `id` for a read. A read that `touches` counts against the stream's
    /// sliding TTL (HEAD does not).
    ///
    /// Refused when there is no stream, or it was deleted while forks read from it.
    pub async fn snapshot(
        &self,
        id: &ConversationId,
        touch: bool,
    ) -> std::result::Result<StreamSnapshot, StreamRefused> {
        match self.find(id).await? {
            StreamAt::Stream(handle) => {
                let mut state = handle.state.lock().await;
                state.refresh();
                let now = self.now_ms();
                if state.gone || state.expired(now) {
                    return Err(StreamRefused::Missing);
                }
                if touch {
                    state.touch(now);
                }
                let mut snapshot = StreamSnapshot::of(&state);
                let generation = state.generation;
                drop(state);
                if let Some((own, ended)) = self.applied(id, generation).await {
                    let base = snapshot.fork.as_ref().map_or(0, |fork| fork.offset);
                    snapshot.tail = snapshot.tail.max(base + own);
                    snapshot.closed |= ended;
                }
                Ok(snapshot)
            }
            StreamAt::Recording => self.recording_snapshot(id).await,
            StreamAt::SoftDeleted => Err(StreamRefused::Gone),
            StreamAt::Missing => Err(StreamRefused::Missing),
        }
    }

    /// A recording made over gRPC, seen as a stream.
    async fn recording_snapshot(
        &self,
        id: &ConversationId,
    ) -> std::result::Result<StreamSnapshot, StreamRefused> {
        let live = self.recorder.deck().live(id.key());
        let (tail, closed) = match live.filter(|_| !self.replicated()) {
            Some(tape) => (tape.progress().bytes, false),
            None => match self.recorder.deck().store().lookup(id.key()).await? {
                Lookup::Stored(meta) => match self.applied(id, meta.generation).await {
                    Some(applied) => applied,
                    None => (meta.byte_len, !meta.status.is_live()),
                },
                Lookup::Unknown => match self.recorder.deck().remote(id.key()).await? {
                    Some(Remote::Sealed(sealed)) => (sealed.header.meta.byte_len, true),
                    _ => return Err(StreamRefused::Missing),
                },
                Lookup::Gone(_) => return Err(StreamRefused::Missing),
            },
        };
        Ok(StreamSnapshot {
            content_type: GRPC_CONTENT_TYPE.into(),
            tail,
            closed,
            fork: None,
            ttl_secs: None,
            expires_at_ms: None,
        })
    }

    fn replicated(&self) -> bool {
        self.recorder.deck().store().is_replicated()
    }

    /// In a cluster, how much of recording `generation` of `id` this node has applied, and
    /// whether it has ended: the store runs ahead of the leader's tapes (a commit is applied
    /// before its producer hears of it), and a live recording's row does not hold its length
    /// (its chunks do). `None` on a single node, or once the recording is no longer stored.
    async fn applied(&self, id: &ConversationId, generation: u64) -> Option<(u64, bool)> {
        if !self.replicated() {
            return None;
        }
        let store = self.recorder.deck().store();
        let (status, _, bytes) = store.progress(id.key(), generation).await.ok()?;
        Some((bytes, !status.is_live()))
    }

    /// A reader of stream `id`, as `snapshot` found it, from `offset` (not past its tail):
    /// whole messages in JSON mode.
    ///
    /// Fails with a storage error.
    pub async fn reader(
        &self,
        id: &ConversationId,
        snapshot: &StreamSnapshot,
        offset: u64,
    ) -> Result<LineageReader> {
        let json = snapshot.is_json();
        LineageReader::open(&self.recorder, id, snapshot.fork.clone(), offset, json).await
    }
}
