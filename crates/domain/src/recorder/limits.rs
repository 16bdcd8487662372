//! The limits every producer is held to, whichever face it writes through: chunk size,
//! recording size and retention are checked here, once.
use std::time::Duration;

use super::Limits;
use crate::error::Error;

/// A write over a size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeRefused {
    /// One chunk (an HTTP message) over `--max-chunk-bytes`.
    Chunk {
        /// Its size, in bytes.
        size: usize,
        /// The limit, in bytes.
        max: usize,
    },
    /// The recording would pass `--max-recording-bytes`.
    Recording {
        /// The size it would reach, in bytes.
        size: u64,
        /// The limit, in bytes.
        max: u64,
    },
}

impl From<SizeRefused> for Error {
    fn from(refused: SizeRefused) -> Self {
        match refused {
            SizeRefused::Chunk { size, max } => Error::ChunkTooLarge { size, max },
            SizeRefused::Recording { size, max } => Error::RecordingTooLarge { size, max },
        }
    }
}

impl Limits {
    /// Refuses a chunk of `size` bytes over `--max-chunk-bytes`.
    pub fn check_chunk(&self, size: usize) -> Result<(), SizeRefused> {
        if size > self.max_chunk_bytes {
            return Err(SizeRefused::Chunk {
                size,
                max: self.max_chunk_bytes,
            });
        }
        Ok(())
    }

    /// Refuses a recording that would reach `size` bytes, over `--max-recording-bytes`.
    pub fn check_recording(&self, size: u64) -> Result<(), SizeRefused> {
        if size > self.max_recording_bytes {
            return Err(SizeRefused::Recording {
                size,
                max: self.max_recording_bytes,
            });
        }
        Ok(())
    }

    /// Refuses chunks `lens` (in bytes) of which one is too large, or that would take a
    /// recording holding `held` bytes past its limit.
    pub fn check_chunks(
        &self,
        lens: impl IntoIterator<Item = usize>,
        held: u64,
    ) -> Result<(), SizeRefused> {
        let mut adding = 0u64;
        for len in lens {
            self.check_chunk(len)?;
            adding += len as u64;
        }
        self.check_recording(held + adding)
    }

    /// Refuses a retention (or sliding TTL) of `asked` over `--max-retention`.
    ///
    /// Fails with `RetentionTooLong`.
    pub fn check_retention(&self, asked: Duration) -> Result<(), Error> {
        if asked > self.max_retention {
            return Err(Error::RetentionTooLong {
                asked: asked.as_secs(),
                max: self.max_retention.as_secs(),
            });
        }
        Ok(())
    }
}
