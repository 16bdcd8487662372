//! Reading the log back: entries from the in-memory cache when they are there, else from the
//! file (on a blocking thread); and how many entries one AppendEntries carries.
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use openraft::{OptionalSend, RaftLogReader, StorageError, StorageIOError};

use super::files::{self, Entry};
use super::{LogReader, LogStore, Slot, State, lock};
use crate::cluster::types::{NodeId, TypeConfig};

/// How many times a read whose entries were cut and replaced under it is tried again.
const RETRIES: usize = 3;

/// Reads the entries of `range`: the cached ones from memory, the others from the file.
pub(super) async fn read_range<RB: RangeBounds<u64> + Clone>(
    state: &Arc<Mutex<State>>,
    range: RB,
) -> Result<Vec<Entry>, StorageError<NodeId>> {
    let mut tries = 0;
    loop {
        match read_range_once(state, range.clone()).await {
            // Cut and replaced between the look at the index and the read of the file: the
            // index now says where the entries that replaced them are.
            Err(err) if err.kind() == io::ErrorKind::Interrupted && tries < RETRIES => tries += 1,
            read => return read.map_err(|e| StorageIOError::read_logs(&e).into()),
        }
    }
}

async fn read_range_once<RB: RangeBounds<u64>>(
    state: &Arc<Mutex<State>>,
    range: RB,
) -> io::Result<Vec<Entry>> {
    let (cached, wanted, file, base) = {
        let state = lock(state);
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        }
        .max(state.first);
        let stop = match range.end_bound() {
            Bound::Included(&i) => i.saturating_add(1),
            Bound::Excluded(&i) => i,
            Bound::Unbounded => u64::MAX,
        }
        .min(state.first + state.slots.len() as u64);
        let mut cached = Vec::new();
        let mut wanted = Vec::new();
        for index in start..stop {
            match state.cache.get(&index) {
                Some((entry, _)) => cached.push(entry.clone()),
                None => {
                    // `index` lies in [first, first + slots.len()).
                    if let Some(slot) = state.slot(index) {
                        wanted.push(*slot);
                    }
                }
            }
        }
        (cached, wanted, state.file.clone(), state.base)
    };
    if wanted.is_empty() {
        return Ok(cached);
    }
    // Uncached entries are older than every cached one: they come first. A frame that reads
    // back as another entry than its slot names was cut and written over after the look above
    // (a frame of the same length can pass its CRC): never hand it out as the one asked for.
    let looked_at = wanted.clone();
    let read = tokio::task::spawn_blocking(move || {
        wanted
            .iter()
            .map(|slot| {
                let entry = files::read_frame(&*file, slot.offset - base, slot.len)?;
                if entry.log_id != slot.log_id {
                    return Err(io::Error::new(
                        io::ErrorKind::Interrupted,
                        format!("log entry {} was replaced while it was read", slot.log_id),
                    ));
                }
                Ok(entry)
            })
            .collect::<io::Result<Vec<Entry>>>()
    })
    .await
    .map_err(io::Error::other)?;
    let read = match read {
        // A frame that does not check, where the index now names another entry or none: it was
        // being written over.
        Err(err) if err.kind() != io::ErrorKind::Interrupted && replaced(state, &looked_at) => {
            Err(io::Error::new(io::ErrorKind::Interrupted, err))
        }
        read => read,
    }?;
    let mut entries = read;
    entries.extend(cached);
    Ok(entries)
}

/// Whether any of `slots` is no longer where the index says its entry is.
fn replaced(state: &Arc<Mutex<State>>, slots: &[Slot]) -> bool {
    let state = lock(state);
    slots.iter().any(|slot| {
        state
            .slot(slot.log_id.index)
            .is_none_or(|now| now.log_id != slot.log_id || now.offset != slot.offset)
    })
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        read_range(&self.state, range).await
    }

    /// What one AppendEntries carries: the entries from `start`, up to [`MAX_PAYLOAD_BYTES`]
    /// of them (always at least one).
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        let end = payload_end(&lock(&self.state), start, end);
        read_range(&self.state, start..end).await
    }
}

/// Most bytes of entries one AppendEntries carries. openraft gives each one heartbeat
/// interval to be sent, decoded and fsynced by the follower, and sends it again from the
/// start if it takes longer: a follower far behind (a wiped one) must be sent its log in
/// pieces that fit, or it never catches up.
const MAX_PAYLOAD_BYTES: u64 = 1024 * 1024;

/// Where a payload from `start` ends: before `end`, after at most [`MAX_PAYLOAD_BYTES`] of
/// entries, and after at least one.
fn payload_end(state: &State, start: u64, end: u64) -> u64 {
    let mut bytes = 0;
    let mut index = start;
    while index < end {
        let Some(slot) = state.slot(index) else {
            break;
        };
        bytes += u64::from(slot.len);
        if bytes > MAX_PAYLOAD_BYTES && index > start {
            break;
        }
        index += 1;
    }
    index.max(start.saturating_add(1)).min(end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        read_range(&self.state, range).await
    }
}
