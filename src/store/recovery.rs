//! Opening the database file: creating it, checking its schema version, folding the journal
//! (its in-memory index did not survive), and closing off the recordings a crash left in
//! progress so that no reader waits on them forever.
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable};

use super::journal::{self, JournalView};
use super::schema::{
    CHUNKS, EXPIRY, JOURNAL, META, RECORDINGS, SCHEMA_VERSION, SCHEMA_VERSION_KEY,
    SCHEMA_VERSION_WITHOUT_JOURNAL, decode_meta, encode_meta,
};
use super::stored::StoredChunks;
use crate::error::{Error, Result};
use crate::recorder::Status;

/// Opens (or creates) the database at `path`, repairing it after a crash, folds the journal
/// into `chunks`, and marks every recording still `recording` as `interrupted` (its producer
/// is gone), to expire after `retention_ms`.
///
/// Fails when the file is not a redb database, has another schema version, or cannot be read.
pub(crate) fn open(path: &Path, now_ms: u64, retention_ms: u64) -> Result<Database> {
    // redb may panic on a file it cannot make sense of, when opening it or when first reading
    // its tables; that is a damaged file, reported as such, not a crash of tapedeck.
    let opened = quietly_catch_panic(|| {
        let db = create(path)?;
        check_schema(&db, path)?;
        fold_journal(&db)?;
        let interrupted = interrupt_live_recordings(&db, now_ms, retention_ms)?;
        Ok((db, interrupted))
    });
    let (db, interrupted) = match opened {
        Ok(result) => result.map_err(|err| damaged(path, err))?,
        Err(panic) => return Err(unreadable(path, panic)),
    };
    if interrupted > 0 {
        tracing::warn!(
            interrupted,
            "recordings left in progress by the previous run are now interrupted"
        );
    }
    Ok(db)
}

/// Opens the file again after an I/O error made redb refuse to go on; redb repairs it to its
/// last commit. Recordings still live stay live: their producers are still attached.
///
/// Fails as opening it at start-up does.
pub(crate) fn reopen(path: &Path) -> Result<Database> {
    quietly_catch_panic(|| create(path)).unwrap_or_else(|panic| Err(unreadable(path, panic)))
}

/// A storage error met while recovering a file that did open is a damaged file too; other
/// errors (a schema version, a full disk) say so themselves.
fn damaged(path: &Path, err: Error) -> Error {
    if err.is_storage() {
        Error::DamagedDatabase {
            path: path.to_path_buf(),
            source: Box::new(err),
        }
    } else {
        err
    }
}

/// redb panicked on the file: it cannot make sense of it.
fn unreadable(path: &Path, panic: String) -> Error {
    Error::UnreadableDatabase {
        path: path.to_path_buf(),
        panic,
    }
}

thread_local! {
    /// Set while this thread runs [`quietly_catch_panic`]; the panic message lands here.
    static QUIET_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f`, turning a panic into `Err(message)` without the default hook printing a message
/// and backtrace. Panics on other threads are reported as usual.
fn quietly_catch_panic<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let quiet = QUIET_PANIC.with(|slot| {
                let mut slot = slot.borrow_mut();
                match slot.as_mut() {
                    Some(message) => {
                        *message = panic_message(info.payload());
                        true
                    }
                    None => false,
                }
            });
            if !quiet {
                previous(info);
            }
        }));
    });
    QUIET_PANIC.with(|slot| *slot.borrow_mut() = Some(String::new()));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let message = QUIET_PANIC.with(|slot| slot.borrow_mut().take());
    result.map_err(|_| message.unwrap_or_default())
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "unknown panic".to_string()
    }
}

fn create(path: &Path) -> Result<Database> {
    let repaired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = repaired.clone();
    let mut builder = Database::builder();
    builder.set_repair_callback(move |_| flag.store(true, std::sync::atomic::Ordering::Relaxed));
    let db = builder
        .create(path)
        .map_err(|source| open_error(path, source))?;
    if repaired.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(path = %path.display(), "database was not closed cleanly; repaired it");
    }
    Ok(db)
}

/// Tells a directory the process may not write in, and a file another process holds, apart
/// from a damaged file.
fn open_error(path: &Path, source: redb::DatabaseError) -> Error {
    let dir = path.parent().unwrap_or(path).to_path_buf();
    match source {
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if matches!(
                io.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            Error::DataDir {
                path: dir,
                source: io,
            }
        }
        redb::DatabaseError::DatabaseAlreadyOpen => Error::DatabaseInUse {
            path: path.to_path_buf(),
        },
        source => Error::OpenDatabase {
            path: path.to_path_buf(),
            source,
        },
    }
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
            Some(SCHEMA_VERSION_WITHOUT_JOURNAL) => {
                // Only the journal table is new; it is created below.
                tracing::info!(path = %path.display(), "upgrading the database to schema {SCHEMA_VERSION}");
                meta.insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION)
                    .map_err(Error::storage)?;
            }
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
        txn.open_table(CHUNKS).map_err(Error::storage)?;
        txn.open_table(JOURNAL).map_err(Error::storage)?;
        txn.open_table(RECORDINGS).map_err(Error::storage)?;
        txn.open_table(EXPIRY).map_err(Error::storage)?;
    }
    txn.commit().map_err(Error::storage)
}

/// Moves every journal entry into `chunks`: the writer starts with an empty journal. The
/// journal is folded whenever it reaches a few thousand entries, so this stays quick.
fn fold_journal(db: &Database) -> Result<()> {
    let txn = db.begin_write().map_err(Error::storage)?;
    let folded = journal::fold_all(&txn)?;
    txn.commit().map_err(Error::storage)?;
    if folded > 0 {
        tracing::info!(
            chunks = folded,
            "folded the journal left by the previous run"
        );
    }
    Ok(())
}

/// Scans the `recordings` rows and ends the live ones as `interrupted`, with the chunk count
/// and length read off their last chunk (never a scan of their chunks).
fn interrupt_live_recordings(db: &Database, now_ms: u64, retention_ms: u64) -> Result<u64> {
    let mut live = Vec::new();
    {
        let txn = db.begin_read().map_err(Error::storage)?;
        let recordings = txn.open_table(RECORDINGS).map_err(Error::storage)?;
        for entry in recordings.iter().map_err(Error::storage)? {
            let (key, value) = entry.map_err(Error::storage)?;
            let mut meta = decode_meta(value.value())?;
            if meta.status.is_live() {
                let key = key.value();
                // The journal is empty now: every chunk is in `chunks`.
                (meta.chunk_count, meta.byte_len) =
                    StoredChunks::open(&txn, key, JournalView::default())?.progress()?;
                live.push((key, meta));
            }
        }
    }
    let txn = db.begin_write().map_err(Error::storage)?;
    let mut count = 0;
    {
        let mut recordings = txn.open_table(RECORDINGS).map_err(Error::storage)?;
        let mut expiry = txn.open_table(EXPIRY).map_err(Error::storage)?;
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
