//! Group commit's pacing: how long the next commit waits for company once its first op is in
//! hand.
//!
//! Under a steady open load of many producers, a commit started at once holds a handful of
//! tokens: the disk rewrites a 4 KiB block of the log per commit and the server pays a sync and
//! a round of wake-ups for each (see BENCHMARKS.md, "commit pacing"). So after a commit of
//! several ops the next one waits, up to the interval from the last one's start, for as many
//! ops as the last one held. Writers that wait for each acknowledgement before sending again
//! (a closed loop) are all back well before that, and their commit starts at once: waiting
//! could only slow them, as nobody else is coming. A commit that held a single op is never
//! followed by a wait either: a lone producer has nothing to batch with.
use std::time::{Duration, Instant};

/// When the writer may start its next commit.
pub(crate) struct Pacing {
    /// Most time from one commit's start to the next one's, while commits hold several ops.
    interval: Duration,
    /// When the last commit started, and how many ops it held.
    last: Option<(Instant, usize)>,
}

/// What the next commit waits for, whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait {
    /// This many ops in hand: as many as the last commit held.
    pub(crate) ops: usize,
    /// This instant: the interval after the last commit started.
    pub(crate) until: Instant,
}

impl Pacing {
    /// Pacing at `interval`; zero turns it off.
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
        }
    }

    /// What the next commit waits for, or `None` to start at once: after a commit of one op,
    /// or with pacing off.
    pub(crate) fn wait(&self) -> Option<Wait> {
        match self.last {
            Some((started, ops)) if ops > 1 && !self.interval.is_zero() => Some(Wait {
                ops,
                until: started + self.interval,
            }),
            _ => None,
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
    fn a_commit_of_several_ops_makes_the_next_wait_for_as_many_or_the_interval() {
        let interval = Duration::from_millis(50);
        let mut pacing = Pacing::new(interval);
        assert_eq!(pacing.wait(), None, "the first commit starts at once");

        pacing.started(1);
        assert_eq!(
            pacing.wait(),
            None,
            "a commit of one op is followed at once"
        );

        let before = Instant::now();
        pacing.started(7);
        let wait = pacing.wait().expect("a commit of several ops is paced");
        assert_eq!(wait.ops, 7);
        assert!(wait.until >= before + interval);
        assert!(wait.until <= Instant::now() + interval);
    }

    #[test]
    fn zero_never_waits() {
        let mut pacing = Pacing::new(Duration::ZERO);
        pacing.started(1000);
        assert_eq!(pacing.wait(), None);
    }
}
