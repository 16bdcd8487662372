//! A redb table whose changes are logged: reads go straight to the table (through `Deref`),
//! and the only ways to change it are the methods here, which record each change in the
//! transaction's [`Redo`] as they make it. The commit pipeline opens its tables this way, so a
//! change that is not logged does not compile.
use std::borrow::Borrow;
use std::cell::OnceCell;
use std::ops::{Bound, Deref, RangeBounds};

use redb::{AccessGuard, Key, TableDefinition, Value, WriteTransaction};

use super::redo::{Redo, TableId};
use crate::error::{Error, Result};

/// A table of one write transaction, logging its changes to `redo`.
pub(crate) struct Logged<'r, 'txn, K: Key + 'static, V: Value + 'static> {
    table: redb::Table<'txn, K, V>,
    id: TableId,
    redo: &'r Redo,
}

impl<'r, 'txn, K: Key + 'static, V: Value + 'static> Logged<'r, 'txn, K, V> {
    pub(crate) fn open(
        txn: &'txn WriteTransaction,
        definition: TableDefinition<'_, K, V>,
        id: TableId,
        redo: &'r Redo,
    ) -> Result<Self> {
        Ok(Self {
            table: txn.open_table(definition).map_err(Error::storage)?,
            id,
            redo,
        })
    }

    pub(crate) fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> redb::Result<Option<AccessGuard<'_, V>>> {
        let (key, value) = (key.borrow(), value.borrow());
        let key_bytes = K::as_bytes(key);
        let value_bytes = V::as_bytes(value);
        self.redo
            .insert(self.id, key_bytes.as_ref(), value_bytes.as_ref());
        self.table.insert(key, value)
    }

    pub(crate) fn remove<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> redb::Result<Option<AccessGuard<'_, V>>> {
        let key = key.borrow();
        self.redo.remove(self.id, K::as_bytes(key).as_ref());
        self.table.remove(key)
    }

    /// Removes every entry in `range`.
    pub(crate) fn remove_range<'a, KR>(&mut self, range: impl RangeBounds<KR> + 'a) -> Result<()>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        let start = encode_bound::<K, KR>(range.start_bound());
        let end = encode_bound::<K, KR>(range.end_bound());
        self.redo
            .remove_range(self.id, as_slices(&start), as_slices(&end));
        self.table
            .retain_in(range, |_, _| false)
            .map_err(Error::storage)
    }
}

impl Logged<'_, '_, (u128, u64), &'static [u8]> {
    /// Writes segment `(key, first)`, packed from the `count` chunks it held (if it was there)
    /// and after them the first of `key`'s unfolded chunks; logs only the count, as the
    /// chunks' bytes are in the log already (as their appends).
    pub(crate) fn insert_packed(
        &mut self,
        key: u128,
        first: u64,
        count: usize,
        segment: &[u8],
    ) -> Result<()> {
        self.redo.pack(key, first, count);
        self.table
            .insert((key, first), segment)
            .map(drop)
            .map_err(Error::storage)
    }
}

/// A [`Logged`] table opened on its first use in the transaction. A commit of a few appends
/// uses one or two of the nine tables the pipeline may change, and opening one costs a look-up
/// in redb's table of tables now and a write-back of its root at the commit (opening all nine
/// was 6.5% of a lone append's commit).
pub(crate) struct LazyLogged<'r, 'txn, K: Key + 'static, V: Value + 'static> {
    txn: &'txn WriteTransaction,
    definition: TableDefinition<'static, K, V>,
    id: TableId,
    redo: &'r Redo,
    table: OnceCell<Logged<'r, 'txn, K, V>>,
}

impl<'r, 'txn, K: Key + 'static, V: Value + 'static> LazyLogged<'r, 'txn, K, V> {
    pub(crate) fn new(
        txn: &'txn WriteTransaction,
        definition: TableDefinition<'static, K, V>,
        id: TableId,
        redo: &'r Redo,
    ) -> Self {
        Self {
            txn,
            definition,
            id,
            redo,
            table: OnceCell::new(),
        }
    }

    /// The table, opened now if this transaction has not used it yet.
    ///
    /// Fails as redb's `open_table` does.
    pub(crate) fn open(&self) -> Result<&Logged<'r, 'txn, K, V>> {
        if let Some(table) = self.table.get() {
            return Ok(table);
        }
        let table = Logged::open(self.txn, self.definition, self.id, self.redo)?;
        Ok(self.table.get_or_init(|| table))
    }

    /// The table to change, opened now if this transaction has not used it yet.
    ///
    /// Fails as redb's `open_table` does.
    pub(crate) fn open_mut(&mut self) -> Result<&mut Logged<'r, 'txn, K, V>> {
        self.open()?;
        // Cannot fail: `open` has just filled the cell, or returned the error.
        Ok(self
            .table
            .get_mut()
            .expect("the table was opened just above"))
    }
}

impl<'txn, K: Key + 'static, V: Value + 'static> Deref for Logged<'_, 'txn, K, V> {
    type Target = redb::Table<'txn, K, V>;

    fn deref(&self) -> &Self::Target {
        &self.table
    }
}

fn encode_bound<'a, K: Key + 'static, KR: Borrow<K::SelfType<'a>> + 'a>(
    bound: Bound<&KR>,
) -> Bound<Vec<u8>> {
    bound.map(|key| K::as_bytes(key.borrow()).as_ref().to_vec())
}

fn as_slices(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(key) => Bound::Included(key.as_slice()),
        Bound::Excluded(key) => Bound::Excluded(key.as_slice()),
    }
}
