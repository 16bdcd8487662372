//! The Durable Streams domain: the rules of streams made over the HTTP face, spoken in domain
//! outcomes (created, appended, refused because …), never in HTTP statuses. A recording made
//! over gRPC has no stream row: it reads as a `text/plain` stream, and is read-only.
//!
//! # Layout
//! - `handle`: a stream's handle, its row and state; `find`: loading handles from the store.
//! - `create`, `append`, `delete`: the writes and their outcomes; `verdict`: idempotent
//!   producers; `messages`: what a message is (JSON mode).
//! - `expiry`: TTL and expiry; `fork`: forks; `lineage`: the reader that stitches a fork's
//!   lineage; `snapshot`: what a read knows when it starts.
//! - `takeover`: taking over open streams at start, letting them go at shutdown.
mod append;
mod create;
mod delete;
mod expiry;
mod find;
mod fork;
mod handle;
mod lineage;
mod messages;
mod snapshot;
mod takeover;
mod verdict;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use append::{AppendAsk, AppendRefused, Appended};
pub use create::{CreateAsk, CreateRefused, Created, DEFAULT_CONTENT_TYPE};
pub use fork::{ForkAsk, ForkRefused};
pub use handle::GRPC_CONTENT_TYPE;
pub use lineage::{LineageReader, Portion};
pub use messages::{BodyRefused, essence, is_json, same_type};
pub use snapshot::StreamSnapshot;
pub use verdict::MAX_PRODUCER_NUMBER;

use crate::error::Error;
use crate::recorder::Recorder;
use handle::Handle;

/// Why a read or a delete finds no stream.
#[derive(Debug)]
pub enum StreamRefused {
    /// No stream at that path.
    Missing,
    /// Deleted while forks read from it.
    Gone,
    /// The recorder failed (storage, shutdown).
    Failed(Error),
}

impl From<Error> for StreamRefused {
    fn from(err: Error) -> Self {
        StreamRefused::Failed(err)
    }
}

/// Every stream made over HTTP that this run has touched, by storage key.
pub struct Streams {
    recorder: Recorder,
    handles: Mutex<HashMap<u128, Arc<Handle>>>,
    /// Held while a handle is loaded from the store (see `find`).
    loading: tokio::sync::Mutex<()>,
}

impl Streams {
    /// The streams over `recorder`.
    pub fn new(recorder: Recorder) -> Self {
        Self {
            recorder,
            handles: Mutex::new(HashMap::new()),
            loading: tokio::sync::Mutex::new(()),
        }
    }

    /// Now, in ms since the epoch, by the store's clock.
    pub fn now_ms(&self) -> u64 {
        self.recorder.now_ms()
    }

    fn handles(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Arc<Handle>>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every handle, for the expiry sweep and shutdown.
    fn all(&self) -> Vec<Arc<Handle>> {
        self.handles().values().cloned().collect()
    }

    /// `key`'s handle, if this run has loaded it.
    fn get(&self, key: u128) -> Option<Arc<Handle>> {
        self.handles().get(&key).cloned()
    }

    /// Forgets `key`'s handle (after a delete or an expiry).
    fn forget(&self, key: u128) {
        self.handles().remove(&key);
    }

    /// Registers a handle made by a create.
    fn insert(&self, handle: Arc<Handle>) {
        self.handles().insert(handle.id.key(), handle);
    }

    /// Refuses a write once the server has begun to shut down, as gRPC refuses a new
    /// producer.
    fn refuse_if_stopping(&self) -> crate::error::Result<()> {
        if self.recorder.is_shutting_down() {
            return Err(Error::ShuttingDown);
        }
        Ok(())
    }
}
