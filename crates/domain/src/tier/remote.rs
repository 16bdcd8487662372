//! Finding a sealed recording in the object store and reading it: its header once, then the
//! byte ranges a reader asks for (never the whole object).
use std::sync::Arc;

use object_store::path::Path;

use super::sealed::{self, Header, PREAMBLE};
use super::{Tier, Version};
use crate::error::{Error, Result};
use crate::store::{Chunk, Tombstone};

/// Bytes read with the preamble, so that most headers come in the same request.
const FIRST_READ: u64 = 64 * 1024;

/// What the object store holds of a conversation.
#[derive(Debug, Clone)]
pub enum Remote {
    /// Its newest sealed copy.
    Sealed(Arc<Sealed>),
    /// It was deleted or collected.
    Gone(Tombstone),
}

/// One sealed copy, its header read.
#[derive(Debug)]
pub struct Sealed {
    tier: Tier,
    path: Path,
    /// Where the data begins in the object.
    data_start: u64,
    /// What the copy says about its recording.
    pub header: Header,
}

impl Tier {
    /// What the object store holds of conversation `key`: its newest sealed copy, else its
    /// tombstone (until that is forgotten, at `now_ms`), else `None`.
    ///
    /// Fails with `ObjectStoreUnavailable`, or `Corrupt` for an object that is not a sealed
    /// recording.
    pub async fn find(&self, key: u128, now_ms: u64) -> Result<Option<Remote>> {
        let listed = self.list(&self.keys.recordings_of(key)).await?;
        let newest = listed
            .iter()
            .filter_map(|meta| Some((self.keys.version_of(&meta.location)?, meta)))
            .max_by_key(|(version, _)| *version);
        if let Some((version, _)) = newest
            && let Some(sealed) = self.open_sealed(key, version).await?
        {
            return Ok(Some(Remote::Sealed(sealed)));
        }
        let Some(bytes) = self.get(&self.keys.tombstone(key)).await? else {
            return Ok(None);
        };
        let tombstone: Tombstone =
            crate::store::schema::decode(&bytes, "tombstone in the object store")?;
        Ok((tombstone.forgotten_at_ms > now_ms).then_some(Remote::Gone(tombstone)))
    }

    /// Sealed copy `version` of conversation `key`, its header read; `None` when it is not
    /// there (deleted or collected, perhaps by another instance).
    ///
    /// Fails as [`find`](Self::find) does.
    pub async fn open_sealed(&self, key: u128, version: Version) -> Result<Option<Arc<Sealed>>> {
        let path = self.keys.recording(key, version);
        let Some(first) = self.read_up_to(&path, FIRST_READ).await? else {
            return Ok(None);
        };
        let header_len = sealed::header_len(&first)?;
        let data_start = Header::data_start(header_len);
        let header_bytes = if data_start <= first.len() as u64 {
            first.slice(PREAMBLE as usize..data_start as usize)
        } else {
            self.get_range(&path, PREAMBLE..data_start).await?
        };
        let header = sealed::decode_header(&header_bytes)?;
        if header.key != key {
            return Err(Error::Corrupt {
                detail: format!("the object {path} holds another conversation"),
            });
        }
        Ok(Some(Arc::new(Sealed {
            tier: self.clone(),
            path,
            data_start,
            header,
        })))
    }

    /// The first `len` bytes of the object at `path` (all of it, if it is shorter); `None` if
    /// there is no such object.
    async fn read_up_to(&self, path: &Path, len: u64) -> Result<Option<bytes::Bytes>> {
        let options = object_store::GetOptions {
            range: Some(object_store::GetRange::Bounded(0..len)),
            ..Default::default()
        };
        let got = self.objects.get_opts(path, options).await;
        match got {
            Ok(got) => got.bytes().await.map(Some).map_err(super::unavailable),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(super::unavailable(err)),
        }
    }
}

impl Sealed {
    /// Chunks from `from` on, up to `max_bytes` of them (at least one), with one range read.
    ///
    /// Fails with `ObjectStoreUnavailable`.
    pub async fn read_chunks(&self, from: u64, max_bytes: usize) -> Result<Vec<Chunk>> {
        let from = from as usize;
        if from >= self.header.offsets.len() {
            return Ok(Vec::new());
        }
        let to = self.header.fit(from, max_bytes);
        let (start, end) = self.header.span(from, to);
        let data = self
            .tier
            .get_range(&self.path, self.data_start + start..self.data_start + end)
            .await?;
        Ok(self.header.chunks(from, &data))
    }

    /// The index of the chunk holding byte `offset`.
    pub fn locate(&self, offset: u64) -> u64 {
        self.header.locate(offset)
    }
}
