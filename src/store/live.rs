//! The seam between the commit pipeline and the live recordings the recorder owns: the
//! [`Chunk`]s that flow through it, and the [`LiveRecording`] hooks the pipeline calls, on its
//! own thread and in the order it applies ops, so that who ends a recording first and what
//! readers see are decided in one order, after each commit.
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::recorder::Status;

/// One committed piece of a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Position in the recording, from 0.
    pub index: u64,
    /// UTF-8 byte offset of the chunk's first byte in the recording.
    pub offset: u64,
    /// The chunk's text.
    pub text: Arc<str>,
}

impl Chunk {
    /// Byte offset just after this chunk.
    pub fn end(&self) -> u64 {
        self.offset + self.text.len() as u64
    }
}

/// Resolves once an appended chunk is committed, with the recording's committed length.
pub type Committed = oneshot::Receiver<Result<u64>>;

/// A live recording as the commit pipeline sees it. The recorder implements it; the pipeline
/// calls it only from its own thread.
pub trait LiveRecording: Send + Sync + 'static {
    /// The conversation's storage key.
    fn key(&self) -> u128;
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
    /// `(chunk count, byte length)` committed and published so far.
    fn committed(&self) -> (u64, u64);
    /// Chunks just committed, in order; readers may see them now.
    fn publish_chunks(&self, chunks: Vec<Chunk>);
    /// Its end, just committed (or `Failed` after a commit that failed).
    fn publish_end(&self, status: Status, message: Option<String>);
}

/// A live recording shared with the pipeline.
pub type Live = Arc<dyn LiveRecording>;

/// What a start registered: the new live recording, and the live one it replaces, if any.
pub struct Admitted {
    /// The recording being started.
    pub live: Live,
    /// The conversation's live recording it supersedes; it ends in the same commit.
    pub replaced: Option<Live>,
}

/// Decides a start on the writer thread, in queue order: given the new recording's generation
/// and the time, registers it, or refuses (with the live limit, say). Runs before anything of
/// the conversation's previous recording is deleted, so a refusal deletes nothing.
pub type Admit = Box<dyn FnOnce(u64, u64) -> Result<Admitted> + Send>;
