//! Group commit's pacing: how long the next commit waits for company once its first op is in
//! hand.
//!
//! A commit starts as soon as the last one is done, with whatever queued meanwhile. After a
//! commit of several ops, though, the next one may wait a little for more: until it holds as
//! many ops as the last one did, for no longer than the last one took, and never past
//! `--commit-interval` from the last one's start. So:
//! - under a steady open load of many producers, each sync carries more than it would
//!   otherwise, for at most one sync's time of latency (the disk sets the wait, not a fixed
//!   number);
//! - writers that wait for each acknowledgement before sending again (a closed loop) are all
//!   back before long, and their commit then starts at once: nobody else is coming;
//! - after a commit of a single op nothing waits: a lone producer has nothing to batch with.
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

/// When the writer may start its next commit.
pub(crate) struct Pacing {
    /// Most time from one commit's start to the next one's, while commits hold several ops.
    interval: Duration,
    /// The last commit.
    last: Option<Last>,
}

#[derive(Debug, Clone, Copy)]
struct Last {
    started: Instant,
    ops: usize,
    /// When it was done; `None` while it runs.
    finished: Option<Instant>,
}

/// What the next commit waits for, whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait {
    /// This many ops in hand: as many as the last commit held.
    pub(crate) ops: usize,
    /// This instant: as long after the last commit was done as it took, and no later than the
    /// interval after it started.
    pub(crate) until: Instant,
}

impl Pacing {
    /// Pacing of at most `interval` from one commit's start to the next; zero turns it off.
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
        }
    }

    /// What the next commit waits for, or `None` to start at once: after a commit of one op,
    /// or with pacing off.
    pub(crate) fn wait(&self) -> Option<Wait> {
        let last = self.last?;
        if last.ops <= 1 || self.interval.is_zero() {
            return None;
        }
        let finished = last.finished?;
        let took = finished - last.started;
        Some(Wait {
            ops: last.ops,
            until: (finished + took).min(last.started + self.interval),
        })
    }

    /// Notes that a commit of `ops` ops started at `now`.
    pub(crate) fn started(&mut self, ops: usize, now: Instant) {
        self.last = Some(Last {
            started: now,
            ops,
            finished: None,
        });
    }

    /// Notes that the commit last started was done at `now`.
    pub(crate) fn finished(&mut self, now: Instant) {
        if let Some(last) = &mut self.last {
            last.finished = Some(now);
        }
    }
}

/// The next message on `queue`, waited for on this thread until `until` at the latest:
/// `None` once it is, `Some(None)` once every sender is gone. The wait ends within a few
/// microseconds of `until`, where one on tokio's timer would end at its next millisecond: a
/// commit takes a fraction of one, and so does the pacing's wait.
pub(crate) fn recv_until<T>(queue: &mut mpsc::Receiver<T>, until: Instant) -> Option<Option<T>> {
    let waker = Waker::from(Arc::new(Unparks(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(message) = queue.poll_recv(&mut cx) {
            return Some(message);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        // Returns when a sender wakes the queue's waker, at `until`, or spuriously.
        std::thread::park_timeout(left);
    }
}

/// A waker that unparks a thread.
struct Unparks(std::thread::Thread);

impl Wake for Unparks {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn after_a_commit_of_several_ops_the_next_waits_as_long_as_it_took() {
        let mut pacing = Pacing::new(4 * MS);
        assert_eq!(pacing.wait(), None, "the first commit starts at once");

        let t0 = Instant::now();
        pacing.started(1, t0);
        pacing.finished(t0 + MS);
        assert_eq!(
            pacing.wait(),
            None,
            "a commit of one op is followed at once"
        );

        pacing.started(7, t0 + MS);
        pacing.finished(t0 + 2 * MS);
        let wait = pacing.wait().expect("a commit of several ops is paced");
        assert_eq!(wait.ops, 7, "for as many ops as it held");
        assert_eq!(wait.until, t0 + 3 * MS, "for as long as it took");
    }

    #[test]
    fn the_wait_ends_at_the_interval_after_the_last_start() {
        let mut pacing = Pacing::new(4 * MS);
        let t0 = Instant::now();
        pacing.started(2, t0);
        pacing.finished(t0 + 3 * MS);
        assert_eq!(pacing.wait().unwrap().until, t0 + 4 * MS);
    }

    #[test]
    fn a_wait_for_the_queue_ends_with_a_message_with_its_senders_or_at_its_deadline() {
        let (tx, mut rx) = mpsc::channel(4);
        let far = Instant::now() + Duration::from_secs(60);
        tx.try_send(1).unwrap();
        assert_eq!(
            recv_until(&mut rx, far),
            Some(Some(1)),
            "one queued comes at once"
        );

        let sender = std::thread::spawn({
            let tx = tx.clone();
            move || tx.blocking_send(2).unwrap()
        });
        assert_eq!(
            recv_until(&mut rx, far),
            Some(Some(2)),
            "one sent while waiting"
        );
        assert!(Instant::now() < far, "as soon as it was sent");
        sender.join().unwrap();

        let until = Instant::now() + 2 * MS;
        assert_eq!(recv_until(&mut rx, until), None, "nothing by the deadline");
        assert!(Instant::now() >= until, "not before it");

        drop(tx);
        assert_eq!(recv_until(&mut rx, far), Some(None), "every sender gone");
    }

    #[test]
    fn zero_never_waits() {
        let mut pacing = Pacing::new(Duration::ZERO);
        let t0 = Instant::now();
        pacing.started(1000, t0);
        pacing.finished(t0 + MS);
        assert_eq!(pacing.wait(), None);
    }
}
