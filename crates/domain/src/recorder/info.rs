//! What is known about recordings, for the management API: one conversation's recording (with
//! what only the live registry knows: its readers, whether a producer is attached) or its
//! tombstone, and pages of recordings in start order, then (with an object store) pages of
//! what only the object store holds, in key order.
use std::sync::Arc;

use super::Recorder;
use super::deck::Deck;
use super::progress::Status;
use super::tape::Tape;
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::{Lookup, PageToken, RecordingMeta, SealMark, Tombstone};
use crate::tier::{Remote, Tier};

/// Page tokens of the object store's part of a listing start with this (a local token is
/// only hex digits).
const OBJECT_STORE_PAGES: &str = "os";

/// Largest page a listing returns.
pub const MAX_PAGE_SIZE: usize = 1000;
/// Page size when the caller names none.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Rows a listing looks at for one page, at most, so that a rare status filter cannot make
/// one call walk the whole table; the page then comes back short, with a token.
const MAX_SCANNED_PER_PAGE: usize = 10 * MAX_PAGE_SIZE;

/// A recording, as stored and as live.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordingInfo {
    /// Its row; for a live recording, its chunk count and length are what is committed now.
    pub meta: RecordingMeta,
    /// Replays following it live now.
    pub readers: u64,
    /// Whether a producer is attached to it.
    pub producer_attached: bool,
    /// Why it ended, for clients.
    pub end_message: Option<String>,
    /// Where its bytes are kept.
    pub location: Location,
}

/// Where a recording's bytes are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Location {
    /// On this instance's disk.
    #[default]
    Local,
    /// On this instance's disk, and sealed into the object store.
    LocalAndObjectStore,
    /// Only in the object store (its local chunks went, or it was never recorded here).
    ObjectStore,
}

impl Location {
    /// Where a stored recording is, by its seal mark.
    fn of(mark: Option<SealMark>, meta: &RecordingMeta) -> Location {
        match mark {
            Some(mark) if mark.generation == meta.generation => match mark.local {
                true => Location::LocalAndObjectStore,
                false => Location::ObjectStore,
            },
            _ => Location::Local,
        }
    }
}

/// What is known about a conversation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Found {
    /// Its latest recording.
    Recording(RecordingInfo),
    /// Its recording was collected or deleted.
    Gone(Tombstone),
    /// Nothing.
    Unknown,
}

/// One page of recordings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Listing {
    /// The recordings, in start order.
    pub recordings: Vec<RecordingInfo>,
    /// The token of the next page; `None` after the last.
    pub next_page_token: Option<String>,
}

impl Recorder {
    /// What is known about conversation `id`'s recording.
    ///
    /// Fails with a storage error.
    pub async fn get(&self, id: &ConversationId) -> Result<Found> {
        get(&self.deck, id).await
    }

    /// A page of stored recordings in start order (see [`crate::store::Store::list`]).
    ///
    /// Fails with `BadPageToken`, or a storage error.
    pub async fn list(
        &self,
        page_token: Option<&str>,
        page_size: usize,
        only: Option<Status>,
    ) -> Result<Listing> {
        list(&self.deck, page_token, page_size, only).await
    }
}

async fn get(deck: &Deck, id: &ConversationId) -> Result<Found> {
    Ok(match deck.store().lookup(id.key()).await? {
        Lookup::Stored(meta) => {
            let tape = deck.live(id.key());
            let location = match deck.tier() {
                Some(_) => Location::of(deck.store().seal_mark(id.key()).await?, &meta),
                None => Location::Local,
            };
            Found::Recording(RecordingInfo {
                location,
                ..overlay(meta, tape.as_ref())
            })
        }
        Lookup::Gone(tombstone) => Found::Gone(tombstone),
        Lookup::Unknown => match deck.remote(id.key()).await? {
            Some(Remote::Sealed(sealed)) => Found::Recording(RecordingInfo {
                location: Location::ObjectStore,
                ..overlay(sealed.header.meta.clone(), None)
            }),
            Some(Remote::Gone(tombstone)) => Found::Gone(tombstone),
            None => Found::Unknown,
        },
    })
}

impl Listing {
    /// The page without its way on to the object store's pages: it ends where this
    /// instance's own recordings end (another instance lists the object store itself).
    pub fn local_only(mut self) -> Listing {
        if self.next_page_token.as_deref() == Some(OBJECT_STORE_PAGES) {
            self.next_page_token = None;
        }
        self
    }

    /// Whether `token` pages through the recordings only the object store holds.
    pub fn is_object_store_token(token: &str) -> bool {
        token.starts_with(OBJECT_STORE_PAGES)
    }

    /// The token of the object store's first page.
    pub fn object_store_start() -> String {
        OBJECT_STORE_PAGES.to_string()
    }
}

/// The rows a page asked for with `page_size` holds at most: the default for 0, never more
/// than [`MAX_PAGE_SIZE`].
pub fn page_limit(page_size: usize) -> usize {
    match page_size {
        0 => DEFAULT_PAGE_SIZE,
        size => size.min(MAX_PAGE_SIZE),
    }
}

async fn list(
    deck: &Deck,
    page_token: Option<&str>,
    page_size: usize,
    only: Option<Status>,
) -> Result<Listing> {
    let limit = page_limit(page_size);
    if let Some(tier) = deck.tier()
        && let Some(after) = page_token.and_then(|token| token.strip_prefix(OBJECT_STORE_PAGES))
    {
        return list_sealed(deck, tier, after, limit, only).await;
    }
    let after = page_token.map(PageToken::decode).transpose()?;
    let page = deck
        .store()
        .list(after, limit, only, MAX_SCANNED_PER_PAGE)
        .await?;
    let marks = match deck.tier() {
        Some(_) => {
            let keys = page.rows.iter().map(|(key, _)| *key).collect();
            deck.store().seal_marks(keys).await?
        }
        None => vec![None; page.rows.len()],
    };
    let recordings = page
        .rows
        .into_iter()
        .zip(marks)
        .map(|((key, meta), mark)| RecordingInfo {
            location: Location::of(mark, &meta),
            ..overlay(meta, deck.live(key).as_ref())
        })
        .collect();
    // After the last local page, the object store's (what other instances sealed).
    let next_page_token = match page.next {
        Some(token) => Some(token.encode()),
        None if deck.tier().is_some() => Some(OBJECT_STORE_PAGES.to_string()),
        None => None,
    };
    Ok(Listing {
        recordings,
        next_page_token,
    })
}

/// A page of the recordings only the object store holds, in key order after the key `after`
/// names (32 hex digits; empty for the first page). Each row costs one ranged read of its
/// header, `limit` at most.
async fn list_sealed(
    deck: &Deck,
    tier: &Tier,
    after: &str,
    limit: usize,
    only: Option<Status>,
) -> Result<Listing> {
    let after = match after {
        "" => None,
        hex if hex.len() == 32 => {
            Some(u128::from_str_radix(hex, 16).map_err(|_| Error::BadPageToken)?)
        }
        _ => return Err(Error::BadPageToken),
    };
    let (versions, more) = tier.list_keys(after, limit).await?;
    let last = versions.last().map(|(key, _)| *key);
    let keys: Vec<u128> = versions.iter().map(|(key, _)| *key).collect();
    // What is stored here was listed already, from its local row.
    let local = deck.store().metas(keys).await?;
    let elsewhere = versions
        .into_iter()
        .zip(local)
        .filter(|(_, row)| row.is_none())
        .map(|(version, _)| version)
        .collect();
    let recordings = tier
        .open_many(elsewhere)
        .await?
        .into_iter()
        .map(|sealed| sealed.header.meta.clone())
        .filter(|meta| only.is_none_or(|status| meta.status == status))
        .map(|meta| RecordingInfo {
            location: Location::ObjectStore,
            ..overlay(meta, None)
        })
        .collect();
    Ok(Listing {
        recordings,
        next_page_token: last
            .filter(|_| more)
            .map(|key| format!("{OBJECT_STORE_PAGES}{key:032x}")),
    })
}

/// A stored row with what the live registry knows of it, if it is live.
fn overlay(mut meta: RecordingMeta, tape: Option<&Arc<Tape>>) -> RecordingInfo {
    let end_message = meta.error.clone();
    let Some(tape) = tape.filter(|t| t.generation() == meta.generation) else {
        return RecordingInfo {
            meta,
            readers: 0,
            producer_attached: false,
            end_message,
            location: Location::Local,
        };
    };
    let progress = tape.progress();
    if progress.status.is_live() {
        meta.chunk_count = progress.chunks;
        meta.byte_len = progress.bytes;
    }
    RecordingInfo {
        meta,
        readers: tape.readers(),
        producer_attached: tape.holder().attached,
        end_message,
        location: Location::Local,
    }
}
