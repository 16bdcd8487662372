//! The seam between the commit pipeline and the live recordings the recorder owns: the
//! [`Chunk`]s that flow through it, and the [`LiveRecording`] hooks the pipeline calls, on its
//! own thread and in the order it applies ops, so that who ends a recording first and what
//! readers see are decided in one order, after each commit.
use std::sync::Arc;

use bytes::Bytes;

use tokio::sync::oneshot;

use crate::RecordingMeta;
use crate::error::{Error, Result};
use crate::status::Status;

/// One committed piece of a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Position in the recording, from 0.
    pub index: u64,
    /// Byte offset of the chunk's first byte in the recording.
    pub offset: u64,
    /// The chunk's bytes: UTF-8 text in a text recording, anything in a byte stream.
    pub data: Bytes,
    /// When the commit that stored it began, in ms since the epoch; 0 before it is committed,
    /// and for chunks stored before schema 3.
    pub committed_ms: u64,
}

impl Chunk {
    /// Byte offset just after this chunk.
    pub fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// Resolves once an appended chunk is committed, with the recording's committed length.
pub type Committed = oneshot::Receiver<Result<u64>>;

/// A live recording as the commit pipeline sees it. The recorder implements it; the pipeline
/// calls it only from its own thread.
pub trait LiveRecording: Send + Sync + 'static {
    /// The conversation's storage key.
    fn key(&self) -> u128;
    /// The conversation as its producer named it, for messages.
    fn name(&self) -> String;
    /// Which of the conversation's recordings this is.
    fn generation(&self) -> u64;
    /// Marks the recording as taking no more ops; false if it already was (the first end wins).
    fn close(&self) -> bool;
    /// Whether [`close`](Self::close) has been called.
    fn is_closed(&self) -> bool;
    /// Why an op for a closed recording is refused.
    fn ended_error(&self) -> Error;
    /// A chunk of it was accepted at `now_ms`.
    fn touch(&self, now_ms: u64);
    /// Whether its chunks carry their commit time (see `schema::ChunkLayout`).
    fn timed_chunks(&self) -> bool;
    /// The producer session whose appends are accepted.
    fn producer_session(&self) -> u64;
    /// Hands the recording to a new producer session, attached; returns it. Appends of older
    /// sessions are refused from now on.
    fn attach_producer(&self) -> u64;
    /// Whether `session` is the last producer session and has let go of the recording.
    fn detached_as(&self, session: u64) -> bool;
    /// `(chunk count, byte length)` committed and published so far.
    fn committed(&self) -> (u64, u64);
    /// Chunks just committed, in order; readers may see them now.
    fn publish_chunks(&self, chunks: Vec<Chunk>);
    /// Its end, just committed (or `Failed` after a commit that failed).
    fn publish_end(&self, status: Status, message: Option<String>);
}

/// A live recording shared with the pipeline.
pub type Live = Arc<dyn LiveRecording>;

/// What a start is decided on: the conversation's stored recording and the time.
pub struct Admission<'a> {
    /// The conversation's latest recording as stored, if any.
    pub previous: Option<&'a RecordingMeta>,
    /// The commit's time, in ms since the epoch.
    pub now_ms: u64,
}

/// What a start registered: the live recording, and the live one it replaces, if any.
pub struct Admitted {
    /// The recording being started (or reopened).
    pub live: Live,
    /// The conversation's live recording it supersedes; it ends in the same commit.
    pub replaced: Option<Live>,
    /// `true` to make the stored recording live again (a resume of an ended recording)
    /// instead of replacing it with a new one.
    pub reopen: bool,
}

/// Decides a start on the writer thread, in queue order: registers the recording, or refuses
/// (the live limit, the conflict policy, a recording that cannot be resumed). Runs before
/// anything of the conversation's previous recording is deleted, so a refusal deletes nothing.
pub type Admit = Box<dyn FnOnce(Admission<'_>) -> Result<Admitted> + Send>;

/// Where a producer session that took over a live recording starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resumed {
    /// The new session.
    pub session: u64,
    /// Chunks committed before it.
    pub chunks: u64,
    /// Bytes committed before it.
    pub bytes: u64,
}
