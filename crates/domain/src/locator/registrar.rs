//! The registrar: mirrors the recordings this instance holds into locator entries. It
//! registers everything at start-up (and again whenever Redis comes back), then follows the
//! recorder's change set, refreshes live entries before they expire, and settles conflicts
//! with other instances: a claim that replaces another instance's live recording tells that
//! instance it was superseded; a claim refused by a newer recording ends the local one.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::entry::{self, Claim, Claimed};
use super::inbox::Message;
use super::{LIVE_TTL, Locator, REFRESH_INTERVAL, back_off, owner_token};
use crate::id::ConversationId;
use crate::recorder::{MAX_PAGE_SIZE, Recorder, Status, Tape};
use crate::store::RecordingMeta;

/// How long the registrar gathers changes before writing them.
const GATHER: Duration = Duration::from_millis(50);

/// Runs the registrar until `stop` is cancelled.
pub(super) async fn run(locator: Locator, recorder: Recorder, stop: CancellationToken) {
    let changes = recorder.deck().changes();
    // Before the first full registration, so that nothing changed during it is missed.
    changes.enable();
    let mut registrar = Registrar {
        locator: locator.clone(),
        recorder: recorder.clone(),
        owned: HashMap::new(),
        retry: HashSet::new(),
    };
    let mut refresh = tokio::time::interval(REFRESH_INTERVAL);
    refresh.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut resync = true;
    let mut failures = 0;
    loop {
        if resync {
            if registrar.register_all().await {
                resync = false;
                failures = 0;
            } else {
                failures += 1;
                if !back_off(failures, &stop).await {
                    return;
                }
                continue;
            }
        }
        tokio::select! {
            mut keys = changes.next() => {
                // Gathers the changes of a short while into one read and one round trip: under
                // many short recordings this keeps the registrar's cost per recording small.
                tokio::select! {
                    () = tokio::time::sleep(GATHER) => {}
                    () = stop.cancelled() => return,
                }
                keys.extend(changes.drain());
                registrar.register(keys).await;
            }
            _ = refresh.tick() => registrar.refresh().await,
            () = locator.inner.resync.notified() => resync = true,
            () = stop.cancelled() => return,
        }
    }
}

/// What the registrar wrote, and what it must write again.
struct Registrar {
    locator: Locator,
    recorder: Recorder,
    /// The claims this run wrote and that still hold, by conversation key: what live entries
    /// are refreshed with, and the owner token a removal compares.
    owned: HashMap<u128, Written>,
    /// Conversations whose entry could not be written; retried at each refresh.
    retry: HashSet<u128>,
}

/// A claim written, and when its entry expires unless written again.
struct Written {
    claim: Claim,
    expires: Instant,
}

/// What a conversation's entry should be.
enum WantedEntry {
    /// This claim.
    Claim(Claim),
    /// None: remove ours, if ours is there.
    Nothing,
}

impl Registrar {
    /// Registers every recording stored here, a page at a time. False if Redis failed.
    async fn register_all(&mut self) -> bool {
        if !self.locator.announce().await {
            return false;
        }
        let mut token: Option<String> = None;
        loop {
            let page = match self
                .recorder
                .list(token.as_deref(), MAX_PAGE_SIZE, None)
                .await
            {
                Ok(page) => page,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot list recordings to register them");
                    return false;
                }
            };
            let wanted: Vec<(u128, WantedEntry)> = page
                .recordings
                .iter()
                .filter_map(|info| {
                    let id = ConversationId::parse(&info.meta.original_id).ok()?;
                    Some((id.key(), self.wanted(Some(&info.meta))))
                })
                .collect();
            if !self.write(wanted).await {
                return false;
            }
            match page.next_page_token {
                Some(next) => token = Some(next),
                None => return true,
            }
        }
    }

    /// Brings the entries of conversations `keys` up to date with what is stored here.
    async fn register(&mut self, keys: Vec<u128>) {
        let metas = match self.recorder.metas(keys.clone()).await {
            Ok(metas) => metas,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read recordings to register them");
                self.retry.extend(keys);
                return;
            }
        };
        let wanted = keys
            .iter()
            .zip(&metas)
            .map(|(key, meta)| (*key, self.wanted(meta.as_ref())))
            .collect();
        if !self.write(wanted).await {
            self.retry.extend(keys);
        }
    }

    /// Writes the live entries again before they expire, retries what failed, and forgets
    /// entries that have expired by now.
    async fn refresh(&mut self) {
        self.locator.announce().await;
        let now = Instant::now();
        self.owned.retain(|_, written| written.expires > now);
        let live: Vec<(u128, WantedEntry)> = self
            .owned
            .iter()
            .filter(|(_, written)| written.claim.status == Status::Recording.as_str())
            .map(|(key, written)| {
                let mut claim = written.claim.clone();
                claim.ttl_ms = LIVE_TTL.as_millis() as u64;
                (*key, WantedEntry::Claim(claim))
            })
            .collect();
        let keys: Vec<u128> = live.iter().map(|(key, _)| *key).collect();
        if !self.write(live).await {
            self.retry.extend(keys);
        }
        if !self.retry.is_empty() {
            let retry: Vec<u128> = self.retry.drain().collect();
            self.register(retry).await;
        }
    }

    /// The entry a recording stored as `meta` (or not stored) should have.
    fn wanted(&self, meta: Option<&RecordingMeta>) -> WantedEntry {
        let Some(meta) = meta else {
            return WantedEntry::Nothing;
        };
        let ttl_ms = if meta.status == Status::Recording {
            LIVE_TTL.as_millis() as u64
        } else {
            let now_ms = self.recorder.now_ms();
            match meta.expires_at_ms {
                Some(expires) if expires > now_ms => expires - now_ms,
                Some(_) => return WantedEntry::Nothing,
                // Ended rows always carry their expiry; keep one retention's worth if not.
                None => Duration::from_secs(30 * 60).as_millis() as u64,
            }
        };
        let locator = &self.locator.inner;
        WantedEntry::Claim(Claim {
            instance: locator.instance.clone(),
            address: locator.address.clone(),
            http: locator.http_address.clone(),
            owner: owner_token(&locator.instance, meta.generation),
            started_ms: meta.created_ms,
            status: meta.status.as_str(),
            ttl_ms,
        })
    }

    /// Writes `wanted` in one round trip and settles what the answers say. False if Redis
    /// failed (nothing is settled then; the caller retries).
    async fn write(&mut self, wanted: Vec<(u128, WantedEntry)>) -> bool {
        // Removing an entry this run never wrote has nothing to compare against.
        let wanted: Vec<(u128, WantedEntry)> = wanted
            .into_iter()
            .filter(|(key, want)| {
                matches!(want, WantedEntry::Claim(_)) || self.owned.contains_key(key)
            })
            .collect();
        if wanted.is_empty() {
            return true;
        }
        let locator = &self.locator.inner;
        let mut pipe = redis::pipe();
        entry::add_load(&mut pipe, &locator.claim);
        entry::add_load(&mut pipe, &locator.release);
        for (key, want) in &wanted {
            match want {
                WantedEntry::Claim(claim) => {
                    entry::add_claim(&mut pipe, &locator.claim, *key, claim)
                }
                WantedEntry::Nothing => {
                    let owner = &self.owned[key].claim.owner;
                    entry::add_release(&mut pipe, &locator.release, *key, owner);
                }
            }
        }
        let Some(answers): Option<Vec<redis::Value>> = self.locator.query_pipe(&pipe).await else {
            return false;
        };
        for ((key, want), answer) in wanted.into_iter().zip(answers) {
            match want {
                WantedEntry::Nothing => {
                    self.owned.remove(&key);
                }
                WantedEntry::Claim(claim) => {
                    let items = match answer {
                        redis::Value::Array(items) => items,
                        _ => Vec::new(),
                    };
                    self.settle(key, claim, entry::claimed(&items)).await;
                }
            }
        }
        true
    }

    /// Acts on a claim's answer.
    async fn settle(&mut self, key: u128, claim: Claim, claimed: Claimed) {
        match claimed {
            Claimed::Written(replaced) => {
                if let Some(replaced) = replaced
                    && replaced.live
                    && replaced.instance != self.locator.inner.instance
                {
                    let notice = Message::Superseded {
                        key,
                        owner: replaced.owner,
                        by: self.locator.inner.address.clone(),
                    };
                    self.locator.publish(&replaced.instance, &notice).await;
                }
                let expires = Instant::now() + Duration::from_millis(claim.ttl_ms);
                self.owned.insert(key, Written { claim, expires });
            }
            Claimed::Refused { by } => {
                self.owned.remove(&key);
                if claim.status == Status::Recording.as_str()
                    && let Some(tape) = self.recorder.deck().live(key)
                {
                    self.superseded(&tape, &claim, &by).await;
                }
            }
        }
    }

    /// Ends the live recording `tape`, whose claim a newer recording on `by` refused.
    async fn superseded(&self, tape: &Arc<Tape>, claim: &Claim, by: &str) {
        if owner_token(&self.locator.inner.instance, tape.generation()) != claim.owner {
            return;
        }
        let message = format!(
            "superseded: a newer recording of this conversation started on the instance at {by}"
        );
        if let Err(err) = self.recorder.supersede(tape, message).await {
            tracing::warn!(error = %err, "could not end a recording superseded elsewhere");
        }
    }
}
