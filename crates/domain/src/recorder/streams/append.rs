//! Appending to a stream, closing it, or both at once: under the stream's lock, judged against
//! its content type, its idempotent producers and its `Stream-Seq`, held to the producers'
//! size limits, and told only once committed.
use bytes::Bytes;

use super::Streams;
use super::handle::{State, StreamAt};
use super::messages::{BodyRefused, chunks_of, same_type};
use super::verdict::{Verdict, judge};
use crate::error::Error;
use crate::id::ConversationId;
use crate::recorder::{SizeRefused, Status};
use crate::store::{ProducerStamp, ProducerState};

/// An append (or close), as asked.
#[derive(Debug, Clone, Default)]
pub struct AppendAsk {
    /// The body's content type; needed when there is a body.
    pub content_type: Option<String>,
    /// The messages to append.
    pub body: Bytes,
    /// Close the stream (after the body, if any).
    pub closing: bool,
    /// `Stream-Seq`: must follow the last one accepted.
    pub stream_seq: Option<String>,
    /// The idempotent producer's stamp, if any.
    pub producer: Option<ProducerStamp>,
}

/// An append that went through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Appended {
    /// Committed.
    Written {
        /// The tail after it.
        tail: u64,
        /// Whether the stream is closed now.
        closed: bool,
        /// Bytes appended.
        bytes: u64,
        /// The idempotent producer's new state, when one sent it.
        producer: Option<ProducerState>,
    },
    /// An idempotent producer's request appended already: nothing appended again.
    Duplicate {
        /// The stream's tail.
        tail: u64,
        /// The request's epoch.
        epoch: u64,
        /// The last sequence number accepted.
        seq: u64,
    },
    /// The stream is closed, and this request asks nothing more: a close again, or the
    /// retry of the request that closed it (`closer` is then its stamp).
    AlreadyClosed {
        /// The stream's tail.
        tail: u64,
        /// The stamp of the producer request that closed it, when this is its retry.
        closer: Option<ProducerStamp>,
    },
}

/// Why an append is refused.
#[derive(Debug)]
pub enum AppendRefused {
    /// A recording made over gRPC: read-only as a stream.
    ReadOnly,
    /// Deleted while forks read from it.
    Gone,
    /// No stream at that path.
    Missing,
    /// Neither a body nor a close.
    Empty,
    /// The stream is closed.
    Closed {
        /// Its tail.
        tail: u64,
        /// Whether a cancel (a stop) ended it, rather than a close.
        cancelled: bool,
    },
    /// A body without a content type.
    NoContentType,
    /// A body of another content type than the stream's.
    ContentTypeMismatch {
        /// The stream's.
        stream: String,
        /// The body's.
        got: String,
    },
    /// An idempotent producer's epoch older than its current one.
    StaleEpoch {
        /// The epoch sent.
        sent: u64,
        /// The producer's current epoch.
        current: u64,
    },
    /// A new epoch that does not start at sequence 0.
    EpochMustStartAtZero,
    /// A sequence number skipped.
    Gap {
        /// The one expected.
        expected: u64,
        /// The one sent.
        received: u64,
    },
    /// A `Stream-Seq` that does not follow the last one.
    StreamSeqBehind {
        /// The one sent.
        seq: String,
    },
    /// The body is not messages of the stream's content type.
    Body(BodyRefused),
    /// The body is over a size limit.
    Size(SizeRefused),
    /// The recorder failed (storage, a fenced session, shutdown).
    Failed(Error),
}

impl From<Error> for AppendRefused {
    fn from(err: Error) -> Self {
        AppendRefused::Failed(err)
    }
}

impl Streams {
    /// Appends to stream `id`, closes it, or both, as `ask` says.
    ///
    /// Refused as [`AppendRefused`] says; with `Failed(ShuttingDown)` once the server has begun
    /// to stop.
    pub async fn append(
        &self,
        id: &ConversationId,
        ask: AppendAsk,
    ) -> Result<Appended, AppendRefused> {
        self.refuse_if_stopping()?;
        // Most appends are to an open stream this run holds: they take its lock once, where
        // `find` and then the append would take it twice (a stream's writers queue on it).
        if let Some(handle) = self.open_here(id) {
            let mut state = handle.state.lock().await;
            state.refresh();
            let now_ms = self.now_ms();
            let current = !state.closed && !state.gone && !state.row.soft_deleted;
            if current && !state.expired(now_ms) {
                return self.append_locked(state, ask, now_ms).await;
            }
        }
        let handle = match self.find(id).await? {
            StreamAt::Stream(handle) => handle,
            StreamAt::Recording => return Err(AppendRefused::ReadOnly),
            StreamAt::SoftDeleted => return Err(AppendRefused::Gone),
            StreamAt::Missing => return Err(AppendRefused::Missing),
        };
        let mut state = handle.state.lock().await;
        state.refresh();
        if state.gone {
            return Err(AppendRefused::Missing);
        }
        self.append_locked(state, ask, self.now_ms()).await
    }

    /// The append `ask`, to the stream whose lock is `state` (refreshed, not gone), at
    /// `now_ms`.
    async fn append_locked(
        &self,
        mut state: tokio::sync::MutexGuard<'_, State>,
        ask: AppendAsk,
        now_ms: u64,
    ) -> Result<Appended, AppendRefused> {
        if ask.body.is_empty() && !ask.closing {
            return Err(AppendRefused::Empty);
        }
        state.touch(now_ms);
        if state.closed {
            return closed_outcome(&state, &ask);
        }
        if !ask.body.is_empty() {
            match &ask.content_type {
                None => return Err(AppendRefused::NoContentType),
                Some(t) if !same_type(t, &state.row.content_type) => {
                    return Err(AppendRefused::ContentTypeMismatch {
                        stream: state.row.content_type.clone(),
                        got: t.clone(),
                    });
                }
                Some(_) => {}
            }
        }
        let mut row = state.row.clone();
        let mut accepted = None;
        if let Some(stamp) = &ask.producer {
            match judge(row.producers.get(&stamp.id).copied(), stamp) {
                Verdict::Accept { next } => {
                    row.producers.insert(stamp.id.clone(), next);
                    accepted = Some(next);
                }
                Verdict::Duplicate => {
                    let current = row.producers[&stamp.id];
                    return Ok(Appended::Duplicate {
                        tail: state.tail(),
                        epoch: stamp.epoch,
                        seq: current.seq,
                    });
                }
                Verdict::StaleEpoch { current } => {
                    let sent = stamp.epoch;
                    return Err(AppendRefused::StaleEpoch { sent, current });
                }
                Verdict::EpochMustStartAtZero => return Err(AppendRefused::EpochMustStartAtZero),
                Verdict::Gap { expected, received } => {
                    return Err(AppendRefused::Gap { expected, received });
                }
            }
        }
        if let Some(seq) = &ask.stream_seq {
            if row.last_stream_seq.as_ref().is_some_and(|last| seq <= last) {
                let seq = seq.clone();
                return Err(AppendRefused::StreamSeqBehind { seq });
            }
            row.last_stream_seq = Some(seq.clone());
        }
        let chunks = chunks_of(&row.content_type, &ask.body, false).map_err(AppendRefused::Body)?;
        self.recorder
            .limits()
            .check_chunks(chunks.iter().map(Bytes::len), state.own)
            .map_err(AppendRefused::Size)?;
        if ask.closing {
            row.closed_by = ask.producer.clone();
        }
        let own: u64 = chunks.iter().map(|c| c.len() as u64).sum();
        let end = ask.closing.then_some(Status::Completed);
        // The store keeps the row's fork count and soft delete as they are stored.
        let row_changed = row != state.row;
        let Some(writer) = state.writer.as_mut() else {
            return closed_outcome(&state, &ask);
        };
        let batch = writer
            .write_batch(chunks, row_changed.then(|| row.clone()), end)
            .await?;
        state.row = row;
        state.own += own;
        if ask.closing {
            state.closed = true;
            state.writer = None;
        }
        let tail = state.tail();
        let closed = state.closed;
        // Committed in queue order: the lock can go before the wait.
        drop(state);
        batch.wait().await?;
        Ok(Appended::Written {
            tail,
            closed,
            bytes: own,
            producer: accepted,
        })
    }
}

/// An append or close to a closed stream: no change when it asks nothing more (a close, or
/// the retry of the producer request that closed it), else refused.
fn closed_outcome(state: &State, ask: &AppendAsk) -> Result<Appended, AppendRefused> {
    let same_closer = ask.producer.is_some() && ask.producer == state.row.closed_by;
    if (ask.body.is_empty() && ask.closing) || same_closer {
        return Ok(Appended::AlreadyClosed {
            tail: state.tail(),
            closer: ask.producer.clone().filter(|_| same_closer),
        });
    }
    Err(AppendRefused::Closed {
        tail: state.tail(),
        cancelled: state.cancelled,
    })
}
