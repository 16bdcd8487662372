//! Opening the database file: creating it, rolling it forward through its write-ahead log,
//! checking its schema
//! version (upgrading older files), folding the journal (its in-memory index did not survive),
//! and finding the recordings the last run left live, whose producers are gone: the recorder
//! adopts them as detached recordings, which their producers may resume.
use std::collections::HashMap;
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable};

use super::files::{Files, OpenMode, database_on};
use super::journal::{self, JournalView};
use super::live_index::LIVE;
use super::schema::{
    CHUNKS, EXPIRY, JOURNAL, META, RECORDINGS, SCHEMA_VERSION, SCHEMA_VERSION_KEY, STARTED,
    TOMBSTONE_EXPIRY, TOMBSTONES, decode_meta,
};
use super::stored_chunks::StoredChunks;
use super::upgrade;
use super::wal;
use crate::error::{Error, Result};
use crate::id::ConversationId;

/// A recording the last run left live.
#[derive(Debug, Clone)]
pub struct RecoveredLive {
    /// The conversation, as its producer named it.
    pub id: ConversationId,
    /// Which of the conversation's recordings it is.
    pub generation: u64,
    /// Chunks committed.
    pub chunks: u64,
    /// Bytes committed.
    pub bytes: u64,
    /// Whether its chunks carry their commit time.
    pub timed_chunks: bool,
    /// A stream made over HTTP (it has a `streams` row): open until closed, whatever the
    /// grace period.
    pub held_open: bool,
}

/// The database as recovery leaves it.
pub(crate) struct Opened {
    pub db: Database,
    /// LSN of the last commit its checkpoint holds: the write-ahead log goes on after it.
    pub last_lsn: u64,
    /// The recordings the last run left live.
    pub live: Vec<RecoveredLive>,
}

/// Opens (or creates) the database at `path` on `files`, repairing it after a crash and
/// rolling it forward through its write-ahead log, upgrades an older schema, folds the journal
/// into `chunks`, and finds the recordings still `recording`.
///
/// Fails when the file is not a redb database, has a newer schema version, or cannot be read,
/// or its log cannot be rolled forward.
pub(crate) fn open(files: &dyn Files, path: &Path, cache_bytes: usize) -> Result<Opened> {
    // redb may panic on a file it cannot make sense of, when opening it or when first reading
    // its tables; that is a damaged file, reported as such, not a crash of tapedeck.
    let opened = quietly_catch_panic(|| {
        let mut db = create(files, path, cache_bytes)?;
        let rolled = wal::roll_forward(&db, files, &wal::path_of(path))?;
        if rolled.commits > 0 {
            // Rolling forward filled redb's cache with pages the server may never read again:
            // closed (cleanly, at the checkpoint that ended it) and opened again, it starts
            // with an empty one, as after a clean stop.
            drop(db);
            db = create(files, path, cache_bytes)?;
        }
        check_schema(&db, path)?;
        fold_journal(&db)?;
        let txn = db.begin_read().map_err(Error::storage)?;
        // The journal is empty now: every chunk is in `chunks`.
        let live = live_recordings(&txn, &mut HashMap::new())?;
        drop(txn);
        Ok(Opened {
            db,
            last_lsn: rolled.last_lsn,
            live,
        })
    });
    let opened = match opened {
        Ok(result) => result.map_err(|err| damaged(path, err))?,
        Err(panic) => return Err(unreadable(path, panic)),
    };
    if !opened.live.is_empty() {
        tracing::warn!(
            recordings = opened.live.len(),
            "recordings left live by the previous run are detached: their producers may resume them"
        );
    }
    Ok(opened)
}

/// Opens the file again after an I/O error made redb refuse to go on; redb goes back to its
/// last checkpoint, which is rolled forward through the write-ahead log. Recordings still live
/// stay live: their producers are still attached. Returns the database and the LSN its
/// checkpoint now holds.
///
/// Fails as opening it at start-up does.
pub(crate) fn reopen(
    files: &dyn Files,
    path: &Path,
    cache_bytes: usize,
) -> Result<(Database, u64)> {
    quietly_catch_panic(|| {
        let db = create(files, path, cache_bytes)?;
        let rolled = wal::roll_forward(&db, files, &wal::path_of(path))?;
        Ok((db, rolled.last_lsn))
    })
    .unwrap_or_else(|panic| Err(unreadable(path, panic)))
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
pub(crate) fn quietly_catch_panic<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
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

fn create(files: &dyn Files, path: &Path, cache_bytes: usize) -> Result<Database> {
    let repaired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = repaired.clone();
    let mut builder = Database::builder();
    // redb's page cache and its buffer of pages committed without a sync share this budget;
    // reads beyond it come from the OS page cache. redb's default (1 GiB) would let the
    // process grow by as much as it reads or writes.
    builder.set_cache_size(cache_bytes);
    builder.set_repair_callback(move |_| flag.store(true, std::sync::atomic::Ordering::Relaxed));
    let db = database_on(files, &builder, path, OpenMode::Create)
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

/// Writes the schema version into a new file; upgrades a file of an older version; refuses
/// one of a newer version.
fn check_schema(db: &Database, path: &Path) -> Result<()> {
    let mut txn = db.begin_write().map_err(Error::storage)?;
    // Every durable commit records redb's allocator state, so that a crash after it needs no
    // repair of the whole file.
    txn.set_quick_repair(true);
    {
        let mut meta = txn.open_table(META).map_err(Error::storage)?;
        let found = meta
            .get(SCHEMA_VERSION_KEY)
            .map_err(Error::storage)?
            .map(|v| v.value());
        // Create every table up front so readers never meet a missing one.
        txn.open_table(CHUNKS).map_err(Error::storage)?;
        txn.open_table(JOURNAL).map_err(Error::storage)?;
        txn.open_table(RECORDINGS).map_err(Error::storage)?;
        txn.open_table(EXPIRY).map_err(Error::storage)?;
        txn.open_table(STARTED).map_err(Error::storage)?;
        txn.open_table(TOMBSTONES).map_err(Error::storage)?;
        txn.open_table(TOMBSTONE_EXPIRY).map_err(Error::storage)?;
        txn.open_table(LIVE).map_err(Error::storage)?;
        match found {
            Some(SCHEMA_VERSION) => {}
            Some(old) if (upgrade::OLDEST_UPGRADABLE..SCHEMA_VERSION).contains(&old) => {
                let rows = upgrade::upgrade(&txn, old)?;
                meta.insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION)
                    .map_err(Error::storage)?;
                tracing::info!(path = %path.display(), from = old, to = SCHEMA_VERSION, rows, "upgraded the database");
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
    }
    txn.commit().map_err(Error::storage)
}

/// Moves every journal entry into `chunks`: the writer starts with an empty journal. The
/// journal is folded whenever it reaches a few thousand entries, so this stays quick.
fn fold_journal(db: &Database) -> Result<()> {
    let mut txn = db.begin_write().map_err(Error::storage)?;
    txn.set_quick_repair(true);
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

/// Reads the live recordings named in `live`, with the chunk count and length read off their
/// last chunk (never a scan of their chunks): start-up reads as many rows as recordings are
/// live, whatever the number stored. They stay `recording` in the file.
/// `views` holds the newest unfolded chunk of each recording that has any, taken before `txn`
/// began.
pub(crate) fn live_recordings(
    txn: &redb::ReadTransaction,
    views: &mut HashMap<u128, JournalView>,
) -> Result<Vec<RecoveredLive>> {
    let mut live = Vec::new();
    let recordings = txn.open_table(RECORDINGS).map_err(Error::storage)?;
    let streams = super::schema::optional_table(txn, super::stream_row::STREAMS)?;
    for entry in txn
        .open_table(LIVE)
        .map_err(Error::storage)?
        .iter()
        .map_err(Error::storage)?
    {
        let key = entry.map_err(Error::storage)?.0.value();
        let meta = match recordings.get(key).map_err(Error::storage)? {
            Some(row) => decode_meta(row.value())?,
            None => return Err(unindexed(key, "has no row")),
        };
        if !meta.status.is_live() {
            return Err(unindexed(key, "is not live"));
        }
        let view = views.remove(&key).unwrap_or_default();
        let view = view.of_generation(meta.generation);
        let (chunks, bytes) = StoredChunks::open(txn, key, &meta, view)?.progress()?;
        let id = ConversationId::parse(&meta.original_id).map_err(|_| Error::Corrupt {
            detail: format!("recording {key:032x} has an id that does not parse"),
        })?;
        let held_open = match &streams {
            Some(streams) => streams.get(key).map_err(Error::storage)?.is_some(),
            None => false,
        };
        live.push(RecoveredLive {
            id,
            generation: meta.generation,
            chunks,
            bytes,
            timed_chunks: meta.timed_chunks,
            held_open,
        });
    }
    Ok(live)
}

/// The `live` table names a recording that its row does not show live: the two were written
/// in one transaction, so the file is damaged.
fn unindexed(key: u128, why: &str) -> Error {
    Error::Corrupt {
        detail: format!("recording {key:032x} is listed as live but {why}"),
    }
}
