//! Segments: the values of `chunks`. A segment holds a run of one recording's consecutive
//! chunks, each as its layout encodes it (see [`ChunkLayout`](super::schema::ChunkLayout)),
//! under the index of its first chunk. Runs are packed up to [`SEGMENT_BYTES`] so that a
//! segment fills one 16 KiB redb page: a B-tree leaf splits in half by bytes, so one row per
//! small chunk left every leaf about half empty, and the file twice the data.
//!
//! Layout: `[count: u32][count × value length: u32][values, concatenated]`, little-endian.
use std::ops::Range;

use crate::error::{Error, Result};

/// The largest segment the packer builds (unless one chunk alone is larger): a 16 KiB page
/// less room for the leaf's header and the row's key.
pub(crate) const SEGMENT_BYTES: usize = 16 * 1024 - 64;

/// Bytes a segment spends on its count and on each value's length.
const COUNT_BYTES: usize = 4;
const LENGTH_BYTES: usize = 4;

/// A stored segment, decoded lazily: its values are found through the length table.
pub(crate) struct Segment<'a> {
    lengths: &'a [u8],
    values: &'a [u8],
    count: usize,
}

impl<'a> Segment<'a> {
    /// Reads a segment's header; fails with `Corrupt` when the value is too short for it.
    pub(crate) fn parse(value: &'a [u8]) -> Result<Self> {
        let count_bytes: [u8; COUNT_BYTES] = value
            .get(..COUNT_BYTES)
            .and_then(|c| c.try_into().ok())
            .ok_or_else(|| corrupt("shorter than its count"))?;
        let count = u32::from_le_bytes(count_bytes) as usize;
        let table_end = COUNT_BYTES + count * LENGTH_BYTES;
        let lengths = value
            .get(COUNT_BYTES..table_end)
            .ok_or_else(|| corrupt("shorter than its length table"))?;
        let values = &value[table_end..];
        let total: usize = lengths.chunks_exact(LENGTH_BYTES).map(read_length).sum();
        if count == 0 || total != values.len() {
            return Err(corrupt("its lengths do not add up"));
        }
        Ok(Self {
            lengths,
            values,
            count,
        })
    }

    /// How many chunks it holds (at least one).
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The chunk values, in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        let values = self.values;
        let mut start = 0;
        self.lengths.chunks_exact(LENGTH_BYTES).map(move |length| {
            let end = start + read_length(length);
            let value = &values[start..end];
            start = end;
            value
        })
    }

    /// The value of the chunk at `position` in the segment.
    pub(crate) fn value(&self, position: usize) -> Option<&'a [u8]> {
        if position >= self.count {
            return None;
        }
        let start: usize = (0..position).map(|i| self.length(i)).sum();
        Some(&self.values[start..start + self.length(position)])
    }

    /// The value of its last chunk.
    pub(crate) fn last(&self) -> &'a [u8] {
        let length = self.length(self.count - 1);
        &self.values[self.values.len() - length..]
    }

    fn length(&self, position: usize) -> usize {
        read_length(&self.lengths[position * LENGTH_BYTES..(position + 1) * LENGTH_BYTES])
    }
}

fn read_length(bytes: &[u8]) -> usize {
    u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize
}

/// Encodes `values` as one segment into `out`, replacing what it held.
pub(crate) fn encode<'v>(
    out: &mut Vec<u8>,
    values: impl ExactSizeIterator<Item = &'v [u8]> + Clone,
) {
    out.clear();
    let count = u32::try_from(values.len()).expect("a segment holds fewer than 2^32 chunks");
    out.extend_from_slice(&count.to_le_bytes());
    for value in values.clone() {
        let length = u32::try_from(value.len()).expect("a chunk is shorter than 4 GiB");
        out.extend_from_slice(&length.to_le_bytes());
    }
    for value in values {
        out.extend_from_slice(value);
    }
}

/// Packs `values` into segments (runs as [`pack`] splits them) and hands each to `write`,
/// with the range of `values` it holds.
pub(crate) fn write_packed(
    values: &[&[u8]],
    mut write: impl FnMut(Range<usize>, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut segment = Vec::new();
    let mut at = 0;
    for count in pack(values.iter().map(|v| v.len())) {
        let run = at..at + count;
        encode(&mut segment, values[run.clone()].iter().copied());
        write(run, &segment)?;
        at += count;
    }
    Ok(())
}

/// Whether a value of `length` bytes fits beside the values of an encoded segment of
/// `segment_bytes` bytes, as [`pack`] would put it there.
pub(crate) fn has_room(segment_bytes: usize, length: usize) -> bool {
    segment_bytes + LENGTH_BYTES + length <= SEGMENT_BYTES
}

/// Splits values of lengths `lengths` into runs for segments of at most [`SEGMENT_BYTES`]
/// each (a value larger than that alone); returns the number of values in each run.
pub(crate) fn pack(lengths: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let mut runs = Vec::new();
    let (mut count, mut bytes) = (0, COUNT_BYTES);
    for length in lengths {
        let grown = bytes + LENGTH_BYTES + length;
        if count > 0 && grown > SEGMENT_BYTES {
            runs.push(count);
            (count, bytes) = (0, COUNT_BYTES);
        }
        count += 1;
        bytes += LENGTH_BYTES + length;
    }
    if count > 0 {
        runs.push(count);
    }
    runs
}

fn corrupt(what: &str) -> Error {
    Error::Corrupt {
        detail: format!("a stored segment of chunks is {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_round_trip() {
        let values: Vec<&[u8]> = vec![b"first", b"", b"third value"];
        let mut out = Vec::new();
        encode(&mut out, values.iter().copied());
        let segment = Segment::parse(&out).unwrap();
        assert_eq!(segment.len(), 3);
        assert_eq!(segment.values().collect::<Vec<_>>(), values);
        assert_eq!(segment.value(2), Some(&b"third value"[..]));
        assert_eq!(segment.value(3), None);
        assert_eq!(segment.last(), b"third value");
    }

    #[test]
    fn damaged_segments_are_refused() {
        let mut out = Vec::new();
        encode(&mut out, [&b"abc"[..]].into_iter());
        assert!(Segment::parse(&out[..out.len() - 1]).is_err());
        assert!(Segment::parse(&out[..3]).is_err());
        assert!(Segment::parse(&0u32.to_le_bytes()).is_err());
    }

    #[test]
    fn packing_fills_segments_up_to_the_limit() {
        // 1 KiB chunks: 15 to a segment, the rest in the last.
        let runs = pack(std::iter::repeat_n(1040, 40));
        assert_eq!(runs, vec![15, 15, 10]);
        // A chunk larger than a segment gets one of its own.
        assert_eq!(pack([10, SEGMENT_BYTES * 2, 10]), vec![1, 1, 1]);
        assert_eq!(pack([]), Vec::<usize>::new());
        // A segment has room for a value exactly when packing would put it there.
        let mut out = Vec::new();
        let values = vec![vec![b'x'; 1040]; 14];
        encode(&mut out, values.iter().map(Vec::as_slice));
        assert!(has_room(out.len(), 1040));
        assert_eq!(pack(std::iter::repeat_n(1040, 15)), vec![15]);
        encode(&mut out, std::iter::repeat_n(&values[0][..], 15));
        assert!(!has_room(out.len(), 1040));
        assert_eq!(pack(std::iter::repeat_n(1040, 16)), vec![15, 1]);
    }
}
