//! A node of a cluster's whole state as one stream of bytes: what a snapshot of the cluster's
//! log holds. Built on one node, installed on another (one that lost its disk, or is behind
//! the start of the leader's log).
//!
//! The stream holds the state's tables row by row, as redb encodes keys and values, so it
//! holds live data only: no free pages, and no chunks of an ended recording whose copy in the
//! object store stands for them (the tier dropped them from `chunks`). The unfolded chunks
//! travel in the `unfolded` table (see `kept_unfolded`); `meta`, about the file itself, does
//! not travel, nor does `live`, which the rows it indexes rebuild on install.
//!
//! Format: [`MAGIC`], then each table of [`each_table`] in its order: its tag (one byte), each
//! row as `1`, the key's length (u32, little-endian), the key, the value's length, the value;
//! then `0`. [`END`] closes the stream.
use std::collections::HashSet;
use std::io::{Read, Write};

use redb::{
    Key, ReadTransaction, ReadableTable, TableDefinition, TableHandle, Value, WriteTransaction,
};

use super::Store;
use super::kept_unfolded::{self, UNFOLDED};
use super::live_index::{self, LIVE};
use super::replicated::{APPLIED_KEY, CLUSTER, commit_durably};
use super::schema::{
    CHUNKS, EXPIRY, JOURNAL, META, RECORDINGS, STARTED, TOMBSTONE_EXPIRY, TOMBSTONES,
    optional_table,
};
use super::seal_marks::SEALED;
use super::stream_row::STREAMS;
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"tdsnap01";
const END: u8 = 0xff;
const ROW: u8 = 1;
const TABLE_END: u8 = 0;

/// What is done with each table a snapshot holds.
trait EachTable {
    fn table<K: Key + 'static, V: Value + 'static>(
        &mut self,
        tag: u8,
        table: TableDefinition<'static, K, V>,
    ) -> Result<()>;
}

/// Every table of a node's state, in the order a snapshot holds them. A table added to the
/// store and not here makes building a snapshot fail (see [`check_tables`]).
fn each_table(each: &mut impl EachTable) -> Result<()> {
    each.table(1, CHUNKS)?;
    each.table(2, JOURNAL)?;
    each.table(3, RECORDINGS)?;
    each.table(4, EXPIRY)?;
    each.table(5, STARTED)?;
    each.table(6, TOMBSTONES)?;
    each.table(7, TOMBSTONE_EXPIRY)?;
    each.table(8, SEALED)?;
    each.table(9, STREAMS)?;
    each.table(10, CLUSTER)?;
    each.table(11, UNFOLDED)
}

impl Store {
    /// Writes this node's state to `out` as a snapshot. The state is made durable first (with
    /// its unfolded chunks kept), so that the log up to it may be purged. Returns what the
    /// cluster kept of the last entry applied in it, if any was. Blocking.
    ///
    /// Fails with a storage error, or `Snapshot` when `out` fails.
    pub fn write_snapshot(&self, out: &mut impl Write) -> Result<Option<Vec<u8>>> {
        let db = &self.inner.db;
        let txn = db.begin_write()?;
        // The read begins under the index, right after the commit: it sees the state kept.
        let read = self.inner.journal.apply_with(|unfolded| {
            kept_unfolded::keep(&txn, unfolded)?;
            commit_durably(txn)?;
            db.read_transaction()
        })?;
        check_tables(&read)?;
        out.write_all(MAGIC).map_err(written)?;
        each_table(&mut Dump { txn: &read, out })?;
        out.write_all(&[END]).map_err(written)?;
        out.flush().map_err(written)?;
        let applied = match optional_table(&read, CLUSTER)? {
            Some(table) => table
                .get(APPLIED_KEY)
                .map_err(Error::storage)?
                .map(|state| state.value().to_vec()),
            None => None,
        };
        Ok(applied)
    }

    /// Replaces this node's state with the snapshot `input` holds (as
    /// [`write_snapshot`](Self::write_snapshot) wrote it), durably. Returns what the cluster
    /// kept of the last entry applied in it. Blocking.
    ///
    /// Fails with `Snapshot` when `input` fails or is not a snapshot, or a storage error;
    /// the state is then as it was.
    pub fn install_snapshot(&self, input: &mut impl Read) -> Result<Option<Vec<u8>>> {
        let mut magic = [0; MAGIC.len()];
        input.read_exact(&mut magic).map_err(read)?;
        if &magic != MAGIC {
            return Err(malformed("it does not begin as a tapedeck snapshot does"));
        }
        let txn = self.inner.db.begin_write()?;
        let installed = self.inner.journal.apply_with(|unfolded| {
            each_table(&mut Load { txn: &txn, input })?;
            if byte(input)? != END {
                return Err(malformed("it goes on past its last table"));
            }
            live_index::rebuild(&txn)?;
            *unfolded = kept_unfolded::kept_in(&txn)?;
            let applied = {
                let table = txn.open_table(CLUSTER).map_err(Error::storage)?;
                let state = table.get(APPLIED_KEY).map_err(Error::storage)?;
                state.map(|state| state.value().to_vec())
            };
            commit_durably(txn)?;
            Ok(applied)
        });
        if installed.is_ok() {
            self.inner.applied.send_modify(|count| *count += 1);
        }
        installed
    }
}

/// Fails when the file holds a table a snapshot would leave out.
fn check_tables(txn: &ReadTransaction) -> Result<()> {
    struct Names(HashSet<String>);
    impl EachTable for Names {
        fn table<K: Key + 'static, V: Value + 'static>(
            &mut self,
            _: u8,
            table: TableDefinition<'static, K, V>,
        ) -> Result<()> {
            self.0.insert(table.name().to_string());
            Ok(())
        }
    }
    let mut known = Names(HashSet::from([
        META.name().to_string(),
        LIVE.name().to_string(),
    ]));
    each_table(&mut known)?;
    for table in txn.list_tables().map_err(Error::storage)? {
        if !known.0.contains(table.name()) {
            return Err(Error::Corrupt {
                detail: format!("table {} would be left out of a snapshot", table.name()),
            });
        }
    }
    Ok(())
}

struct Dump<'a, W> {
    txn: &'a ReadTransaction,
    out: &'a mut W,
}

impl<W: Write> EachTable for Dump<'_, W> {
    fn table<K: Key + 'static, V: Value + 'static>(
        &mut self,
        tag: u8,
        table: TableDefinition<'static, K, V>,
    ) -> Result<()> {
        self.out.write_all(&[tag]).map_err(written)?;
        if let Some(table) = optional_table(self.txn, table)? {
            for row in table.iter().map_err(Error::storage)? {
                let (key, value) = row.map_err(Error::storage)?;
                self.out.write_all(&[ROW]).map_err(written)?;
                field(self.out, K::as_bytes(&key.value()).as_ref())?;
                field(self.out, V::as_bytes(&value.value()).as_ref())?;
            }
        }
        self.out.write_all(&[TABLE_END]).map_err(written)
    }
}

struct Load<'a, R> {
    txn: &'a WriteTransaction,
    input: &'a mut R,
}

impl<R: Read> EachTable for Load<'_, R> {
    fn table<K: Key + 'static, V: Value + 'static>(
        &mut self,
        tag: u8,
        definition: TableDefinition<'static, K, V>,
    ) -> Result<()> {
        if byte(self.input)? != tag {
            return Err(malformed(
                "its tables are not in the order this build writes them",
            ));
        }
        self.txn.delete_table(definition).map_err(Error::storage)?;
        let mut table = self.txn.open_table(definition).map_err(Error::storage)?;
        let (mut key, mut value) = (Vec::new(), Vec::new());
        loop {
            match byte(self.input)? {
                TABLE_END => return Ok(()),
                ROW => {
                    read_field(self.input, &mut key)?;
                    read_field(self.input, &mut value)?;
                    table
                        .insert(K::from_bytes(&key), V::from_bytes(&value))
                        .map_err(Error::storage)?;
                }
                _ => return Err(malformed("a row is cut short")),
            }
        }
    }
}

fn field(out: &mut impl Write, bytes: &[u8]) -> Result<()> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| written(std::io::Error::other("a field of 4 GiB or more")))?;
    out.write_all(&len.to_le_bytes()).map_err(written)?;
    out.write_all(bytes).map_err(written)
}

fn read_field(input: &mut impl Read, into: &mut Vec<u8>) -> Result<()> {
    let mut len = [0; 4];
    input.read_exact(&mut len).map_err(read)?;
    into.clear();
    into.resize(u32::from_le_bytes(len) as usize, 0);
    input.read_exact(into).map_err(read)
}

fn byte(input: &mut impl Read) -> Result<u8> {
    let mut byte = [0];
    input.read_exact(&mut byte).map_err(read)?;
    Ok(byte[0])
}

fn written(source: std::io::Error) -> Error {
    Error::Snapshot {
        action: "written",
        source,
    }
}

fn read(source: std::io::Error) -> Error {
    Error::Snapshot {
        action: "read",
        source,
    }
}

fn malformed(why: &str) -> Error {
    read(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("it is not a snapshot this build can install: {why}"),
    ))
}
