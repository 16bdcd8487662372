//! A sealed recording's object: one immutable object per recording end, holding its row,
//! its chunk boundaries and commit times, its `streams` row, and its bytes.
//!
//! ```text
//! "TDSEAL01"  u64 LE header length  header (bincode)  data (the bytes, chunk after chunk)
//! ```
//!
//! The header comes first so that a reader fetches it with one small range read, then reads
//! any byte range of the data directly.
use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::schema::{self, RecordingMeta};
use crate::store::{Chunk, RecordingCopy, StreamRow};

const MAGIC: &[u8; 8] = b"TDSEAL01";
/// Magic and header length.
pub const PREAMBLE: u64 = 16;

/// What a sealed object says about its recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The conversation's storage key.
    pub key: u128,
    /// Its row as it ended: status, times, end message, retention, length.
    pub meta: RecordingMeta,
    /// Each chunk's first byte offset, ascending.
    pub offsets: Vec<u64>,
    /// Each chunk's commit time, in ms since the epoch.
    pub committed_ms: Vec<u64>,
    /// Its `streams` row, when it was made over HTTP (a fork's names its source).
    pub stream_row: Option<StreamRow>,
    /// CRC-32 of the data, checked when the copy is verified.
    pub data_crc: u32,
}

impl Header {
    /// Where the data starts in the object, once the header's length is known.
    pub fn data_start(header_len: u64) -> u64 {
        PREAMBLE + header_len
    }

    /// The `[start, end)` byte offsets of chunks `from..to`.
    pub fn span(&self, from: usize, to: usize) -> (u64, u64) {
        let end = self.offsets.get(to).copied().unwrap_or(self.meta.byte_len);
        (self.offsets[from], end)
    }

    /// The chunks `from..` whose bytes fit in `max_bytes` (at least one): their end index.
    pub fn fit(&self, from: usize, max_bytes: usize) -> usize {
        let mut to = from + 1;
        while to < self.offsets.len() {
            let (start, end) = self.span(from, to + 1);
            if end - start > max_bytes as u64 {
                break;
            }
            to += 1;
        }
        to.min(self.offsets.len())
    }

    /// The index of the chunk holding byte `offset` (below the length).
    pub fn locate(&self, offset: u64) -> u64 {
        self.offsets
            .partition_point(|&start| start <= offset)
            .saturating_sub(1) as u64
    }

    /// Chunks `from..from + n` cut out of `data`, their bytes read from the object.
    pub fn chunks(&self, from: usize, data: &Bytes) -> Vec<Chunk> {
        let base = self.offsets[from];
        let mut chunks = Vec::new();
        let mut at = 0usize;
        for index in from..self.offsets.len() {
            let (start, end) = self.span(index, index + 1);
            let len = (end - start) as usize;
            if at + len > data.len() {
                break;
            }
            debug_assert_eq!(start - base, at as u64);
            chunks.push(Chunk {
                index: index as u64,
                offset: start,
                data: data.slice(at..at + len),
                committed_ms: self.committed_ms[index],
            });
            at += len;
        }
        chunks
    }
}

/// The object for `copy`, and its header.
pub fn encode(key: u128, copy: &RecordingCopy) -> Result<(Bytes, Header)> {
    let data_len: usize = copy.chunks.iter().map(|c| c.data.len()).sum();
    let mut crc = crc32fast::Hasher::new();
    copy.chunks.iter().for_each(|c| crc.update(&c.data));
    let header = Header {
        key,
        meta: copy.meta.clone(),
        offsets: copy.chunks.iter().map(|c| c.offset).collect(),
        committed_ms: copy.chunks.iter().map(|c| c.committed_ms).collect(),
        stream_row: copy.stream_row.clone(),
        data_crc: crc.finalize(),
    };
    let encoded = schema::encode(&header, "a sealed recording's header")?;
    let mut object = BytesMut::with_capacity(PREAMBLE as usize + encoded.len() + data_len);
    object.extend_from_slice(MAGIC);
    object.extend_from_slice(&(encoded.len() as u64).to_le_bytes());
    object.extend_from_slice(&encoded);
    copy.chunks
        .iter()
        .for_each(|c| object.extend_from_slice(&c.data));
    Ok((object.freeze(), header))
}

/// The header's length, from an object's first [`PREAMBLE`] bytes.
pub fn header_len(preamble: &[u8]) -> Result<u64> {
    if preamble.len() < PREAMBLE as usize || &preamble[..8] != MAGIC {
        return Err(Error::Corrupt {
            detail: "an object in the object store is not a sealed recording".into(),
        });
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&preamble[8..16]);
    Ok(u64::from_le_bytes(len))
}

/// The header, from the object's bytes `PREAMBLE..PREAMBLE + header_len`.
pub fn decode_header(bytes: &[u8]) -> Result<Header> {
    schema::decode(bytes, "sealed recording header")
}

/// Whether `object` is exactly what [`encode`] made of a recording with `header`: the read-back
/// check before a copy is marked.
pub fn verify(object: &[u8], header: &Header) -> Result<bool> {
    let len = header_len(object)?;
    let start = Header::data_start(len) as usize;
    if object.len() < start {
        return Ok(false);
    }
    let stored = decode_header(&object[PREAMBLE as usize..start])?;
    let data = &object[start..];
    Ok(&stored == header
        && data.len() as u64 == header.meta.byte_len
        && crc32fast::hash(data) == header.data_crc)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::status::Status;

    pub(in crate::tier) fn copy(texts: &[&str]) -> RecordingCopy {
        let mut offset = 0;
        let chunks = texts
            .iter()
            .enumerate()
            .map(|(index, text)| {
                let chunk = Chunk {
                    index: index as u64,
                    offset,
                    data: Bytes::copy_from_slice(text.as_bytes()),
                    committed_ms: 1000 + index as u64,
                };
                offset += text.len() as u64;
                chunk
            })
            .collect();
        RecordingCopy {
            meta: RecordingMeta {
                original_id: b"c".to_vec(),
                status: Status::Completed,
                created_ms: 1,
                updated_ms: 2,
                finished_ms: Some(2),
                expires_at_ms: Some(3),
                chunk_count: texts.len() as u64,
                byte_len: offset,
                error: None,
                generation: 1,
                retention_ms: None,
                timed_chunks: true,
            },
            chunks,
            stream_row: None,
        }
    }

    #[test]
    fn an_object_gives_back_its_chunks_by_range_and_by_offset() {
        let (object, header) = encode(7, &copy(&["Hello", ", ", "world", "!"])).unwrap();
        assert!(verify(&object, &header).unwrap());
        let len = header_len(&object[..16]).unwrap();
        let start = Header::data_start(len) as usize;
        assert_eq!(decode_header(&object[16..start]).unwrap(), header);
        assert_eq!(header.locate(0), 0);
        assert_eq!(header.locate(6), 1);
        assert_eq!(header.locate(13), 3);
        let to = header.fit(1, 7);
        assert_eq!(to, 3, "\", \" and \"world\" fit in 7 bytes");
        let (from_byte, to_byte) = header.span(1, to);
        let data = object.slice(start + from_byte as usize..start + to_byte as usize);
        let chunks = header.chunks(1, &data);
        let texts: Vec<_> = chunks.iter().map(|c| &c.data[..]).collect();
        assert_eq!(texts, [&b", "[..], b"world"]);
        assert_eq!(chunks[1].offset, 7);
        assert_eq!(chunks[1].committed_ms, 1002);
        assert_eq!(header.fit(0, 1), 1, "at least one chunk");
    }

    #[test]
    fn a_changed_byte_fails_verification() {
        let (object, header) = encode(7, &copy(&["Hello"])).unwrap();
        let mut bad = object.to_vec();
        *bad.last_mut().unwrap() ^= 1;
        assert!(!verify(&bad, &header).unwrap());
        assert!(!verify(&object[..object.len() - 1], &header).unwrap());
        assert!(header_len(b"not a sealed object").is_err());
    }
}
