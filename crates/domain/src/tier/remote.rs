//! Finding a sealed recording in the object store and reading it: its header and the start of
//! its data in one request (by the name of its newest copy, else after a listing), then the
//! rest a window at a time. Each request to an object store costs milliseconds, so a reader
//! going through a recording makes as few as it can: a recording of up to [`FIRST_READ`] is
//! read with the header, a longer one a [`READ_AHEAD`] window per request, however small the
//! messages it is replayed in.
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use object_store::path::Path;

use super::sealed::{self, Header, PREAMBLE};
use super::{Tier, Version};
use crate::error::{Error, Result};
use crate::store::{Chunk, Tombstone};

/// Bytes read with the preamble: the header, and the data after it, of most recordings whole.
/// A reader starting far into a long recording reads that much it does not need, once.
const FIRST_READ: u64 = 1024 * 1024;
/// Bytes of data fetched by one request past what is held.
const READ_AHEAD: u64 = 1024 * 1024;

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
    /// The data last fetched: its first byte's offset in the data, and the bytes.
    window: Mutex<(u64, Bytes)>,
}

impl Tier {
    /// What the object store holds of conversation `key`: its newest sealed copy, else its
    /// tombstone (until that is forgotten, at `now_ms`), else `None`. The newest copy is read
    /// by its name when it has one (one request), else found by a listing.
    ///
    /// Fails with `ObjectStoreUnavailable`, or `Corrupt` for an object that is not a sealed
    /// recording.
    pub async fn find(&self, key: u128, now_ms: u64) -> Result<Option<Remote>> {
        if let Some(sealed) = self.read_sealed(key, self.keys.newest(key)).await? {
            // Later reads go to the versioned copy it is a copy of: that one never changes.
            let version = sealed.version()?;
            let sealed = Sealed {
                path: self.keys.recording(key, version),
                ..sealed
            };
            return Ok(Some(Remote::Sealed(Arc::new(sealed))));
        }
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
        let sealed = self
            .read_sealed(key, self.keys.recording(key, version))
            .await?;
        Ok(sealed.map(Arc::new))
    }

    /// The sealed copy of conversation `key` at `path`, its header read, with the data that
    /// came with it; `None` when there is no such object.
    async fn read_sealed(&self, key: u128, path: Path) -> Result<Option<Sealed>> {
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
        // What the first read brought of the data is kept for the reader.
        let window = first.slice((data_start as usize).min(first.len())..);
        if header.key != key {
            return Err(Error::Corrupt {
                detail: format!("the object {path} holds another conversation"),
            });
        }
        Ok(Some(Sealed {
            tier: self.clone(),
            path,
            data_start,
            header,
            window: Mutex::new((0, window)),
        }))
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
    /// The version this copy is, as its header says.
    fn version(&self) -> Result<Version> {
        super::seal::version_of_ended(&self.header.meta)
    }

    /// Chunks from `from` on, up to `max_bytes` of them (at least one): from the bytes held,
    /// else with one range read of at least [`READ_AHEAD`] bytes, which are held for the next.
    ///
    /// Fails with `ObjectStoreUnavailable`.
    pub async fn read_chunks(&self, from: u64, max_bytes: usize) -> Result<Vec<Chunk>> {
        let from = from as usize;
        if from >= self.header.offsets.len() {
            return Ok(Vec::new());
        }
        let to = self.header.fit(from, max_bytes);
        let (start, end) = self.header.span(from, to);
        let data = match self.held(start, end) {
            Some(data) => data,
            None => {
                let until = (start + READ_AHEAD).max(end).min(self.header.meta.byte_len);
                let fetched = self
                    .tier
                    .get_range(&self.path, self.data_start + start..self.data_start + until)
                    .await?;
                let data = fetched.slice(..((end - start) as usize).min(fetched.len()));
                *self.window.lock().unwrap_or_else(|e| e.into_inner()) = (start, fetched);
                data
            }
        };
        Ok(self.header.chunks(from, &data))
    }

    /// Data bytes `start..end`, if the window holds them all.
    fn held(&self, start: u64, end: u64) -> Option<Bytes> {
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let (at, bytes) = &*window;
        let held_end = at + bytes.len() as u64;
        (*at <= start && end <= held_end)
            .then(|| bytes.slice((start - at) as usize..(end - at) as usize))
    }

    /// The index of the chunk holding byte `offset`.
    pub fn locate(&self, offset: u64) -> u64 {
        self.header.locate(offset)
    }
}
