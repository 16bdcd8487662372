//! Creating a stream (a fork included): a new recording with its `streams` row, its first
//! messages and, if asked, its close, each committed before the outcome is told. A create of a
//! stream that exists as asked is no change.
use std::sync::Arc;

use bytes::Bytes;

use super::Streams;
use super::expiry::check_lifetime;
use super::fork::{ForkAsk, ForkRefused};
use super::handle::{Handle, State, StreamAt};
use super::messages::{BodyRefused, chunks_of, same_type};
use crate::error::Error;
use crate::id::ConversationId;
use crate::recorder::{SizeRefused, Status};
use crate::store::StreamRow;

/// The content type a stream gets when its create names none.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// A create, as asked.
#[derive(Debug, Clone, Default)]
pub struct CreateAsk {
    /// Its content type ([`DEFAULT_CONTENT_TYPE`] when `None`; a fork's is its source's).
    pub content_type: Option<String>,
    /// Its sliding TTL, in seconds.
    pub ttl_secs: Option<u64>,
    /// Its expiry time, in ms since the epoch.
    pub expires_at_ms: Option<u64>,
    /// Closed at once.
    pub closed: bool,
    /// Its first messages.
    pub body: Bytes,
    /// The stream it forks from.
    pub fork: Option<ForkAsk>,
}

/// A create that went through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// A new stream.
    New {
        /// Its content type.
        content_type: String,
        /// Its tail offset.
        tail: u64,
        /// Whether it is closed.
        closed: bool,
    },
    /// It existed already, as asked: nothing changed.
    Exists {
        /// Its content type.
        content_type: String,
        /// Its tail offset.
        tail: u64,
        /// Whether it is closed.
        closed: bool,
    },
}

/// Why a create is refused.
#[derive(Debug)]
pub enum CreateRefused {
    /// Both a TTL and an expiry time.
    BothLifetimes,
    /// A TTL over `--max-retention`.
    TtlTooLong {
        /// The limit, in seconds.
        max_secs: u64,
    },
    /// An expiry time further than `--max-retention` from now.
    ExpiresTooLate {
        /// The limit, in seconds.
        max_secs: u64,
    },
    /// Something else is at the path: a recording made over gRPC, or a deleted stream.
    PathTaken,
    /// The stream exists with another configuration.
    Differs {
        /// Whether it is closed.
        closed: bool,
    },
    /// The fork cannot be made.
    Fork(ForkRefused),
    /// The body is not messages of its content type.
    Body(BodyRefused),
    /// The body is over a size limit.
    Size(SizeRefused),
    /// The recorder failed (storage, the live limit, shutdown).
    Failed(Error),
}

impl From<Error> for CreateRefused {
    fn from(err: Error) -> Self {
        CreateRefused::Failed(err)
    }
}

impl Streams {
    /// Creates stream `id` as `ask` says, or finds it exists as asked.
    ///
    /// Refused as [`CreateRefused`] says; with `Failed(ShuttingDown)` once the server has begun
    /// to stop.
    pub async fn create(
        &self,
        id: &ConversationId,
        ask: CreateAsk,
    ) -> Result<Created, CreateRefused> {
        self.refuse_if_stopping()?;
        let limits = self.recorder.limits();
        check_lifetime(&limits, ask.ttl_secs, ask.expires_at_ms, self.now_ms())?;
        match self.find(id).await? {
            StreamAt::Stream(handle) => return self.recreate(&handle, &ask).await,
            StreamAt::Missing => {}
            StreamAt::Recording | StreamAt::SoftDeleted => return Err(CreateRefused::PathTaken),
        }
        let mut row = StreamRow {
            content_type: ask
                .content_type
                .clone()
                .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.to_string()),
            ttl_secs: ask.ttl_secs,
            expires_at_ms: ask.expires_at_ms,
            ..StreamRow::default()
        };
        // A fork holds its source's lock until its create is committed: the source's row
        // (and its fork count, which the store adds in that commit) cannot change meanwhile.
        // Lock order, to stay free of deadlocks: a stream's lock is taken before its
        // ancestors' (here the source's, then whatever reading the source locks), never after.
        let source = match &ask.fork {
            Some(fork) => Some(self.fork_source(fork).await.map_err(CreateRefused::Fork)?),
            None => None,
        };
        let mut source_state = match &source {
            Some(handle) => Some(handle.state.lock().await),
            None => None,
        };
        if let (Some(fork), Some(state)) = (&ask.fork, source_state.as_deref_mut()) {
            self.fork_from(fork, ask.content_type.as_deref(), state, &mut row)
                .await
                .map_err(CreateRefused::Fork)?;
        }
        let chunks = chunks_of(&row.content_type, &ask.body, true).map_err(CreateRefused::Body)?;
        limits
            .check_chunks(chunks.iter().map(Bytes::len), 0)
            .map_err(CreateRefused::Size)?;
        let retention_ms = ask.ttl_secs.map(|ttl| ttl.saturating_mul(1000));
        let deck = self.recorder.deck();
        let writer = deck.start_with_row(id, retention_ms, Some(&row)).await;
        let mut writer = match (writer, &ask.fork) {
            (Ok(writer), _) => writer,
            // The source went in the meantime (a gRPC recording replaced it, say).
            (Err(Error::RecordingNotFound { .. }), Some(fork)) => {
                let source = fork.source.clone();
                return Err(CreateRefused::Fork(ForkRefused::SourceMissing { source }));
            }
            (Err(err), _) => return Err(err.into()),
        };
        // The store counted the fork in the source's row, in that commit.
        drop(source_state);
        writer.tape().hold_open();
        let own: u64 = chunks.iter().map(|c| c.len() as u64).sum();
        if !chunks.is_empty() || ask.closed {
            let end = ask.closed.then_some(Status::Completed);
            let batch = writer.write_batch(chunks, None, end).await?;
            batch.wait().await?;
        }
        let base = row.fork.as_ref().map_or(0, |f| f.offset);
        let content_type = row.content_type.clone();
        let generation = writer.tape().generation();
        let state = State {
            row,
            generation,
            writer: (!ask.closed).then_some(writer),
            own,
            closed: ask.closed,
            cancelled: false,
            gone: false,
            touched_ms: self.now_ms(),
        };
        self.insert(Arc::new(Handle {
            id: id.clone(),
            state: tokio::sync::Mutex::new(state),
        }));
        tracing::info!(stream = %id, content_type = %content_type, "stream created");
        Ok(Created::New {
            content_type,
            tail: base + own,
            closed: ask.closed,
        })
    }

    /// A create of a stream that exists: no change when it is as asked, else refused.
    async fn recreate(&self, handle: &Handle, ask: &CreateAsk) -> Result<Created, CreateRefused> {
        let mut state = handle.state.lock().await;
        state.refresh();
        let row = &state.row;
        let fork_matches = match (&ask.fork, &row.fork) {
            (None, None) => true,
            (Some(asked), Some(fork)) => {
                asked.source.key() == fork.source
                    && asked.offset.is_none_or(|o| o == fork.anchor)
                    && asked.sub_offset == fork.sub_offset
            }
            _ => false,
        };
        let matches = ask
            .content_type
            .as_deref()
            .is_none_or(|t| same_type(t, &row.content_type))
            && ask.ttl_secs == row.ttl_secs
            && ask.expires_at_ms == row.expires_at_ms
            && ask.closed == state.closed
            && fork_matches;
        if !matches {
            return Err(CreateRefused::Differs {
                closed: state.closed,
            });
        }
        Ok(Created::Exists {
            content_type: state.row.content_type.clone(),
            tail: state.tail(),
            closed: state.closed,
        })
    }
}
