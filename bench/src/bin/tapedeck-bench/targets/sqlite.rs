//! SQLite (bundled) in WAL mode with `synchronous=FULL`, so an acked token is durable like
//! tapedeck's. One commit thread owns the write connection, either one transaction per token or
//! one per group of waiting tokens; followers are woken after each commit and read the new rows
//! through their own connections.
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use rusqlite::{Connection, params};
use tokio::sync::mpsc;

use super::live::{self, Follower, LiveProducer, Registry, Write};
use super::{Environment, Target, temp_dir};

/// How the commit thread groups tokens into transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commit {
    /// One transaction (one WAL fsync) per token.
    PerToken,
    /// One transaction for everything waiting when the previous one finished.
    Group,
}

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS tokens (
        rec TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (rec, seq)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS ended (rec TEXT PRIMARY KEY) WITHOUT ROWID;";

/// An SQLite database in a temp dir, its commit thread and a pool of read connections.
pub(crate) struct Sqlite {
    writes: mpsc::Sender<Write<()>>,
    registry: Arc<Registry<()>>,
    readers: Mutex<Vec<Connection>>,
    path: PathBuf,
    commit_thread: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

fn open(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    Ok(conn)
}

impl Sqlite {
    /// Creates the database and starts its commit thread.
    pub(crate) fn start(env: &Environment, commit: Commit) -> Result<Sqlite> {
        let dir = temp_dir(&env.work_dir, "sqlite-")?;
        let path = dir.path().join("bench.db");
        let mut conn = open(&path)?;
        conn.execute_batch(SCHEMA)?;
        let (writes, receiver) = mpsc::channel(live::QUEUE_DEPTH);
        let commit_thread = std::thread::Builder::new()
            .name("sqlite-commit".into())
            .spawn(move || {
                live::run_commits(receiver, commit == Commit::Group, |batch| {
                    apply(&mut conn, batch)
                })
            })?;
        Ok(Sqlite {
            writes,
            registry: Arc::new(Registry::new()),
            readers: Mutex::new(Vec::new()),
            path,
            commit_thread: Some(commit_thread),
            _dir: dir,
        })
    }

    /// Runs `read` on a pooled read connection. Reads are short and run in place: WAL readers
    /// never wait for the writer.
    fn read<R>(&self, read: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        let pooled = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => open(&self.path)?,
        };
        let result = read(&conn);
        self.readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
        result
    }

    fn read_range(&self, name: &str, range: Range<u64>) -> Result<Vec<u8>> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT body FROM tokens WHERE rec = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq",
            )?;
            let mut rows = statement.query(params![name, range.start as i64, range.end as i64])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.extend_from_slice(row.get_ref(0)?.as_str()?.as_bytes());
            }
            Ok(out)
        })
    }
}

/// One transaction for the whole batch.
fn apply(conn: &mut Connection, batch: &[Write<()>]) -> Result<()> {
    let txn = conn.transaction()?;
    {
        let mut insert =
            txn.prepare_cached("INSERT INTO tokens (rec, seq, body) VALUES (?1, ?2, ?3)")?;
        let mut end = txn.prepare_cached("INSERT OR REPLACE INTO ended (rec) VALUES (?1)")?;
        for write in batch {
            match write {
                Write::Token {
                    recording,
                    seq,
                    text,
                    ..
                } => {
                    insert.execute(params![recording.name, *seq as i64, text])?;
                }
                Write::End { recording, .. } => {
                    end.execute(params![recording.name])?;
                }
            }
        }
    }
    txn.commit()?;
    Ok(())
}

impl Drop for Sqlite {
    fn drop(&mut self) {
        // Closing the queue stops the commit thread once it has drained.
        let (closed, _) = mpsc::channel(1);
        drop(std::mem::replace(&mut self.writes, closed));
        if let Some(thread) = self.commit_thread.take() {
            let _ = thread.join();
        }
    }
}

impl Target for Arc<Sqlite> {
    type Producer = LiveProducer<()>;
    type Subscriber = SqliteSubscriber;

    async fn record(&self, _lane: usize, name: &str) -> Result<LiveProducer<()>> {
        Ok(LiveProducer {
            writes: self.writes.clone(),
            recording: self.registry.get(name),
            next_seq: 0,
        })
    }

    async fn subscribe(&self, _lane: usize, name: &str) -> Result<SqliteSubscriber> {
        let recording = self.registry.get(name);
        Ok(SqliteSubscriber {
            db: self.clone(),
            follower: Follower::new(&recording),
            name: name.to_string(),
        })
    }

    async fn replay(&self, _lane: usize, name: &str) -> Result<u64> {
        let body = self.read(|conn| {
            let mut statement =
                conn.prepare_cached("SELECT body FROM tokens WHERE rec = ?1 ORDER BY seq")?;
            let mut rows = statement.query(params![name])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.extend_from_slice(row.get_ref(0)?.as_str()?.as_bytes());
            }
            Ok(out)
        })?;
        Ok(body.len() as u64)
    }

    fn data_pid(&self) -> Option<u32> {
        None
    }
}

/// A follower reading newly committed rows.
pub(crate) struct SqliteSubscriber {
    db: Arc<Sqlite>,
    follower: Follower,
    name: String,
}

impl super::Subscriber for SqliteSubscriber {
    async fn next(&mut self) -> Result<Option<Vec<u8>>> {
        match self.follower.next_range().await {
            Some(range) => self.db.read_range(&self.name, range).map(Some),
            None => Ok(None),
        }
    }
}
