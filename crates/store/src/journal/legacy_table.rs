//! The journal as files before this build kept it: a redb table of entries in append order,
//! `(seq)` → conversation, chunk index and chunk value. Such a file's journal (and the log
//! that changed it) is folded into `chunks` when it is opened; nothing writes the table since.
use std::collections::HashMap;

use redb::ReadableTable;

use super::super::schema::{self, CHUNKS, JOURNAL};
use super::super::segment::{self, Segment};
use crate::error::{Error, Result};

/// Journal entries read out of the table: `(seq, value)`.
pub(crate) type ReadEntries = Vec<(u64, Vec<u8>)>;

/// Decodes journal entries `(seq, value)` that hold consecutive chunks of one recording (of
/// `key`, when given): returns the recording, the index of the first chunk, and the chunk
/// values. Fails with `Corrupt` when they are anything else.
pub(crate) fn decode_run(
    key: Option<u128>,
    entries: &[(u64, Vec<u8>)],
) -> Result<(u128, u64, Vec<&[u8]>)> {
    let mut values = Vec::with_capacity(entries.len());
    let (mut run_key, mut first) = (key, None);
    for (seq, value) in entries {
        let (entry_key, index, chunk) = schema::decode_journal(value)?;
        let expected_key = *run_key.get_or_insert(entry_key);
        let expected_index = first.map_or(index, |first| first + values.len() as u64);
        if (entry_key, index) != (expected_key, expected_index) {
            return Err(Error::Corrupt {
                detail: format!(
                    "journal entry {seq} holds chunk {index} of {entry_key:032x}, \
                     expected chunk {expected_index} of {expected_key:032x}"
                ),
            });
        }
        first.get_or_insert(index);
        values.push(chunk);
    }
    Ok((
        run_key.unwrap_or_default(),
        first.unwrap_or_default(),
        values,
    ))
}

/// Folds every journal entry past its recording's last segment into `chunks` and empties the
/// journal, within `txn`; used on open, when no index exists. Returns how many were folded.
pub(crate) fn fold_all(txn: &redb::WriteTransaction) -> Result<u64> {
    let mut journal = txn.open_table(JOURNAL).map_err(Error::storage)?;
    let mut chunks = txn.open_table(CHUNKS).map_err(Error::storage)?;
    // Per recording: where its folded chunks end, and its entries from there on.
    let mut runs: HashMap<u128, (u64, ReadEntries)> = HashMap::new();
    for entry in journal.iter().map_err(Error::storage)? {
        let (seq, value) = entry.map_err(Error::storage)?;
        let (key, index, _) = schema::decode_journal(value.value())?;
        let (folded_to, entries) = match runs.entry(key) {
            std::collections::hash_map::Entry::Occupied(run) => run.into_mut(),
            std::collections::hash_map::Entry::Vacant(run) => {
                run.insert((folded_end(&chunks, key)?, Vec::new()))
            }
        };
        if index >= *folded_to {
            entries.push((seq.value(), value.value().to_vec()));
        }
    }
    let mut total = 0;
    for (key, (folded_to, entries)) in runs {
        if entries.is_empty() {
            continue;
        }
        let (_, first, values) = decode_run(Some(key), &entries)?;
        if first != folded_to {
            return Err(Error::Corrupt {
                detail: format!(
                    "the journal holds chunks of {key:032x} from {first} on, but its folded chunks end at {folded_to}"
                ),
            });
        }
        segment::write_packed(&values, |run, segment| {
            let row = (key, first + run.start as u64);
            chunks
                .insert(row, segment)
                .map(drop)
                .map_err(Error::storage)
        })?;
        total += values.len() as u64;
    }
    journal.retain(|_, _| false).map_err(Error::storage)?;
    Ok(total)
}

/// The index just past `key`'s last folded chunk (0 when it has none).
fn folded_end(chunks: &redb::Table<'_, (u128, u64), &'static [u8]>, key: u128) -> Result<u64> {
    let mut range = chunks
        .range((key, 0)..=(key, u64::MAX))
        .map_err(Error::storage)?;
    match range.next_back() {
        Some(entry) => {
            let (first, value) = entry.map_err(Error::storage)?;
            Ok(first.value().1 + Segment::parse(value.value())?.len() as u64)
        }
        None => Ok(0),
    }
}
