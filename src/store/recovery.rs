//! Opening the database file: creating it, checking its schema version, and closing off the
//! recordings a crash left in progress so that no reader waits on them forever.
use std::path::Path;

use redb::{Database, ReadableTable};

use super::schema::{
    EXPIRY, META, RECORDINGS, SCHEMA_VERSION, SCHEMA_VERSION_KEY, Status, decode_meta, encode_meta,
};
use crate::error::{Error, Result};

/// Opens (or creates) the database at `path`, repairing it after a crash, and marks every
/// recording still `recording` as `interrupted` (its producer is gone), to expire after
/// `retention_ms`.
///
/// Fails when the file is not a redb database, has another schema version, or cannot be read.
pub(crate) fn open(path: &Path, now_ms: u64, retention_ms: u64) -> Result<Database> {
    let db = create(path)?;
    check_schema(&db, path)?;
    let interrupted = interrupt_live_recordings(&db, now_ms, retention_ms)?;
    if interrupted > 0 {
        tracing::warn!(
            interrupted,
            "recordings left in progress by the previous run are now interrupted"
        );
    }
    Ok(db)
}

fn create(path: &Path) -> Result<Database> {
    let repaired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = repaired.clone();
    let mut builder = Database::builder();
    builder.set_repair_callback(move |_| flag.store(true, std::sync::atomic::Ordering::Relaxed));
    // redb may panic on a file it cannot make sense of; that is a bad file, not a bug here.
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.create(path)));
    let db = match opened {
        Ok(Ok(db)) => db,
        Ok(Err(source)) => {
            return Err(Error::OpenDatabase {
                path: path.to_path_buf(),
                source,
            });
        }
        Err(_) => {
            return Err(Error::OpenDatabase {
                path: path.to_path_buf(),
                source: redb::DatabaseError::Storage(redb::StorageError::Corrupted(
                    "the file is damaged or not a redb database".into(),
                )),
            });
        }
    };
    if repaired.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(path = %path.display(), "database was not closed cleanly; repaired it");
    }
    Ok(db)
}

/// Writes the schema version into a new file; refuses a file written with another version.
fn check_schema(db: &Database, path: &Path) -> Result<()> {
    let txn = db.begin_write().map_err(Error::storage)?;
    {
        let mut meta = txn.open_table(META).map_err(Error::storage)?;
        let found = meta
            .get(SCHEMA_VERSION_KEY)
            .map_err(Error::storage)?
            .map(|v| v.value());
        match found {
            Some(SCHEMA_VERSION) => {}
            Some(found) => {
                return Err(Error::SchemaVersion {
                    path: path.to_path_buf(),
                    found,
                    expected: SCHEMA_VERSION,
                });
            }
            None => {
                meta.insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION)
                    .map_err(Error::storage)?;
            }
        }
        // Create every table up front so readers never meet a missing one.
        txn.open_table(super::schema::CHUNKS)
            .map_err(Error::storage)?;
        txn.open_table(RECORDINGS).map_err(Error::storage)?;
        txn.open_table(EXPIRY).map_err(Error::storage)?;
    }
    txn.commit().map_err(Error::storage)
}

/// Scans the `recordings` rows (never the chunks) and ends the live ones as `interrupted`.
fn interrupt_live_recordings(db: &Database, now_ms: u64, retention_ms: u64) -> Result<u64> {
    let txn = db.begin_write().map_err(Error::storage)?;
    let mut count = 0;
    {
        let mut recordings = txn.open_table(RECORDINGS).map_err(Error::storage)?;
        let mut expiry = txn.open_table(EXPIRY).map_err(Error::storage)?;
        let mut live = Vec::new();
        for entry in recordings.iter().map_err(Error::storage)? {
            let (key, value) = entry.map_err(Error::storage)?;
            let meta = decode_meta(value.value())?;
            if meta.status.is_live() {
                live.push((key.value(), meta));
            }
        }
        for (key, mut meta) in live {
            let expires = now_ms.saturating_add(retention_ms);
            meta.status = Status::Interrupted;
            meta.finished_ms = Some(now_ms);
            meta.updated_ms = now_ms;
            meta.expires_at_ms = Some(expires);
            meta.error = Some("the server stopped while it was being recorded".into());
            recordings
                .insert(key, encode_meta(&meta)?.as_slice())
                .map_err(Error::storage)?;
            expiry.insert((expires, key), ()).map_err(Error::storage)?;
            count += 1;
        }
    }
    txn.commit().map_err(Error::storage)?;
    Ok(count)
}
