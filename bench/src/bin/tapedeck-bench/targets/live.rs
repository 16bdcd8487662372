//! What the in-process targets (SQLite, fsync-log) share: a commit thread that takes queued
//! writes (one at a time, or everything waiting for group commit), commits them, then publishes
//! each recording's committed high-water mark to its followers and acks the producers. This is
//! how a careful application would build live tailing on top of these stores.
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use anyhow::{Result, anyhow};
use tokio::sync::{mpsc, oneshot, watch};

/// Most writes folded into one group commit.
const MAX_BATCH: usize = 4096;
/// Writes queued for the commit thread; a full queue makes producers wait.
pub(super) const QUEUE_DEPTH: usize = 16 * 1024;

/// What is committed of one recording.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Committed {
    /// Tokens committed, numbered from 0.
    pub tokens: u64,
    /// The completion marker is committed.
    pub ended: bool,
}

/// One recording known to the process, with target-specific data `T`.
pub(crate) struct Recording<T> {
    pub name: String,
    pub committed: watch::Sender<Committed>,
    pub data: T,
}

/// Recordings by name; created by whoever comes first, producer or subscriber.
pub(super) struct Registry<T> {
    recordings: Mutex<HashMap<String, Arc<Recording<T>>>>,
}

impl<T: Default> Registry<T> {
    pub(super) fn new() -> Self {
        Self {
            recordings: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn get(&self, name: &str) -> Arc<Recording<T>> {
        let mut recordings = self.recordings.lock().unwrap_or_else(|e| e.into_inner());
        recordings
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Recording {
                    name: name.to_string(),
                    committed: watch::Sender::new(Committed::default()),
                    data: T::default(),
                })
            })
            .clone()
    }
}

/// A write for the commit thread.
pub(crate) enum Write<T> {
    Token {
        recording: Arc<Recording<T>>,
        seq: u64,
        text: String,
        done: oneshot::Sender<Result<(), String>>,
    },
    End {
        recording: Arc<Recording<T>>,
        done: oneshot::Sender<Result<(), String>>,
    },
}

/// Serves writes until every sender is gone. `commit` makes a batch durable; `group` lets a
/// batch hold everything that is waiting, otherwise each write is its own commit.
pub(super) fn run_commits<T>(
    mut writes: mpsc::Receiver<Write<T>>,
    group: bool,
    mut commit: impl FnMut(&[Write<T>]) -> Result<()>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(write) = writes.blocking_recv() {
        batch.push(write);
        while group && batch.len() < MAX_BATCH {
            match writes.try_recv() {
                Ok(write) => batch.push(write),
                Err(_) => break,
            }
        }
        let outcome = commit(&batch).map_err(|e| format!("{e:#}"));
        for write in batch.drain(..) {
            match write {
                Write::Token {
                    recording,
                    seq,
                    done,
                    ..
                } => {
                    if outcome.is_ok() {
                        recording.committed.send_modify(|c| c.tokens = seq + 1);
                    }
                    let _ = done.send(outcome.clone());
                }
                Write::End { recording, done } => {
                    if outcome.is_ok() {
                        recording.committed.send_modify(|c| c.ended = true);
                    }
                    let _ = done.send(outcome.clone());
                }
            }
        }
    }
}

/// The producer of one recording on an in-process target: every token waits for its commit.
pub(crate) struct LiveProducer<T> {
    pub writes: mpsc::Sender<Write<T>>,
    pub recording: Arc<Recording<T>>,
    pub next_seq: u64,
}

impl<T: Send + Sync + 'static> super::Producer for LiveProducer<T> {
    async fn send(&mut self, token: String) -> Result<u64> {
        let (done, committed) = oneshot::channel();
        let write = Write::Token {
            recording: self.recording.clone(),
            seq: self.next_seq,
            text: token,
            done,
        };
        self.writes
            .send(write)
            .await
            .map_err(|_| anyhow!("commit thread stopped"))?;
        committed.await?.map_err(|e| anyhow!(e))?;
        self.next_seq += 1;
        Ok(1)
    }

    /// Queues every token before waiting for any commit, so group commit can batch them.
    async fn load(&mut self, tokens: Vec<String>) -> Result<u64> {
        let mut pending = Vec::with_capacity(tokens.len());
        for text in tokens {
            let (done, committed) = oneshot::channel();
            let write = Write::Token {
                recording: self.recording.clone(),
                seq: self.next_seq,
                text,
                done,
            };
            self.writes
                .send(write)
                .await
                .map_err(|_| anyhow!("commit thread stopped"))?;
            self.next_seq += 1;
            pending.push(committed);
        }
        let count = pending.len() as u64;
        for committed in pending {
            committed.await?.map_err(|e| anyhow!(e))?;
        }
        Ok(count)
    }

    async fn finish(self) -> Result<u64> {
        let (done, committed) = oneshot::channel();
        let write = Write::End {
            recording: self.recording,
            done,
        };
        self.writes
            .send(write)
            .await
            .map_err(|_| anyhow!("commit thread stopped"))?;
        committed.await?.map_err(|e| anyhow!(e))?;
        Ok(0)
    }
}

/// A follower's position: waits for committed tokens it has not read yet.
pub(super) struct Follower {
    committed: watch::Receiver<Committed>,
    next: u64,
}

impl Follower {
    pub(super) fn new<T>(recording: &Recording<T>) -> Self {
        Self {
            committed: recording.committed.subscribe(),
            next: 0,
        }
    }

    /// The next range of committed, unread tokens, or `None` once the recording ended and
    /// all of it was handed out.
    pub(super) async fn next_range(&mut self) -> Option<Range<u64>> {
        loop {
            let committed = *self.committed.borrow_and_update();
            if committed.tokens > self.next {
                let range = self.next..committed.tokens;
                self.next = committed.tokens;
                return Some(range);
            }
            if committed.ended {
                return None;
            }
            // The sender lives in the registry, which outlives every follower.
            if self.committed.changed().await.is_err() {
                return None;
            }
        }
    }
}
