//! A stream made over HTTP, while this run knows it: its handle holds its `streams` row and,
//! while it is open, the producer session that writes it; the handle's lock serializes the
//! stream's writes (the protocol asks this per producer).
use std::sync::Arc;

use crate::id::ConversationId;
use crate::recorder::{Status, TapeWriter};
use crate::store::StreamRow;

/// The content type of a recording made over gRPC, read as a stream.
pub const GRPC_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// A stream made over HTTP.
pub(crate) struct Handle {
    pub(crate) id: ConversationId,
    pub(crate) state: tokio::sync::Mutex<State>,
}

/// A stream's state, under its handle's lock.
pub(crate) struct State {
    /// Its row as this run last wrote or read it. Its fork count is the store's to keep: the
    /// store decides soft deletes, and a row written back never changes the count.
    pub(crate) row: StreamRow,
    /// Which of the conversation's recordings this stream is.
    pub(crate) generation: u64,
    /// The producer session writing it, while it is open.
    pub(crate) writer: Option<TapeWriter>,
    /// Bytes of its own recording: the tail is `base + own`.
    pub(crate) own: u64,
    /// Closed (or ended any other way): no more appends.
    pub(crate) closed: bool,
    /// Ended by a cancel (a stop, gRPC Cancel): appends are refused saying so.
    pub(crate) cancelled: bool,
    /// Deleted or expired: this handle is stale.
    pub(crate) gone: bool,
    /// When it was last read or written, for its sliding TTL.
    pub(crate) touched_ms: u64,
}

impl State {
    /// Where its own bytes start: its fork offset, else 0.
    pub(crate) fn base(&self) -> u64 {
        self.row.fork.as_ref().map_or(0, |f| f.offset)
    }

    /// Its tail offset.
    pub(crate) fn tail(&self) -> u64 {
        self.base() + self.own
    }

    /// Notices an end it did not make (a gRPC cancel, a failed commit, a newer recording).
    pub(crate) fn refresh(&mut self) {
        if let Some(writer) = &self.writer {
            let progress = writer.tape().progress();
            self.own = progress.bytes;
            if !progress.status.is_live() {
                self.writer = None;
                self.closed = true;
                self.cancelled = progress.status == Status::Cancelled;
            }
        }
    }
}

/// What is at a stream's path.
pub(crate) enum StreamAt {
    /// A stream made over HTTP.
    Stream(Arc<Handle>),
    /// A recording made over gRPC: read-only as a stream.
    Recording,
    /// Deleted while forks read from it: gone for clients.
    SoftDeleted,
    /// Nothing.
    Missing,
}
