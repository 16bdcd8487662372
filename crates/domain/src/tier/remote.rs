//! Finding a sealed recording in the object store and reading it: its header and the start of
//! its data in one request (by the name of its newest copy, else after a listing), then the
//! rest a window at a time. Each request to an object store costs milliseconds, so a reader
//! going through a recording makes as few as it can: a recording of up to [`FIRST_READ`] is
//! read with the header, a longer one a [`READ_AHEAD`] window per request, however small the
//! messages it is replayed in.
//!
//! The first request's answer is read as it arrives: once the header and [`FIRST_DATA`] bytes
//! of data are in, the reader has its first chunks, and the rest of that answer comes in
//! meanwhile, for its next read: a long recording's first byte does not wait for the whole
//! MiB to arrive (as far as the object store sends an answer while it reads it).
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use futures::StreamExt;
use futures::future::{RemoteHandle, Shared};

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
/// Bytes of data the first read hands over before the rest of its answer is in: the reader's
/// first messages (4 KiB, then doubling) go out from these.
const FIRST_DATA: u64 = 64 * 1024;

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
    /// The first read's data, whole, while the rest of its answer is still arriving.
    arriving: Mutex<Option<Arriving>>,
}

/// The first read's data from its start, once the rest of the answer is in; `None` if the
/// answer broke off (the next read then asks for what it needs).
#[derive(Clone)]
struct Arriving(Shared<RemoteHandle<Option<Bytes>>>);

impl std::fmt::Debug for Arriving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Arriving")
    }
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
    /// came with it; `None` when there is no such object. Returns once the header and the
    /// first [`FIRST_DATA`] bytes of data are in; the rest of the answer keeps arriving.
    async fn read_sealed(&self, key: u128, path: Path) -> Result<Option<Sealed>> {
        let Some((mut answer, length)) = self.read_up_to(&path, FIRST_READ).await? else {
            return Ok(None);
        };
        let mut first = BytesMut::new();
        // Until the header and the first data are in (all of the first read, when its header
        // is longer), or the whole answer is.
        while (first.len() as u64) < length {
            if first.len() >= PREAMBLE as usize {
                let data_start = Header::data_start(sealed::header_len(&first)?);
                if first.len() as u64 >= (data_start + FIRST_DATA).min(FIRST_READ) {
                    break;
                }
            }
            match answer.next().await {
                Some(piece) => first.extend_from_slice(&piece.map_err(super::unavailable)?),
                None => break,
            }
        }
        let whole_in = first.len() as u64 >= length;
        let first = first.freeze();
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
        // The rest of the answer is read meanwhile (and dropped with the copy if nobody waits
        // for it); the reader's next read takes it whole, as one window.
        let arriving = (!whole_in && data_start < first.len() as u64).then(|| {
            let head = window.clone();
            let (rest, handle) = async move {
                let mut pieces = vec![head];
                while let Some(piece) = answer.next().await {
                    pieces.push(piece.ok()?);
                }
                Some(Bytes::from(pieces.concat()))
            }
            .remote_handle();
            tokio::spawn(rest);
            Arriving(handle.shared())
        });
        Ok(Some(Sealed {
            tier: self.clone(),
            path,
            data_start,
            header,
            window: Mutex::new((0, window)),
            arriving: Mutex::new(arriving),
        }))
    }

    /// The first `len` bytes of the object at `path` (all of it, if it is shorter), as they
    /// arrive, and how many there are; `None` if there is no such object.
    async fn read_up_to(
        &self,
        path: &Path,
        len: u64,
    ) -> Result<
        Option<(
            futures::stream::BoxStream<'static, object_store::Result<Bytes>>,
            u64,
        )>,
    > {
        let options = object_store::GetOptions {
            range: Some(object_store::GetRange::Bounded(0..len)),
            ..Default::default()
        };
        let got = self.objects.get_opts(path, options).await;
        match got {
            Ok(got) => {
                let length = got.range.end - got.range.start;
                Ok(Some((got.into_stream(), length)))
            }
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
        let mut data = self.held(start, end);
        if data.is_none() {
            data = self.arrived(start, end).await;
        }
        let data = match data {
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

    /// Data bytes `start..end` from the first read, once the rest of its answer is in, if it
    /// holds them all; the window is then the first read's data.
    async fn arrived(&self, start: u64, end: u64) -> Option<Bytes> {
        let arriving = self
            .arriving
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()?;
        let whole = arriving.0.await;
        // In, or broken off: either way nobody waits for it again.
        self.arriving
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        *self.window.lock().unwrap_or_else(|e| e.into_inner()) = (0, whole?);
        self.held(start, end)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::sealed::tests::copy;

    const KEY: u128 = 0x5eed;

    /// A sealed copy of 300 chunks of 7,000 bytes (2.1 MiB: past the first read), in a tier on
    /// a local directory, whose answers arrive in pieces of a few KiB as a network's would.
    async fn stored(dir: &std::path::Path) -> (Tier, Version, String) {
        let texts: Vec<String> = (0..300)
            .map(|i| format!("{i:>6}:{}", "x".repeat(6_993)))
            .collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let copy = copy(&texts);
        let tier = Tier::open(&format!("file://{}", dir.display())).unwrap();
        let version = Tier::version_of(&copy).unwrap();
        let (object, _) = sealed::encode(KEY, &copy).unwrap();
        tier.put(&tier.keys.recording(KEY, version), object)
            .await
            .unwrap();
        (tier, version, texts.concat())
    }

    /// Every chunk from `from` on, read as a replay reads them.
    async fn read_from(sealed: &Sealed, mut from: u64) -> String {
        let mut text = Vec::new();
        loop {
            let chunks = sealed.read_chunks(from, 64 * 1024).await.unwrap();
            let Some(last) = chunks.last() else { break };
            from = last.index + 1;
            for chunk in &chunks {
                text.extend_from_slice(&chunk.data);
            }
        }
        String::from_utf8(text).unwrap()
    }

    #[tokio::test]
    async fn the_first_chunks_come_before_the_first_read_is_in_and_every_byte_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let (tier, version, whole) = stored(dir.path()).await;
        let sealed = tier.open_sealed(KEY, version).await.unwrap().unwrap();
        // Opened with the header and the first data only: the rest was still arriving.
        let held = sealed.window.lock().unwrap().1.len() as u64;
        assert!(held < FIRST_READ / 2, "held {held} bytes at open");
        assert!(sealed.arriving.lock().unwrap().is_some());
        let first = sealed.read_chunks(0, 4096).await.unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(&first[0].data[..], &whole.as_bytes()[..7_000]);
        // The whole recording, the first read's rest and the windows after it.
        assert_eq!(read_from(&sealed, 1).await, whole[7_000..]);
        assert!(sealed.arriving.lock().unwrap().is_none());
    }

    #[tokio::test]
    async fn a_reader_starting_past_the_first_data_or_the_first_read_gets_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (tier, version, whole) = stored(dir.path()).await;
        for from in [20u64, 149, 150, 299] {
            let sealed = tier.open_sealed(KEY, version).await.unwrap().unwrap();
            let at = from as usize * 7_000;
            assert_eq!(
                read_from(&sealed, from).await,
                whole[at..],
                "from chunk {from}"
            );
        }
        // A copy dropped before anyone waits for the rest of its first read.
        drop(tier.open_sealed(KEY, version).await.unwrap());
    }
}
