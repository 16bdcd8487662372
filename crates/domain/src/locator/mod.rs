//! The Redis locator: several instances behind one address. Each instance mirrors the
//! recordings it holds into Redis entries (owner address, owner token, status), and answers
//! calls about recordings it does not hold by redirecting to, or forwarding to, the owner
//! ([`asks`]: a cancel, a Get, a Delete, over the owner's Redis inbox).
//!
//! Redis is never on a producer's path: entries are written by a background registrar
//! ([`registrar`]) from the recorder's change set. When Redis is unreachable every instance
//! keeps serving what it holds, logs it once, retries with backoff, and registers everything
//! again once Redis is back.
//!
//! # Layout
//! - this file: [`Locator`], the handle the faces share, and [`Route`].
//! - `settings`: [`LocatorConfig`], where Redis is and how other instances reach this one.
//! - `instance`: this instance's id, kept in the data dir.
//! - `lookups`: what the faces ask Redis (owners, live statuses, other instances).
//! - `connection`: every call to Redis, with its timeout, reachability noted, and backoff.
//! - `entry`: an entry's keys, fields and the scripts that claim and release it.
//! - `registrar`: mirroring this instance's recordings into entries.
//! - `inbox`, `asks`: messages between instances, and the calls forwarded over them.

mod asks;
mod connection;
mod entry;
mod inbox;
mod instance;
mod lookups;
mod registrar;
mod settings;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use entry::Owner;
pub use instance::INSTANCE_FILE;
pub use settings::LocatorConfig;

use crate::error::{Error, Result};
use crate::recorder::Recorder;
use connection::back_off;
use instance::{instance_id, owner_token};

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
        let client = redis::Client::open(config.redis_url.as_str()).map_err(|err| {
            Error::Setup(crate::error::Setup::Locator {
                reason: format!("--redis-url is not a Redis URL: {err}"),
            })
        })?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CALL_TIMEOUT))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(1)
            .set_min_delay(BACKOFF.0)
            .set_max_delay(BACKOFF.1);
        let conn =
            ConnectionManager::new_lazy_with_config(client.clone(), manager).map_err(|err| {
                Error::Setup(crate::error::Setup::Locator {
                    reason: format!("cannot prepare the Redis connection: {err}"),
                })
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

    /// This instance's advertised address.
    pub fn address(&self) -> &str {
        &self.inner.address
    }
}
