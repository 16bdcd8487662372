//! List from any instance: with several instances on one Redis, a page holds what every
//! instance holds, each row with its owner's address. The instance asked lists its own
//! recordings and asks every other running instance (over its Redis inbox) for the same page;
//! the pages are merged in start order, and the next page goes on after the last row given,
//! on every instance alike (a page token is a position in that order, not an instance's).
//!
//! Cost: a page of N rows reads up to N rows on each instance, and waits for the slowest
//! (at most the forwarding timeout, 3 s; an instance that does not answer in time is named in
//! the response, and its rows are missing from the page).
use std::collections::{HashMap, HashSet};

use crate::error::Result;
use crate::id::ConversationId;
use crate::locator::Locator;
use crate::recorder::PageToken;
use crate::recorder::{Listing, Recorder, RecordingInfo, Status, page_limit};

/// A page of the recordings of every instance.
pub(crate) struct AllInstancesPage {
    /// The rows, each with its owner's address, in start order.
    pub rows: Vec<(RecordingInfo, String)>,
    pub next_page_token: Option<String>,
    /// The instances that did not answer in time, by address.
    pub unanswered: Vec<String>,
}

/// One page of the recordings every instance holds, after `page_token`.
///
/// Fails as the local listing does (`BadPageToken`, a storage error).
pub(crate) async fn list(
    locator: &Locator,
    recorder: &Recorder,
    page_token: Option<&str>,
    page_size: usize,
    only: Option<Status>,
) -> Result<AllInstancesPage> {
    let limit = page_limit(page_size);
    // Past the instances' own recordings: the object store's pages, listed here alone.
    if page_token.is_some_and(Listing::is_object_store_token) {
        let listing = recorder.list(page_token, limit, only).await?;
        let rows = not_held_elsewhere(locator, listing.recordings).await;
        return Ok(AllInstancesPage {
            rows: rows.into_iter().map(|info| (info, String::new())).collect(),
            next_page_token: listing.next_page_token,
            unanswered: Vec::new(),
        });
    }
    let here = recorder.list(page_token, limit, only).await?.local_only();
    let mut pages = vec![(here, locator.address().to_string())];
    let mut unanswered = Vec::new();
    // Redis not answering: this instance's own recordings only (the locator logs the outage).
    let others = locator.other_instances().await.unwrap_or_default();
    let asked = others.iter().map(|(instance, _)| {
        locator.forward_list(instance, page_token.map(str::to_string), limit, only)
    });
    for ((_, address), listing) in others.iter().zip(futures::future::join_all(asked).await) {
        match listing {
            Some(listing) => pages.push((listing, address.clone())),
            None => unanswered.push(address.clone()),
        }
    }
    let (rows, next) = merge(pages, limit);
    let next_page_token = match next {
        Some(token) => Some(token.encode()),
        None if recorder.has_object_store() => Some(Listing::object_store_start()),
        None => None,
    };
    Ok(AllInstancesPage {
        rows,
        next_page_token,
        unanswered,
    })
}

/// The object store's rows less those another running instance still keeps a row of: those
/// were listed on the earlier pages, from that instance. Without Redis, every row (one may
/// then be listed twice; none is missing).
async fn not_held_elsewhere(locator: &Locator, rows: Vec<RecordingInfo>) -> Vec<RecordingInfo> {
    let keys: Vec<u128> = rows
        .iter()
        .map(|info| ConversationId::parse(&info.meta.original_id).map_or(0, |id| id.key()))
        .collect();
    let (Some(others), Some(holders)) = (
        locator.other_instances().await,
        locator.instances_of(&keys).await,
    ) else {
        return rows;
    };
    let running: HashSet<String> = others.into_iter().map(|(instance, _)| instance).collect();
    rows.into_iter()
        .zip(holders)
        .filter(|(_, holder)| {
            holder
                .as_ref()
                .is_none_or(|holder| !running.contains(holder))
        })
        .map(|(info, _)| info)
        .collect()
}

/// Merges each instance's page (and owner address) into at most `limit` rows in start order,
/// and where the next page goes on after. A row past where some instance's page stopped is
/// left for the next page, so that no instance's rows are skipped; a conversation held by two
/// instances (one superseding the other) is listed once, as its later recording.
fn merge(
    pages: Vec<(Listing, String)>,
    limit: usize,
) -> (Vec<(RecordingInfo, String)>, Option<PageToken>) {
    let bound = pages
        .iter()
        .filter_map(|(listing, _)| listing.next_page_token.as_deref())
        .filter_map(|token| PageToken::decode(token).ok())
        .map(|token| token.position())
        .min();
    let mut latest: HashMap<u128, ((u64, u128), RecordingInfo, String)> = HashMap::new();
    for (listing, owner) in pages {
        for info in listing.recordings {
            let Ok(id) = ConversationId::parse(&info.meta.original_id) else {
                continue;
            };
            let position = (info.meta.created_ms, id.key());
            let later = latest
                .get(&id.key())
                .is_none_or(|(held, _, _)| position > *held);
            if later {
                latest.insert(id.key(), (position, info, owner.clone()));
            }
        }
    }
    let mut rows: Vec<_> = latest
        .into_values()
        .filter(|(position, _, _)| bound.is_none_or(|bound| *position <= bound))
        .collect();
    rows.sort_by_key(|(position, _, _)| *position);
    let next = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|(position, _, _)| *position)
    } else {
        bound
    };
    let rows = rows
        .into_iter()
        .map(|(_, info, owner)| (info, owner))
        .collect();
    (
        rows,
        next.map(|(created_ms, key)| PageToken::after(created_ms, key)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::Location;
    use crate::recorder::RecordingMeta;

    fn row(id: &str, created_ms: u64) -> RecordingInfo {
        RecordingInfo {
            meta: RecordingMeta::started(
                &ConversationId::parse(id.as_bytes()).unwrap(),
                0,
                created_ms,
            ),
            readers: 0,
            producer_attached: false,
            end_message: None,
            location: Location::Local,
        }
    }

    fn page(rows: &[(&str, u64)], next: Option<(&str, u64)>) -> Listing {
        Listing {
            recordings: rows.iter().map(|(id, at)| row(id, *at)).collect(),
            next_page_token: next.map(|(id, at)| {
                let key = ConversationId::parse(id.as_bytes()).unwrap().key();
                PageToken::after(at, key).encode()
            }),
        }
    }

    fn ids(rows: &[(RecordingInfo, String)]) -> Vec<(String, String)> {
        rows.iter()
            .map(|(info, owner)| {
                (
                    String::from_utf8(info.meta.original_id.clone()).unwrap(),
                    owner.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn pages_merge_in_start_order_and_go_on_where_the_first_instance_stopped() {
        let a = page(&[("a1", 10), ("a2", 30)], Some(("a2", 30)));
        let b = page(&[("b1", 20), ("b2", 40)], None);
        let (rows, next) = merge(vec![(a, "A".into()), (b, "B".into())], 10);
        // b2 (40) is past where A's page stopped (30): A may hold more before it.
        assert_eq!(
            ids(&rows),
            [("a1", "A"), ("b1", "B"), ("a2", "A")].map(|(i, o)| (i.to_string(), o.to_string()))
        );
        let key = ConversationId::parse(b"a2").unwrap().key();
        assert_eq!(next.unwrap().position(), (30, key));
    }

    #[test]
    fn a_full_page_goes_on_after_its_last_row_and_the_last_page_has_no_next() {
        let a = page(&[("a1", 10), ("a2", 30)], None);
        let b = page(&[("b1", 20)], None);
        let (rows, next) = merge(vec![(a.clone(), "A".into()), (b.clone(), "B".into())], 2);
        assert_eq!(rows.len(), 2);
        let key = ConversationId::parse(b"b1").unwrap().key();
        assert_eq!(next.unwrap().position(), (20, key));
        let (rows, next) = merge(vec![(a, "A".into()), (b, "B".into())], 3);
        assert_eq!(rows.len(), 3);
        assert!(next.is_none());
    }

    #[test]
    fn a_conversation_on_two_instances_is_listed_once_as_its_later_recording() {
        let a = page(&[("same", 10)], None);
        let b = page(&[("same", 50)], None);
        let (rows, _) = merge(vec![(a, "A".into()), (b, "B".into())], 10);
        assert_eq!(ids(&rows), [("same".to_string(), "B".to_string())]);
    }
}
