//! A future polled again only once it has asked to be: for a rare signal (a producer session
//! stopped by another hand) that sits in a `select!` beside a message per token.
//!
//! `select!` polls every branch each time its task wakes, whichever woke it. Polling the stop
//! signal means polling a cancellation token, the recording's end and the holder's watch (tokio
//! `Notified`s, which take their waiter list's lock to refresh the waker): twice per token, for
//! a signal that fires once per session. Gated, a poll that nothing woke costs a waker
//! registration and one atomic swap.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// `inner`, polled only on its first poll and after one of its own wake-ups.
pub(super) struct Gated<F> {
    inner: Pin<Box<F>>,
    gate: Arc<WakeFlag>,
}

/// Whether the inner future woke since it was last polled, and whom to tell when it does.
struct WakeFlag {
    woken: AtomicBool,
    outer: AtomicWaker,
}

impl Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.outer.wake();
    }
}

impl<F: Future> Gated<F> {
    /// Wraps `inner`.
    pub(super) fn new(inner: F) -> Self {
        Self {
            inner: Box::pin(inner),
            gate: Arc::new(WakeFlag {
                woken: AtomicBool::new(true),
                outer: AtomicWaker::new(),
            }),
        }
    }
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Registered before the flag is read: a wake-up in between is not lost.
        self.gate.outer.register(cx.waker());
        if !self.gate.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let waker = Waker::from(self.gate.clone());
        self.inner.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Pending until `ready`, counting its polls; wakes whoever polled it last when readied.
    #[derive(Default)]
    struct Signal {
        ready: AtomicBool,
        polls: AtomicUsize,
        waker: AtomicWaker,
    }

    struct Waiting(Arc<Signal>);

    impl Future for Waiting {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.0.polls.fetch_add(1, Ordering::SeqCst);
            self.0.waker.register(cx.waker());
            if self.0.ready.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    #[test]
    fn polls_the_inner_future_only_after_it_woke() {
        let signal = Arc::new(Signal::default());
        let mut gated = Gated::new(Waiting(signal.clone()));
        let mut cx = Context::from_waker(Waker::noop());

        assert!(Pin::new(&mut gated).poll(&mut cx).is_pending());
        for _ in 0..10 {
            assert!(Pin::new(&mut gated).poll(&mut cx).is_pending());
        }
        assert_eq!(
            signal.polls.load(Ordering::SeqCst),
            1,
            "polls nothing woke stay outside"
        );

        signal.ready.store(true, Ordering::SeqCst);
        signal.waker.wake();
        assert!(Pin::new(&mut gated).poll(&mut cx).is_ready());
        assert_eq!(signal.polls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_wake_up_of_the_inner_future_reaches_the_task() {
        let signal = Arc::new(Signal::default());
        let gated = Gated::new(Waiting(signal.clone()));
        let readied = signal.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            readied.ready.store(true, Ordering::SeqCst);
            readied.waker.wake();
        });
        tokio::time::timeout(std::time::Duration::from_secs(5), gated)
            .await
            .expect("the gated future resolves once its signal fires");
    }
}
