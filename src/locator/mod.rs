//! The Redis locator: several instances behind one address. Each instance mirrors the
//! recordings it holds into Redis entries (owner address, owner token, status), and answers
//! calls about recordings it does not hold by redirecting to, or forwarding to, the owner
//! ([`asks`]: a cancel, a Get, a Delete, over the owner's Redis inbox).
//!
//! Redis is never on a producer's path: entries are written by a background registrar
//! ([`registrar`]) from the recorder's change set. When Redis is unreachable every instance
//! keeps serving what it holds, logs it once, retries with backoff, and registers everything
//! again once Redis is back.

mod asks;
mod entry;
mod inbox;
mod registrar;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use entry::Owner;

use crate::error::{Error, Result};
use crate::recorder::Recorder;

/// How long a live recording's entry lives unless refreshed.
const LIVE_TTL: Duration = Duration::from_secs(10);
/// How often live recordings' entries are refreshed.
const REFRESH_INTERVAL: Duration = Duration::from_secs(3);
/// The longest a call waits on Redis before answering from local state.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a forwarded call (a cancel, a Get, a Delete) waits for the owner's reply.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the owner of a forwarded legacy cancel waits for its producer to let go; within
/// [`FORWARD_TIMEOUT`].
const FORWARDED_CANCEL_WAIT: Duration = Duration::from_secs(2);
/// Retry backoff after a failure to reach Redis: from the first delay, doubling to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Where the locator finds Redis and how other instances reach this one.
#[derive(Clone)]
pub struct LocatorConfig {
    /// `redis://[user:password@]host:port[/db]`.
    pub redis_url: String,
    /// `host:port` other instances redirect clients to.
    pub advertised_address: String,
    /// `host:port` of this instance's HTTP face, where other instances send HTTP requests
    /// about the streams it holds (`--advertised-http-address`); none: they answer 404.
    pub advertised_http_address: Option<String>,
}

impl LocatorConfig {
    /// The Redis URL with any credentials in it replaced by `***`, for logs.
    pub fn redacted_url(&self) -> String {
        match (
            self.redis_url.split_once("://"),
            self.redis_url.rsplit_once('@'),
        ) {
            (Some((scheme, _)), Some((_, host))) => format!("{scheme}://***@{host}"),
            _ => self.redis_url.clone(),
        }
    }
}

impl std::fmt::Debug for LocatorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocatorConfig")
            .field("redis_url", &self.redacted_url())
            .field("advertised_address", &self.advertised_address)
            .field("advertised_http_address", &self.advertised_http_address)
            .finish()
    }
}

/// Where a call about a conversation is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Here: the recording is live here, or no other instance registered it (or Redis could
    /// not be asked).
    Here,
    /// On another instance, which registered the recording.
    There(Owner),
}

/// The locator: cheap to clone, shared by the faces and its background tasks.
#[derive(Clone)]
pub struct Locator {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    conn: ConnectionManager,
    /// This instance's id, kept in the data dir so that it survives restarts.
    instance: String,
    address: String,
    /// This instance's HTTP face as others reach it; empty when not advertised.
    http_address: String,
    claim: entry::Lua,
    release: entry::Lua,
    /// Whether the last call to Redis succeeded; flips are logged, once each.
    reachable: AtomicBool,
    /// Asks the registrar to register every recording again (Redis came back).
    resync: Notify,
    /// Whether a live check answered from local state was logged during this outage.
    local_check_logged: AtomicBool,
    /// Forwarded calls awaiting the owner's reply, by request number.
    waiting: Mutex<HashMap<u64, oneshot::Sender<asks::Reply>>>,
    next_request: AtomicU64,
    tasks: TaskTracker,
}

impl std::fmt::Debug for Locator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locator")
            .field("instance", &self.inner.instance)
            .field("address", &self.inner.address)
            .finish_non_exhaustive()
    }
}

impl Locator {
    /// A locator for the instance whose data dir is `data_dir`. Does not wait for Redis: the
    /// connection is made on first use, and made again whenever it breaks.
    ///
    /// Fails with `Locator` for a malformed URL, or an instance id file that cannot be read
    /// or written.
    pub fn new(config: &LocatorConfig, data_dir: &Path) -> Result<Self> {
        let client =
            redis::Client::open(config.redis_url.as_str()).map_err(|err| Error::Locator {
                reason: format!("--redis-url is not a Redis URL: {err}"),
            })?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CALL_TIMEOUT))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(1)
            .set_min_delay(BACKOFF.0)
            .set_max_delay(BACKOFF.1);
        let conn =
            ConnectionManager::new_lazy_with_config(client.clone(), manager).map_err(|err| {
                Error::Locator {
                    reason: format!("cannot prepare the Redis connection: {err}"),
                }
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                conn,
                instance: instance_id(data_dir)?,
                address: config.advertised_address.clone(),
                http_address: config.advertised_http_address.clone().unwrap_or_default(),
                claim: entry::claim_script(),
                release: entry::release_script(),
                reachable: AtomicBool::new(true),
                resync: Notify::new(),
                local_check_logged: AtomicBool::new(false),
                waiting: Mutex::new(HashMap::new()),
                next_request: AtomicU64::new(1),
                tasks: TaskTracker::new(),
            }),
        })
    }

    /// Starts mirroring `recorder`'s recordings into Redis and answering other instances,
    /// until `stop` is cancelled; [`stopped`](Self::stopped) waits for both tasks.
    pub fn start(&self, recorder: &Recorder, stop: &CancellationToken) {
        let tasks = &self.inner.tasks;
        tasks.spawn(registrar::run(self.clone(), recorder.clone(), stop.clone()));
        tasks.spawn(inbox::listen(self.clone(), recorder.clone(), stop.clone()));
        tasks.close();
    }

    /// Resolves once the tasks [`start`](Self::start) spawned have returned.
    pub async fn stopped(&self) {
        self.inner.tasks.wait().await;
    }

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
    async fn announce(&self) -> bool {
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

    /// This instance's advertised address.
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// Publishes `message` to `instance`'s inbox; how many listeners got it, or `None` when
    /// Redis did not answer in time.
    async fn publish(&self, instance: &str, message: &inbox::Message) -> Option<usize> {
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(entry::inbox(instance)).arg(message.encode());
        self.query(&cmd).await
    }

    /// Runs one command with the call timeout, noting whether Redis answered.
    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Option<T> {
        let mut conn = self.inner.conn.clone();
        let answer = tokio::time::timeout(CALL_TIMEOUT, cmd.query_async(&mut conn)).await;
        self.noted(answer)
    }

    /// Runs a pipeline with the call timeout, noting whether Redis answered.
    async fn query_pipe<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Option<T> {
        let mut conn = self.inner.conn.clone();
        let answer = tokio::time::timeout(CALL_TIMEOUT, pipe.query_async(&mut conn)).await;
        self.noted(answer)
    }

    fn noted<T>(
        &self,
        answer: std::result::Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
    ) -> Option<T> {
        match answer {
            Ok(Ok(value)) => {
                self.reachable();
                Some(value)
            }
            Ok(Err(err)) => {
                self.unreachable(&err.to_string());
                None
            }
            Err(_) => {
                self.unreachable(&format!("no answer within {CALL_TIMEOUT:?}"));
                None
            }
        }
    }

    /// Notes that Redis answered: logged once after an outage, and everything is registered
    /// again (entries may have expired, or Redis may have restarted empty).
    fn reachable(&self) {
        if !self.inner.reachable.swap(true, Ordering::SeqCst) {
            tracing::info!("Redis is reachable again; registering every recording again");
            self.inner.local_check_logged.store(false, Ordering::SeqCst);
            self.inner.resync.notify_one();
        }
    }

    /// Notes that Redis did not answer: logged once per outage.
    fn unreachable(&self, why: &str) {
        if self.inner.reachable.swap(false, Ordering::SeqCst) {
            tracing::warn!(
                error = why,
                "Redis is unreachable; serving local recordings only, and retrying"
            );
        }
    }
}

/// The owner token of generation `generation` of a conversation's recording on `instance`.
fn owner_token(instance: &str, generation: u64) -> String {
    format!("{instance}:{generation}")
}

/// Name of the file in the data dir that keeps this instance's id.
pub const INSTANCE_FILE: &str = "tapedeck.instance";

/// This instance's id: read from the data dir, or made and written there on first start. It
/// names the instance's inbox and is part of its owner tokens, so it must outlive restarts:
/// after one, the instance takes its own entries back rather than competing with them.
fn instance_id(data_dir: &Path) -> Result<String> {
    let path = data_dir.join(INSTANCE_FILE);
    let failed = |err: std::io::Error| Error::Locator {
        reason: format!("cannot keep the instance id in {}: {err}", path.display()),
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => match uuid::Uuid::parse_str(text.trim()) {
            Ok(id) => Ok(id.to_string()),
            Err(_) => Err(Error::Locator {
                reason: format!("{} does not hold a UUID", path.display()),
            }),
        },
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4().to_string();
            let staging = data_dir.join(format!("{INSTANCE_FILE}.new"));
            std::fs::write(&staging, &id).map_err(failed)?;
            std::fs::File::open(&staging)
                .and_then(|f| f.sync_all())
                .map_err(failed)?;
            std::fs::rename(&staging, &path).map_err(failed)?;
            Ok(id)
        }
        Err(err) => Err(failed(err)),
    }
}

/// Sleeps the backoff delay after `failures` failures in a row, or until `stop`; false if
/// stopped.
async fn back_off(failures: u32, stop: &CancellationToken) -> bool {
    let delay = BACKOFF
        .0
        .saturating_mul(1 << failures.min(16))
        .min(BACKOFF.1);
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = stop.cancelled() => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instance_id_outlives_a_restart_and_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let first = instance_id(dir.path()).unwrap();
        assert_eq!(instance_id(dir.path()).unwrap(), first);
        std::fs::write(dir.path().join(INSTANCE_FILE), "not a uuid").unwrap();
        let err = instance_id(dir.path()).unwrap_err().to_string();
        assert!(err.contains("does not hold a UUID"), "{err}");
    }

    #[test]
    fn credentials_in_the_redis_url_are_never_shown() {
        let config = LocatorConfig {
            redis_url: "redis://user:hunter2@10.0.0.5:6379/2".into(),
            advertised_address: "10.0.0.1:9090".into(),
            advertised_http_address: None,
        };
        assert_eq!(config.redacted_url(), "redis://***@10.0.0.5:6379/2");
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}
