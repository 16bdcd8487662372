//! What the faces ask Redis: the owner of a conversation, which conversations are live on
//! any instance, which instance each entry names, and the other instances running; and this
//! instance's announcement of its own address.
use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::{LIVE_TTL, Locator, Owner, Recorder, Route, entry, inbox};

impl Locator {
    /// Where calls about conversation `key` go: here when its recording is live here;
    /// otherwise to the instance that registered it, if that is another one, unless it has
    /// ended and the object store holds it (its owner may be gone: any instance serves it).
    pub async fn route(&self, recorder: &Recorder, key: u128) -> Route {
        if recorder.deck().live(key).is_some() {
            return Route::Here;
        }
        match self.owner(key).await {
            Some(owner) if owner.instance != self.inner.instance => {
                if !owner.live && recorder.in_object_store(key).await {
                    Route::Here
                } else {
                    Route::There(owner)
                }
            }
            _ => Route::Here,
        }
    }

    /// The owner Redis names for conversation `key`; `None` when there is no entry or Redis
    /// did not answer in time.
    async fn owner(&self, key: u128) -> Option<Owner> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(entry::entry_key(key)).arg(&entry::OWNER_FIELDS[..]);
        let fields: Vec<Option<String>> = self.query(&cmd).await?;
        entry::owner(fields)
    }

    /// Which of `keys` are live on any instance, in one round trip; `None` when Redis did not
    /// answer in time (the caller answers from local state; that is logged once an outage).
    pub async fn live_among(&self, keys: &[u128]) -> Option<HashSet<u128>> {
        if keys.is_empty() {
            return Some(HashSet::new());
        }
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("HGET").arg(entry::entry_key(*key)).arg("status");
        }
        let Some(statuses): Option<Vec<Option<String>>> = self.query_pipe(&pipe).await else {
            if !self.inner.local_check_logged.swap(true, Ordering::SeqCst) {
                tracing::warn!(
                    "live checks answer from this instance's recordings only until Redis \
                     answers again"
                );
            }
            return None;
        };
        Some(
            keys.iter()
                .zip(statuses)
                .filter(|(_, status)| status.as_deref() == Some("recording"))
                .map(|(key, _)| *key)
                .collect(),
        )
    }

    /// Which instance each of `keys`' entries names (`None` where there is no entry), in one
    /// round trip; `None` when Redis did not answer in time.
    pub async fn instances_of(&self, keys: &[u128]) -> Option<Vec<Option<String>>> {
        if keys.is_empty() {
            return Some(Vec::new());
        }
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("HGET").arg(entry::entry_key(*key)).arg("instance");
        }
        self.query_pipe(&pipe).await
    }

    /// Announces this instance's address for [`LIVE_TTL`]: the registrar does so at each
    /// refresh, so the announcement lapses soon after the instance is gone. Whether Redis
    /// answered.
    pub(super) async fn announce(&self) -> bool {
        let mut cmd = redis::cmd("SET");
        cmd.arg(entry::instance_key(&self.inner.instance))
            .arg(&self.inner.address)
            .arg("PX")
            .arg(LIVE_TTL.as_millis() as u64);
        self.query::<()>(&cmd).await.is_some()
    }

    /// Every other instance running on this Redis (announced within [`LIVE_TTL`]): its id and
    /// address; `None` when Redis did not answer in time. A `SCAN` of the announcement keys:
    /// one round trip per hundred instances.
    pub async fn other_instances(&self) -> Option<Vec<(String, String)>> {
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(entry::INSTANCE_PATTERN)
                .arg("COUNT")
                .arg(100);
            let (next, found): (u64, Vec<String>) = self.query(&cmd).await?;
            keys.extend(found);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.retain(|key| entry::instance_of(key) != Some(self.inner.instance.as_str()));
        if keys.is_empty() {
            return Some(Vec::new());
        }
        let mut cmd = redis::cmd("MGET");
        cmd.arg(&keys);
        let addresses: Vec<Option<String>> = self.query(&cmd).await?;
        Some(
            keys.iter()
                .zip(addresses)
                .filter_map(|(key, address)| Some((entry::instance_of(key)?.to_string(), address?)))
                .collect(),
        )
    }

    /// Publishes `message` to `instance`'s inbox; how many listeners got it, or `None` when
    /// Redis did not answer in time.
    pub(super) async fn publish(&self, instance: &str, message: &inbox::Message) -> Option<usize> {
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(entry::inbox(instance)).arg(message.encode());
        self.query(&cmd).await
    }
}
