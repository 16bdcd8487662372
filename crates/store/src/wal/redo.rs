//! A commit's changes, as the log holds them: the inserts and removals made through
//! [`Logged`](super::Logged) tables, in the order they were made, encoded with each table's own
//! key and value bytes; and the journal's changes, which live in memory until they are folded:
//! chunks appended, folds (by count, so that a chunk's bytes are logged once) and recordings
//! whose unfolded chunks were dropped.
//!
//! A change is `[kind: u8][table: u8]` then, by kind: insert `[key][value]`; remove `[key]`;
//! remove range `[start bound][end bound]`. Bytes are `[length: u32][bytes]`; a bound is `[0]`
//! unbounded, `[1][bytes]` included, `[2][bytes]` excluded. The journal's changes have no table
//! byte: append `[6][conversation: u128][chunk index: u64][chunk value: bytes]`; pack
//! `[7][conversation: u128][first: u64][count: u32]` (segment `(conversation, first)` holds
//! `count` chunks: those the row held, then the first unfolded ones); forget
//! `[8][conversation: u128]`.
//!
//! Logs of earlier builds, which kept the journal in a redb table, also hold folds of its
//! entries: `[5][count: u32][journal seq: u64 × count]`, entries packed into one segment, and,
//! before schema 4, `[4][journal seq: u64]`, one entry copied as one row.
use std::cell::RefCell;
use std::ops::Bound;

use crate::error::{Error, Result};

/// The tables a commit changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum TableId {
    Chunks = 0,
    Journal = 1,
    Recordings = 2,
    Expiry = 3,
    Started = 4,
    Tombstones = 5,
    TombstoneExpiry = 6,
    Streams = 7,
    Sealed = 8,
    Live = 9,
}

impl TableId {
    fn from_byte(byte: u8) -> Result<TableId> {
        Ok(match byte {
            0 => TableId::Chunks,
            1 => TableId::Journal,
            2 => TableId::Recordings,
            3 => TableId::Expiry,
            4 => TableId::Started,
            5 => TableId::Tombstones,
            6 => TableId::TombstoneExpiry,
            7 => TableId::Streams,
            8 => TableId::Sealed,
            9 => TableId::Live,
            other => return Err(damaged(format!("unknown table {other}"))),
        })
    }
}

const INSERT: u8 = 1;
const REMOVE: u8 = 2;
const REMOVE_RANGE: u8 = 3;
const LEGACY_FOLD: u8 = 4;
const FOLD: u8 = 5;
const APPEND: u8 = 6;
const PACK: u8 = 7;
const FORGET: u8 = 8;

/// The changes of the transaction under way, gathered as its tables are changed.
#[derive(Default)]
pub(crate) struct Redo {
    bytes: RefCell<Vec<u8>>,
}

/// One decoded change.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change<'a> {
    /// An insert or removal in one table.
    Edit { table: TableId, edit: Edit<'a> },
    /// Chunk `index` of `key`, appended to the journal.
    Append {
        key: u128,
        index: u64,
        value: &'a [u8],
    },
    /// Segment `(key, first)` written with `count` chunks: those it held, if it was there,
    /// then the first of `key`'s unfolded chunks.
    Pack { key: u128, first: u64, count: u32 },
    /// `key`'s unfolded chunks dropped.
    Forget { key: u128 },
    /// Journal entries `seqs` of a redb journal, consecutive chunks of one recording, packed
    /// into one segment.
    Fold { seqs: Vec<u64> },
    /// Journal entry `seq` copied into `chunks` as one row, as logs before schema 4 did.
    LegacyFold { seq: u64 },
}

/// An insert or removal, in a table's own key and value bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Edit<'a> {
    Insert {
        key: &'a [u8],
        value: &'a [u8],
    },
    Remove {
        key: &'a [u8],
    },
    RemoveRange {
        start: Bound<&'a [u8]>,
        end: Bound<&'a [u8]>,
    },
}

impl Redo {
    pub(crate) fn insert(&self, table: TableId, key: &[u8], value: &[u8]) {
        let mut bytes = self.bytes.borrow_mut();
        bytes.extend_from_slice(&[INSERT, table as u8]);
        put(&mut bytes, key);
        put(&mut bytes, value);
    }

    pub(crate) fn remove(&self, table: TableId, key: &[u8]) {
        let mut bytes = self.bytes.borrow_mut();
        bytes.extend_from_slice(&[REMOVE, table as u8]);
        put(&mut bytes, key);
    }

    pub(crate) fn remove_range(&self, table: TableId, start: Bound<&[u8]>, end: Bound<&[u8]>) {
        let mut bytes = self.bytes.borrow_mut();
        bytes.extend_from_slice(&[REMOVE_RANGE, table as u8]);
        put_bound(&mut bytes, start);
        put_bound(&mut bytes, end);
    }

    pub(crate) fn append(&self, key: u128, index: u64, value: &[u8]) {
        let mut bytes = self.bytes.borrow_mut();
        bytes.push(APPEND);
        bytes.extend_from_slice(&key.to_le_bytes());
        bytes.extend_from_slice(&index.to_le_bytes());
        put(&mut bytes, value);
    }

    pub(crate) fn pack(&self, key: u128, first: u64, count: usize) {
        let mut bytes = self.bytes.borrow_mut();
        bytes.push(PACK);
        bytes.extend_from_slice(&key.to_le_bytes());
        bytes.extend_from_slice(&first.to_le_bytes());
        let count = u32::try_from(count).expect("a segment holds fewer than 2^32 chunks");
        bytes.extend_from_slice(&count.to_le_bytes());
    }

    pub(crate) fn forget(&self, key: u128) {
        let mut bytes = self.bytes.borrow_mut();
        bytes.push(FORGET);
        bytes.extend_from_slice(&key.to_le_bytes());
    }

    /// A fold of redb journal entries, as earlier builds logged it.
    #[cfg(test)]
    pub(crate) fn fold(&self, seqs: &[u64]) {
        let mut bytes = self.bytes.borrow_mut();
        bytes.push(FOLD);
        let count = u32::try_from(seqs.len()).expect("a fold holds fewer than 2^32 entries");
        bytes.extend_from_slice(&count.to_le_bytes());
        for seq in seqs {
            bytes.extend_from_slice(&seq.to_le_bytes());
        }
    }

    /// Bytes of changes gathered so far.
    pub(crate) fn len(&self) -> usize {
        self.bytes.borrow().len()
    }

    /// The encoded changes, leaving none.
    pub(crate) fn take(&self) -> Vec<u8> {
        std::mem::take(&mut self.bytes.borrow_mut())
    }
}

fn put(bytes: &mut Vec<u8>, value: &[u8]) {
    let length = u32::try_from(value.len()).expect("redb values are shorter than 4 GiB");
    bytes.extend_from_slice(&length.to_le_bytes());
    bytes.extend_from_slice(value);
}

fn put_bound(bytes: &mut Vec<u8>, bound: Bound<&[u8]>) {
    match bound {
        Bound::Unbounded => bytes.push(0),
        Bound::Included(key) => {
            bytes.push(1);
            put(bytes, key);
        }
        Bound::Excluded(key) => {
            bytes.push(2);
            put(bytes, key);
        }
    }
}

/// Reads the changes of one logged commit, in order.
pub(crate) struct Changes<'a> {
    rest: &'a [u8],
}

impl<'a> Changes<'a> {
    pub(crate) fn new(payload: &'a [u8]) -> Self {
        Self { rest: payload }
    }

    fn byte(&mut self) -> Result<u8> {
        let (&first, rest) = self
            .rest
            .split_first()
            .ok_or_else(|| damaged("a change is cut short".into()))?;
        self.rest = rest;
        Ok(first)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(damaged("a change is cut short".into()));
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u128(&mut self) -> Result<u128> {
        Ok(u128::from_le_bytes(
            self.take(16)?.try_into().expect("16 bytes"),
        ))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let length = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"));
        self.take(length as usize)
    }

    fn bound(&mut self) -> Result<Bound<&'a [u8]>> {
        Ok(match self.byte()? {
            0 => Bound::Unbounded,
            1 => Bound::Included(self.bytes()?),
            2 => Bound::Excluded(self.bytes()?),
            other => return Err(damaged(format!("unknown bound {other}"))),
        })
    }

    fn change(&mut self) -> Result<Change<'a>> {
        let kind = self.byte()?;
        match kind {
            APPEND => {
                return Ok(Change::Append {
                    key: self.u128()?,
                    index: self.u64()?,
                    value: self.bytes()?,
                });
            }
            PACK => {
                return Ok(Change::Pack {
                    key: self.u128()?,
                    first: self.u64()?,
                    count: self.u32()?,
                });
            }
            FORGET => return Ok(Change::Forget { key: self.u128()? }),
            LEGACY_FOLD => return Ok(Change::LegacyFold { seq: self.u64()? }),
            FOLD => {
                let count = self.u32()?;
                let seqs = (0..count).map(|_| self.u64()).collect::<Result<_>>()?;
                return Ok(Change::Fold { seqs });
            }
            _ => {}
        }
        let table = TableId::from_byte(self.byte()?)?;
        let edit = match kind {
            INSERT => Edit::Insert {
                key: self.bytes()?,
                value: self.bytes()?,
            },
            REMOVE => Edit::Remove { key: self.bytes()? },
            REMOVE_RANGE => Edit::RemoveRange {
                start: self.bound()?,
                end: self.bound()?,
            },
            other => return Err(damaged(format!("unknown change {other}"))),
        };
        Ok(Change::Edit { table, edit })
    }
}

impl<'a> Iterator for Changes<'a> {
    type Item = Result<Change<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let change = self.change();
        if change.is_err() {
            self.rest = &[];
        }
        Some(change)
    }
}

/// A frame checked out whole but does not decode: written by a different build, or damaged in
/// a way the checksum missed.
fn damaged(detail: String) -> Error {
    Error::Corrupt {
        detail: format!("write-ahead log: {detail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_decode_as_they_were_logged() {
        let redo = Redo::default();
        redo.insert(TableId::Journal, b"k", b"value");
        redo.remove(TableId::Expiry, b"gone");
        redo.fold(&[42, 43]);
        redo.append(7, 3, b"chunk");
        redo.pack(7, 2, 2);
        redo.forget(7);
        redo.remove_range(TableId::Chunks, Bound::Included(b"a"), Bound::Unbounded);
        redo.remove_range(TableId::Journal, Bound::Unbounded, Bound::Excluded(b"z"));
        let payload = redo.take();
        assert!(redo.take().is_empty());
        let changes: Vec<Change<'_>> = Changes::new(&payload).collect::<Result<_>>().unwrap();
        assert_eq!(
            changes,
            vec![
                Change::Edit {
                    table: TableId::Journal,
                    edit: Edit::Insert {
                        key: b"k",
                        value: b"value"
                    }
                },
                Change::Edit {
                    table: TableId::Expiry,
                    edit: Edit::Remove { key: b"gone" }
                },
                Change::Fold { seqs: vec![42, 43] },
                Change::Append {
                    key: 7,
                    index: 3,
                    value: b"chunk"
                },
                Change::Pack {
                    key: 7,
                    first: 2,
                    count: 2
                },
                Change::Forget { key: 7 },
                Change::Edit {
                    table: TableId::Chunks,
                    edit: Edit::RemoveRange {
                        start: Bound::Included(b"a"),
                        end: Bound::Unbounded
                    }
                },
                Change::Edit {
                    table: TableId::Journal,
                    edit: Edit::RemoveRange {
                        start: Bound::Unbounded,
                        end: Bound::Excluded(b"z")
                    }
                },
            ]
        );
        let cut = &payload[..payload.len() - 1];
        assert!(Changes::new(cut).any(|c| c.is_err()));
    }
}
