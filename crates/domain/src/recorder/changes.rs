//! Which conversations' recordings changed (started, reopened, ended, deleted), for a watcher
//! that mirrors them elsewhere: the Redis locator. Off, and free, until a watcher asks. Any
//! number of observers (the console) may also follow a count of changes.
use std::collections::HashSet;
use std::sync::Mutex;

use tokio::sync::Notify;

/// The set of conversation keys changed since the watcher last looked. A set, not a queue: a
/// conversation that changes many times before the watcher looks is reported once, so what
/// it holds is bounded by the number of recordings, whatever the rate of changes.
#[derive(Debug)]
pub struct Changes {
    /// `None` until [`enable`](Self::enable): nobody is watching.
    pending: Mutex<Option<HashSet<u128>>>,
    /// Holds a permit once something is pending, so a mark is never missed.
    marked: Notify,
    /// How many changes there have been, for [`follow`](Self::follow).
    count: tokio::sync::watch::Sender<u64>,
}

impl Default for Changes {
    fn default() -> Self {
        Self {
            pending: Mutex::default(),
            marked: Notify::default(),
            count: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Changes {
    /// Starts collecting changes.
    pub fn enable(&self) {
        self.lock().get_or_insert_with(HashSet::new);
    }

    /// Records that conversation `key`'s recording changed.
    pub(crate) fn mark(&self, key: u128) {
        if let Some(pending) = self.lock().as_mut() {
            pending.insert(key);
            self.marked.notify_one();
        }
        self.count.send_modify(|count| *count += 1);
    }

    /// A receiver that sees the count of changes move (without which keys).
    pub fn follow(&self) -> tokio::sync::watch::Receiver<u64> {
        self.count.subscribe()
    }

    /// The keys changed since the last call, once there is at least one.
    pub async fn next(&self) -> Vec<u128> {
        loop {
            let taken = self.drain();
            if !taken.is_empty() {
                return taken;
            }
            self.marked.notified().await;
        }
    }

    /// The keys changed since the last call, without waiting.
    pub fn drain(&self) -> Vec<u128> {
        self.lock()
            .as_mut()
            .map(|pending| pending.drain().collect())
            .unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashSet<u128>>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn marks_are_collected_once_enabled_and_reported_once() {
        let changes = Changes::default();
        changes.mark(1);
        changes.enable();
        changes.mark(2);
        changes.mark(2);
        changes.mark(3);
        let mut keys = changes.next().await;
        keys.sort_unstable();
        assert_eq!(keys, vec![2, 3]);
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), changes.next());
        assert!(waiting.await.is_err(), "nothing is pending");
    }
}
