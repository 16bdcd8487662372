//! How unfolded chunks are folded into `chunks`: packed into segments that follow the
//! recording's last one, or into that last one itself while it has room (a checkpoint or a
//! recording's end may have left it short). The writer and rolling forward through the log
//! fold alike, so that a fold applied again writes the segment it wrote.
use redb::ReadableTable;

use super::super::segment::{self, Segment};
use crate::error::{Error, Result};

/// One segment a fold writes: row `(key, first)`, holding `count` chunks.
pub(crate) struct Packed {
    pub(crate) first: u64,
    pub(crate) count: usize,
    pub(crate) segment: Vec<u8>,
}

/// Plans the fold of `values`, the unfolded chunks of `key` from chunk `first` on: returns the
/// segments to write, and how many of `values` they hold. The recording's last segment is
/// packed again, with them after its own chunks, when the first of them fits in it. Unless
/// `all`, the last segment the packing makes is left out (its chunks stay unfolded until more
/// follow), so that a fold writes full segments only.
///
/// Fails with `Corrupt` when the recording's folded chunks do not end where `values` begin.
pub(crate) fn plan_fold(
    chunks: &impl ReadableTable<(u128, u64), &'static [u8]>,
    key: u128,
    first: u64,
    values: &[&[u8]],
    all: bool,
) -> Result<(Vec<Packed>, usize)> {
    let Some(first_value) = values.first() else {
        return Ok((Vec::new(), 0));
    };
    let (start, reused) =
        last_segment_with_room(chunks, key, first, first_value.len())?.unwrap_or_default();
    let start = if reused.is_empty() { first } else { start };
    let packing: Vec<&[u8]> = reused
        .iter()
        .map(Vec::as_slice)
        .chain(values.iter().copied())
        .collect();
    let runs = segment::pack(packing.iter().map(|value| value.len()));
    let kept = if all { runs.len() } else { runs.len() - 1 };
    let mut planned = Vec::with_capacity(kept);
    let mut at = 0;
    for &count in &runs[..kept] {
        let mut bytes = Vec::new();
        segment::encode(&mut bytes, packing[at..at + count].iter().copied());
        planned.push(Packed {
            first: start + at as u64,
            count,
            segment: bytes,
        });
        at += count;
    }
    // A planned segment holds the reused chunks and at least one more, or nothing was planned.
    Ok((planned, at.saturating_sub(reused.len())))
}

/// The first index and the values of `key`'s last segment, which must end at chunk `end`, if
/// a value of `length` bytes fits in it.
fn last_segment_with_room(
    chunks: &impl ReadableTable<(u128, u64), &'static [u8]>,
    key: u128,
    end: u64,
    length: usize,
) -> Result<Option<(u64, Vec<Vec<u8>>)>> {
    let mut range = chunks
        .range((key, 0)..=(key, u64::MAX))
        .map_err(Error::storage)?;
    let Some(entry) = range.next_back() else {
        return Ok(None);
    };
    let (row, value) = entry.map_err(Error::storage)?;
    let start = row.value().1;
    let last = Segment::parse(value.value())?;
    if start + last.len() as u64 != end {
        return Err(Error::Corrupt {
            detail: format!(
                "the folded chunks of {key:032x} end at {}, but its unfolded ones begin at {end}",
                start + last.len() as u64
            ),
        });
    }
    if !segment::has_room(value.value().len(), length) {
        return Ok(None);
    }
    Ok(Some((start, last.values().map(<[u8]>::to_vec).collect())))
}
