//! On a node of a cluster, the journal's unfolded chunks as they stood at the file's last
//! durable commit. Entries are applied without a sync, and the unfolded chunks live in memory
//! only; after a crash redb is back at its last durable commit and the entries after it are
//! applied again. So whatever makes a commit durable keeps, in that commit, the unfolded chunks
//! as they stand: a checkpoint entry (it folded them all, so none), a stop, a snapshot built or
//! installed. Opening the file restores them.
//!
//! A snapshot cannot be rebuilt from the log it replaces, and a stop leaves redb's last commit
//! durable (redb makes a pending commit durable as it closes the file): without this table,
//! either would lose every chunk not yet folded into `chunks`.
//!
//! Invariant: the table and [`UNFOLDED_AT`] describe the state the durable commit that wrote
//! them left; a file whose applied state is past [`UNFOLDED_AT`] was made durable by something
//! that did not keep them, and is refused.
use std::collections::HashMap;

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::journal::Run;
use super::replicated::{APPLIED_KEY, CLUSTER};
use super::schema::{self, optional_table};
use crate::error::{Error, Result};

/// conversation → bincode [`Run`] of its unfolded chunks.
pub(crate) const UNFOLDED: TableDefinition<u128, &[u8]> = TableDefinition::new("unfolded");
/// The `cluster` key of the applied state the kept chunks go with.
const UNFOLDED_AT: &str = "unfolded_at";

/// Keeps `unfolded`, the chunks unfolded as `txn` leaves the state, in `txn`, replacing what
/// was kept. `txn` must already hold its applied state, and be committed durably.
pub(crate) fn keep(txn: &WriteTransaction, unfolded: &HashMap<u128, Run>) -> Result<()> {
    txn.delete_table(UNFOLDED).map_err(Error::storage)?;
    let mut table = txn.open_table(UNFOLDED).map_err(Error::storage)?;
    for (key, run) in unfolded.iter().filter(|(_, run)| !run.is_empty()) {
        let value = schema::encode(run, "a recording's unfolded chunks")?;
        table
            .insert(key, value.as_slice())
            .map_err(Error::storage)?;
    }
    let mut cluster = txn.open_table(CLUSTER).map_err(Error::storage)?;
    let applied = cluster
        .get(APPLIED_KEY)
        .map_err(Error::storage)?
        .map(|state| state.value().to_vec());
    match applied {
        Some(applied) => cluster.insert(UNFOLDED_AT, applied.as_slice()),
        None => cluster.remove(UNFOLDED_AT),
    }
    .map_err(Error::storage)?;
    Ok(())
}

/// The unfolded chunks the file kept.
///
/// Fails with `Corrupt` when the file's applied state went past them (see the module's
/// invariant), or a storage or decoding error.
pub(crate) fn kept(txn: &ReadTransaction) -> Result<HashMap<u128, Run>> {
    if let Some(cluster) = optional_table(txn, CLUSTER)? {
        let read = |key| -> Result<Option<Vec<u8>>> {
            let value = cluster.get(key).map_err(Error::storage)?;
            Ok(value.map(|value| value.value().to_vec()))
        };
        let (applied, at) = (read(APPLIED_KEY)?, read(UNFOLDED_AT)?);
        // A file of a build before this table kept nothing (and has no `unfolded_at`).
        if at.is_some() && at != applied {
            return Err(Error::Corrupt {
                detail: "the file was made durable past the unfolded chunks it kept (it was \
                         not closed by tapedeck); empty the node's data dir and start it again \
                         to rejoin the cluster"
                    .into(),
            });
        }
    }
    match optional_table(txn, UNFOLDED)? {
        Some(table) => runs(&table),
        None => Ok(HashMap::new()),
    }
}

/// The unfolded chunks kept, as `txn` sees them (a snapshot just installed in it).
///
/// Fails with a storage or decoding error.
pub(crate) fn kept_in(txn: &WriteTransaction) -> Result<HashMap<u128, Run>> {
    runs(&txn.open_table(UNFOLDED).map_err(Error::storage)?)
}

fn runs(table: &impl ReadableTable<u128, &'static [u8]>) -> Result<HashMap<u128, Run>> {
    let mut unfolded = HashMap::new();
    for row in table.iter().map_err(Error::storage)? {
        let (key, value) = row.map_err(Error::storage)?;
        let run: Run = schema::decode(value.value(), "a recording's unfolded chunks")?;
        unfolded.insert(key.value(), run);
    }
    Ok(unfolded)
}
