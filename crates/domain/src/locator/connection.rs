//! Every call to Redis goes through here: each with the call timeout, each noting whether
//! Redis answered (a change is logged once, and a return registers everything again); and
//! the backoff of the background tasks after a failure.
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::{BACKOFF, CALL_TIMEOUT, Locator};

impl Locator {
    /// Runs one command with the call timeout, noting whether Redis answered.
    pub(super) async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Option<T> {
        let mut conn = self.inner.conn.clone();
        let answer = tokio::time::timeout(CALL_TIMEOUT, cmd.query_async(&mut conn)).await;
        self.noted(answer)
    }

    /// Runs a pipeline with the call timeout, noting whether Redis answered.
    pub(super) async fn query_pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Option<T> {
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
    pub(super) fn reachable(&self) {
        if !self.inner.reachable.swap(true, Ordering::SeqCst) {
            tracing::info!("Redis is reachable again; registering every recording again");
            self.inner.local_check_logged.store(false, Ordering::SeqCst);
            self.inner.resync.notify_one();
        }
    }

    /// Notes that Redis did not answer: logged once per outage.
    pub(super) fn unreachable(&self, why: &str) {
        if self.inner.reachable.swap(false, Ordering::SeqCst) {
            tracing::warn!(
                error = why,
                "Redis is unreachable; serving local recordings only, and retrying"
            );
        }
    }
}

/// Sleeps the backoff delay after `failures` failures in a row, or until `stop`; false if
/// stopped.
pub(super) async fn back_off(failures: u32, stop: &CancellationToken) -> bool {
    let delay = BACKOFF
        .0
        .saturating_mul(1 << failures.min(16))
        .min(BACKOFF.1);
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = stop.cancelled() => false,
    }
}
