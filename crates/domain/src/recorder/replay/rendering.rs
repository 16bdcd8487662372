//! Sharing renderings between the replays of one live tape (see `tape::rendering`): a replay
//! that rendered what it read leaves it on the tape, and another at the same place takes it
//! and moves past what it holds, without reading.
use bytes::Bytes;

use super::{Replay, Source};
use crate::recorder::tape::{Place, Rendering};

impl Replay {
    /// Where it is, when it may share renderings: following a live tape, with no seek pending
    /// and not ended.
    pub fn place(&self) -> Option<Place> {
        match (&self.source, self.pending_seek, self.ended) {
            (Source::Live { .. }, None, None) => Some(Place {
                offset: self.position,
                index: self.next_index,
            }),
            _ => None,
        }
    }

    /// Whether a rendering it leaves may be taken: another replay follows its tape. A lone
    /// reader (the common case) need not copy its events for nobody.
    pub fn has_company(&self) -> bool {
        matches!(&self.source, Source::Live { tape, .. } if tape.readers() > 1)
    }

    /// Leaves `bytes`, rendered as `kind` from what it read between `from` and where it is
    /// now, for the replays at `from`.
    pub fn leave_rendering(&self, kind: u8, from: Place, bytes: Bytes) {
        if let (Source::Live { tape, .. }, Some(to)) = (&self.source, self.place()) {
            tape.leave_rendering(Rendering {
                kind,
                from,
                to,
                bytes,
            });
        }
    }

    /// The rendering as `kind` of everything committed after its place, when another replay
    /// there left one, and moves past it. `None` (and it stays where it is) when none was
    /// left, or when the one left does not reach what is committed now, or the recording has
    /// ended: then reading says what comes next.
    pub fn take_rendering(&mut self, kind: u8) -> Option<Bytes> {
        let from = self.place()?;
        let Source::Live { tape, progress, .. } = &mut self.source else {
            return None;
        };
        let (bytes, to) = tape.rendering(kind, from)?;
        // Marked as seen: whether it is taken or not, what is committed now is read next
        // (taken, or read by the caller) before the replay waits again.
        let now = *progress.borrow_and_update();
        if !now.status.is_live() || (now.bytes, now.chunks) != (to.offset, to.index) {
            return None;
        }
        self.position = to.offset;
        self.next_index = to.index;
        self.ahead.clear();
        Some(bytes)
    }
}
