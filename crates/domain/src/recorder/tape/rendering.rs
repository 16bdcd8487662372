//! A stretch of a live tape rendered into wire bytes by a face, left on the tape for the other
//! readers at the same place: the readers of one live stream, woken together by a commit, read
//! and render its new chunks once between them, not once each.
use bytes::Bytes;

/// Where a replay is in its recording: the offset of its next byte, and the chunk that byte
/// is in (or the next chunk to be committed, when it has read everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The byte offset in the recording.
    pub offset: u64,
    /// The chunk's index.
    pub index: u64,
}

/// What one reader rendered, for the others.
#[derive(Debug, Clone)]
pub(crate) struct Rendering {
    /// Which rendering it is: the face's own tag (the same chunks render differently in each
    /// of its formats).
    pub(crate) kind: u8,
    /// Where its reader was before reading what it renders, and after.
    pub(crate) from: Place,
    pub(crate) to: Place,
    pub(crate) bytes: Bytes,
}
