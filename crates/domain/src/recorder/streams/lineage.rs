//! The reader of a stream's lineage: from an offset, through the streams it was forked from
//! (each up to where its child diverged), then its own recording.
use bytes::Bytes;

use crate::error::Result;
use crate::id::ConversationId;
use crate::recorder::{Place, Recorder, Replay, Status};
use crate::store::ForkOf;

/// One portion of a read: bytes, or one JSON message.
#[derive(Debug, Clone)]
pub struct Portion {
    /// Its bytes.
    pub data: Bytes,
    /// The stream offset just after it.
    pub end: u64,
}

/// One recording of a stream's lineage: its own bytes start at `base` and, for a stream
/// forked from, are read only up to `cap` (where the fork diverged).
struct LineageSegment {
    id: ConversationId,
    base: u64,
    cap: Option<u64>,
}

/// A walk through a stream from an offset.
pub struct LineageReader {
    recorder: Recorder,
    /// Stretches still to read, the current one first.
    stretches: Vec<LineageSegment>,
    replay: Replay,
    position: u64,
    /// One portion per message (JSON mode).
    chunked: bool,
    /// Whether it counts among the readers of a live recording it reads.
    counted: bool,
}

impl LineageReader {
    /// A reader of stream `id`, forked as `fork` says, from `offset` (which must not be past
    /// its tail); `chunked` reads whole messages.
    ///
    /// Fails with a storage error.
    pub async fn open(
        recorder: &Recorder,
        id: &ConversationId,
        fork: Option<ForkOf>,
        offset: u64,
        chunked: bool,
    ) -> Result<LineageReader> {
        let mut stretches = Vec::new();
        // Walk up the lineage: each source is read up to where its child forked.
        let (mut next, mut cap) = (fork, None);
        stretches.push(LineageSegment {
            id: id.clone(),
            base: next.as_ref().map_or(0, |f| f.offset),
            cap: None,
        });
        while let Some(fork) = next.take() {
            cap = Some(cap.map_or(fork.offset, |c: u64| c.min(fork.offset)));
            let source = ConversationId::parse(uuid::Uuid::from_u128(fork.source).as_bytes())?;
            let store = recorder.deck().store();
            next = store.stream_row(fork.source).await?.and_then(|r| r.fork);
            stretches.push(LineageSegment {
                id: source,
                base: next.as_ref().map_or(0, |f| f.offset),
                cap,
            });
        }
        stretches.reverse();
        // Skip the stretches wholly before `offset`.
        while stretches.len() > 1 && stretches[0].cap.is_some_and(|cap| cap <= offset) {
            stretches.remove(0);
        }
        let first = &stretches[0];
        let mut replay = recorder
            .replay_bytes(&first.id, offset.saturating_sub(first.base))
            .await?;
        if chunked {
            replay = replay.chunked();
        }
        Ok(LineageReader {
            recorder: recorder.clone(),
            stretches,
            replay,
            position: offset,
            chunked,
            counted: true,
        })
    }

    /// The same reader, not counted among the readers of what it reads: an operator watching
    /// (the console), not a reader of the response.
    pub fn uncounted(mut self) -> Self {
        self.counted = false;
        self.replay.stop_counting();
        self
    }

    /// Offset of the next byte to read.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The next portion committed already, of at most `max_bytes`; `None` once caught up.
    ///
    /// Fails with a storage error.
    pub async fn ready(&mut self, max_bytes: usize) -> Result<Option<Portion>> {
        self.next(max_bytes, false).await
    }

    /// The next portion, waiting for it while the stream is open; `None` once it has ended.
    ///
    /// Fails with a storage error.
    pub async fn wait(&mut self, max_bytes: usize) -> Result<Option<Portion>> {
        self.next(max_bytes, true).await
    }

    /// Waits until the stream may have more to read once [`ready`](Self::ready) has nothing:
    /// more committed, or its end. Its future is small, for readers that wait long.
    pub async fn changed(&mut self) {
        // An ancestor is read only up to a cap that is committed: reading it never waits.
        if self.stretches.len() == 1 {
            self.replay.changed().await;
        }
    }

    /// Whether the stream ended (closed) and everything has been read.
    pub fn ended(&self) -> bool {
        self.stretches.len() == 1 && self.replay.ending().is_some()
    }

    /// How the stream ended (`completed` for a close, `cancelled` for a stop), once it has
    /// ended and everything has been read.
    pub fn ended_as(&self) -> Option<Status> {
        self.ended().then(|| self.replay.ending()).flatten()
    }

    /// Where it is in the live recording it follows, when it may share renderings of what
    /// comes next with other readers there (see [`Replay::take_rendering`]): only on the
    /// stream's own recording, not on a stretch it was forked from.
    pub fn place(&self) -> Option<Place> {
        match self.stretches.len() {
            1 => self.replay.place(),
            _ => None,
        }
    }

    /// Whether another reader follows the recording it reads, to take what it leaves.
    pub fn has_company(&self) -> bool {
        self.stretches.len() == 1 && self.replay.has_company()
    }

    /// Leaves `bytes`, rendered as `kind` from what it read since `from`, for the readers there.
    pub fn leave_rendering(&self, kind: u8, from: Place, bytes: Bytes) {
        if self.stretches.len() == 1 {
            self.replay.leave_rendering(kind, from, bytes);
        }
    }

    /// The rendering as `kind` of everything committed after its place, when another reader
    /// there left one, and moves past it (see [`Replay::take_rendering`]).
    pub fn take_rendering(&mut self, kind: u8) -> Option<Bytes> {
        if self.stretches.len() != 1 {
            return None;
        }
        let before = self.replay.offset();
        let bytes = self.replay.take_rendering(kind)?;
        self.position += self.replay.offset() - before;
        Some(bytes)
    }

    async fn next(&mut self, max_bytes: usize, wait: bool) -> Result<Option<Portion>> {
        loop {
            let stretch = &self.stretches[0];
            if let Some(cap) = stretch.cap
                && self.position >= cap
            {
                self.advance().await?;
                continue;
            }
            let budget = match stretch.cap {
                Some(cap) => max_bytes.min((cap - self.position) as usize),
                None => max_bytes,
            };
            let base = stretch.base;
            let piece = match (wait, stretch.cap) {
                // An ancestor is read only up to a cap that is committed: never wait on it.
                (true, None) => self.replay.next_up_to(budget).await?,
                _ => self.replay.next_ready(budget).await?,
            };
            let Some(piece) = piece else {
                if self.stretches.len() > 1 {
                    // An ancestor that ended (or holds less than the cap): go on to the fork.
                    self.advance().await?;
                    continue;
                }
                return Ok(None);
            };
            let mut data = piece.data;
            let end = base + piece.end_offset;
            if let Some(cap) = stretch.cap
                && end > cap
            {
                data.truncate(data.len() - (end - cap) as usize);
            }
            self.position += data.len() as u64;
            return Ok(Some(Portion {
                data,
                end: self.position,
            }));
        }
    }

    /// Moves on to the next stretch of the lineage, at the current position.
    async fn advance(&mut self) -> Result<()> {
        self.stretches.remove(0);
        let stretch = &self.stretches[0];
        let internal = self.position.saturating_sub(stretch.base);
        let mut replay = self.recorder.replay_bytes(&stretch.id, internal).await?;
        if self.chunked {
            replay = replay.chunked();
        }
        if !self.counted {
            replay.stop_counting();
        }
        self.replay = replay;
        Ok(())
    }
}
