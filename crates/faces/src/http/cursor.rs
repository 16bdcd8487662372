//! `Stream-Cursor`: the number of 20-second intervals since 2024-10-09T00:00:00Z, which a
//! client echoes so that caches key live reads by time; never at or below the client's own
//! cursor (jittered past it), so that a cached response cannot loop.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// 2024-10-09T00:00:00Z, in seconds since the Unix epoch.
const CURSOR_EPOCH_SECS: u64 = 1_728_432_000;
const INTERVAL: Duration = Duration::from_secs(20);
/// Most jitter added past a client's cursor, in intervals (an hour).
const MAX_JITTER_INTERVALS: u64 = 180;

fn current() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    now.saturating_sub(CURSOR_EPOCH_SECS) / INTERVAL.as_secs()
}

/// A later cursor of the same SSE connection: the current interval, never below `previous`.
pub(crate) fn after(previous: u64) -> u64 {
    current().max(previous)
}

/// The cursor for a live response to a request that echoed `client` (if any).
pub(crate) fn next(client: Option<&str>) -> u64 {
    let current = current();
    let client = client.and_then(|c| c.parse::<u64>().ok());
    match client {
        Some(client) if client >= current => {
            let jitter = 1 + uuid::Uuid::new_v4().as_u128() as u64 % MAX_JITTER_INTERVALS;
            client.saturating_add(jitter)
        }
        _ => current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_move_past_the_clients() {
        let now = next(None);
        assert!(now > 0);
        let ahead = (now + 50).to_string();
        let next = next(Some(&ahead));
        assert!(next > now + 50 && next <= now + 50 + MAX_JITTER_INTERVALS);
        assert_eq!(after(now + 3), now + 3);
        assert!(after(0) >= now);
    }
}
