//! The `streams` rows of streams made over HTTP, and the fork counts in them: the store's to
//! keep, changed in the same transaction as a fork's start and its source's delete.
use redb::ReadableTable;

use super::{Tables, missing_row};
use crate::error::{Error, Result};
use crate::stream_row::{ForkOf, StreamRow};

impl Tables<'_, '_> {
    /// The `streams` row of `key`, if it has one.
    pub(crate) fn stream_row(&self, key: u128) -> Result<Option<StreamRow>> {
        match self.streams.open()?.get(key).map_err(Error::storage)? {
            Some(bytes) => Ok(Some(StreamRow::decode(bytes.value())?)),
            None => Ok(None),
        }
    }

    /// Writes (or, with `None`, removes) the `streams` row of `key`. The fork count and the
    /// soft delete are the store's: a row written over a stored one keeps the stored values.
    pub(crate) fn put_stream_row(&mut self, key: u128, row: Option<&[u8]>) -> Result<()> {
        let Some(bytes) = row else {
            return self
                .streams
                .open_mut()?
                .remove(key)
                .map(drop)
                .map_err(Error::storage);
        };
        match self.stream_row(key)? {
            Some(stored) => {
                let mut row = StreamRow::decode(bytes)?;
                row.forks = stored.forks;
                row.soft_deleted = stored.soft_deleted;
                self.write_stream_row(key, &row)
            }
            None => self
                .streams
                .open_mut()?
                .insert(key, bytes)
                .map(drop)
                .map_err(Error::storage),
        }
    }

    /// Writes `row` as the `streams` row of `key`, as it is.
    pub(super) fn write_stream_row(&mut self, key: u128, row: &StreamRow) -> Result<()> {
        self.streams
            .open_mut()?
            .insert(key, row.encode()?.as_slice())
            .map(drop)
            .map_err(Error::storage)
    }

    /// One fork of `source` is gone: a source deleted while forked is deleted now that its
    /// last fork is, and lets go of its own source in turn (up the chain, in this commit).
    pub(super) fn release_fork(&mut self, source: u128) -> Result<()> {
        let mut next = Some(source);
        while let Some(source) = next.take() {
            let Some(mut row) = self.stream_row(source)? else {
                break;
            };
            row.forks = row.forks.saturating_sub(1);
            let released = row.forks == 0 && row.soft_deleted;
            if released {
                // Released here, so that collecting it later releases nothing twice.
                next = row.fork.take().map(|fork| fork.source);
            }
            // Written first: deleting it reads the count.
            self.write_stream_row(source, &row)?;
            if released {
                self.mark_deleted(source)?;
            }
        }
        Ok(())
    }

    /// Whether `fork` can be made now: its source has a `streams` row, not deleted, and is
    /// still the recording the fork was asked of.
    pub(crate) fn fork_source_stands(&mut self, fork: &ForkOf) -> Result<bool> {
        let generation = self.meta(fork.source)?.map(|meta| meta.generation);
        if generation != Some(fork.source_generation) {
            return Ok(false);
        }
        Ok(self
            .stream_row(fork.source)?
            .is_some_and(|row| !row.soft_deleted))
    }

    /// Counts one more fork of `source`, in the commit that creates the fork: a fork and its
    /// count are never apart, whatever a crash interrupts.
    pub(crate) fn count_fork(&mut self, source: u128) -> Result<()> {
        let mut row = self
            .stream_row(source)?
            .ok_or_else(|| missing_row(source))?;
        row.forks += 1;
        self.write_stream_row(source, &row)
    }

    /// Whether forks still read from `key`: then it stays, whatever its expiry says.
    pub(super) fn pinned(&self, key: u128) -> Result<bool> {
        Ok(self.stream_row(key)?.is_some_and(|row| row.forks > 0))
    }
}
