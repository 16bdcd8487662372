//! TTL and expiry: a stream's sliding `Stream-TTL` or absolute `Stream-Expires-At`, bounded by
//! `--max-retention` when it is asked; a stream whose time is up goes, found by a request or by
//! the face's sweep, whichever comes first.
use std::time::Duration;

use super::Streams;
use super::create::CreateRefused;
use super::handle::State;
use crate::error::Error;
use crate::recorder::Limits;

impl State {
    /// Whether its TTL or expiry time has passed at `now_ms`.
    pub(crate) fn expired(&self, now_ms: u64) -> bool {
        let ttl_passed = self
            .row
            .ttl_secs
            .is_some_and(|ttl| now_ms >= self.touched_ms.saturating_add(ttl.saturating_mul(1000)));
        let expiry_passed = self.row.expires_at_ms.is_some_and(|at| now_ms >= at);
        ttl_passed || expiry_passed
    }

    /// Counts a read or write against its sliding TTL.
    pub(crate) fn touch(&mut self, now_ms: u64) {
        self.touched_ms = now_ms;
    }
}

/// Refuses a lifetime a create asks for: both a TTL and an expiry time, a TTL over
/// `--max-retention` (as gRPC refuses a retention over it), or an expiry time further than
/// that from `now_ms`.
pub(super) fn check_lifetime(
    limits: &Limits,
    ttl_secs: Option<u64>,
    expires_at_ms: Option<u64>,
    now_ms: u64,
) -> Result<(), CreateRefused> {
    let max_secs = limits.max_retention.as_secs();
    if let Some(ttl) = ttl_secs
        && let Err(Error::RetentionTooLong { .. }) =
            limits.check_retention(Duration::from_secs(ttl))
    {
        return Err(CreateRefused::TtlTooLong { max_secs });
    }
    let max_ms = u64::try_from(limits.max_retention.as_millis()).unwrap_or(u64::MAX);
    if expires_at_ms.is_some_and(|at| at > now_ms.saturating_add(max_ms)) {
        return Err(CreateRefused::ExpiresTooLate { max_secs });
    }
    if ttl_secs.is_some() && expires_at_ms.is_some() {
        return Err(CreateRefused::BothLifetimes);
    }
    Ok(())
}

impl Streams {
    /// Ends and forgets every stream whose TTL or expiry time has passed.
    pub async fn expire(&self) {
        let now = self.now_ms();
        for handle in self.all() {
            let expired = {
                let state = handle.state.lock().await;
                !state.gone && state.expired(now)
            };
            if expired && let Err(err) = self.remove(&handle, true).await {
                tracing::warn!(stream = %handle.id, error = %err, "could not delete an expired stream");
            }
        }
    }
}
