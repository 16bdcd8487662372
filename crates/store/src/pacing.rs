//! Group commit's pacing: while several ops arrive per commit, commits start at most once per
//! interval, so that each `fdatasync` (and each wake-up of the readers) carries more tokens.
//!
//! Under a steady load of many producers each commit otherwise holds a handful of tokens: the
//! disk rewrites a 4 KiB block of the log per commit and the server pays a sync and a round
//! of wake-ups for each (see BENCHMARKS.md, "commit pacing"). A commit that held a single op is
//! never followed by a wait: a lone producer that waits for each commit before sending the next
//! token would otherwise be slowed to one token per interval, for nothing to batch with.
use std::time::{Duration, Instant};

/// When the writer may start its next commit.
pub(crate) struct Pacing {
    /// Least time from one commit's start to the next one's, while commits hold several ops.
    interval: Duration,
    /// When the last commit started, and how many ops it held.
    last: Option<(Instant, usize)>,
}

impl Pacing {
    /// Pacing at `interval`; zero turns it off.
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
        }
    }

    /// Blocks until the next commit may start: at once, unless the last one held several ops
    /// and started less than the interval ago. Called once the next commit's first op is in
    /// hand; what queues meanwhile joins it.
    pub(crate) fn wait(&self) {
        if let Some((started, ops)) = self.last
            && ops > 1
        {
            let since = started.elapsed();
            if since < self.interval {
                std::thread::sleep(self.interval - since);
            }
        }
    }

    /// Notes that a commit of `ops` ops starts now.
    pub(crate) fn started(&mut self, ops: usize) {
        self.last = Some((Instant::now(), ops));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_only_after_a_commit_of_several_ops() {
        let interval = Duration::from_millis(50);
        let mut pacing = Pacing::new(interval);

        let first = Instant::now();
        pacing.wait();
        pacing.started(1);
        pacing.wait();
        assert!(
            first.elapsed() < interval,
            "a commit of one op is followed at once"
        );

        pacing.started(2);
        let started = Instant::now();
        pacing.wait();
        assert!(
            started.elapsed() >= interval - Duration::from_millis(1),
            "a commit of several ops is followed an interval after it started"
        );
    }

    #[test]
    fn zero_never_waits() {
        let mut pacing = Pacing::new(Duration::ZERO);
        pacing.started(1000);
        let started = Instant::now();
        pacing.wait();
        assert!(started.elapsed() < Duration::from_millis(50));
    }
}
