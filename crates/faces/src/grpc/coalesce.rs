//! Coalesced writes for the gRPC connections: a connection's write waits for one turn of the
//! runtime, so that the frames other tasks queue meanwhile go out in the same `writev`.
//!
//! A commit answers hundreds of per-token acknowledgements at once, a few per connection. Each
//! one wakes its stream's task, which hands the frame to the connection's task, and tokio runs
//! a task woken that way next (its LIFO slot): without this, the connection wrote each
//! acknowledgement in a system call of its own (about 54,000 `writev`s a second for 66,000
//! acknowledgements, a quarter of the server's CPU in scenario (b); see BENCHMARKS.md).
//!
//! The first write after the connection's task woke is answered `Pending` with the task woken
//! again; tokio treats a task that wakes itself as yielding and puts it at the back of the
//! worker's queue, behind the tasks still to queue their frames. The next try writes
//! everything queued by then. Nothing is held back longer than one pass of the queue, and an
//! idle runtime runs the connection again at once. Writes of a full frame or more (a replay's)
//! go at once: they are worth their system call already.
//!
//! Plaintext connections only. Under TLS the writes are rustls's, and a handshake that fails
//! writes its alert (`CertificateRequired`, say) once, without trying again after `Pending`:
//! the client would see the connection closed instead of why.
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Writes at least this long go at once: HTTP/2's largest frame by default (16 KiB).
const WRITE_AT_ONCE_BYTES: usize = 16 * 1024;

/// A transport whose writes yield once before they reach the socket.
pub struct CoalescedWrites<IO> {
    inner: IO,
    /// Whether small writes yield their turn at all.
    coalescing: bool,
    /// Whether this write already yielded its turn; reset once a write goes through.
    yielded: bool,
}

impl<IO> CoalescedWrites<IO> {
    /// Wraps `inner`; with `coalescing` false, every write goes at once.
    pub fn new(inner: IO, coalescing: bool) -> Self {
        Self {
            inner,
            coalescing,
            yielded: false,
        }
    }

    /// `Ready` once a write of `len` bytes may go: at once when it is long, else once it has
    /// yielded its turn (the first call asks to be polled again).
    fn take_turn(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<()> {
        if !self.coalescing || len >= WRITE_AT_ONCE_BYTES || self.yielded {
            self.yielded = false;
            Poll::Ready(())
        } else {
            self.yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for CoalescedWrites<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for CoalescedWrites<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.take_turn(cx, buf.len()));
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let len = bufs.iter().map(|buf| buf.len()).sum();
        std::task::ready!(self.take_turn(cx, len));
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<IO: Connected<ConnectInfo = TcpConnectInfo>> Connected for CoalescedWrites<IO> {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    /// Counts its wake-ups.
    struct Counting(AtomicUsize);

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_small_write_yields_once_then_goes() {
        let counting = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(counting.clone());
        let mut cx = Context::from_waker(&waker);
        let mut io = CoalescedWrites::new(Vec::new(), true);

        let first = Pin::new(&mut io).poll_write(&mut cx, b"ack");
        assert!(first.is_pending(), "the first try yields its turn");
        assert_eq!(
            counting.0.load(Ordering::SeqCst),
            1,
            "and asks to run again"
        );
        assert!(io.inner.is_empty());

        let second = Pin::new(&mut io).poll_write(&mut cx, b"ack, and more");
        assert!(matches!(second, Poll::Ready(Ok(13))));
        assert_eq!(io.inner, b"ack, and more");

        let next = Pin::new(&mut io).poll_write(&mut cx, b"next");
        assert!(
            next.is_pending(),
            "every write after one went through yields again"
        );
    }

    #[test]
    fn a_frame_sized_write_goes_at_once() {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut io = CoalescedWrites::new(Vec::new(), true);
        let frame = vec![7u8; WRITE_AT_ONCE_BYTES];
        let slices = [IoSlice::new(&frame[..9]), IoSlice::new(&frame[9..])];
        let written = Pin::new(&mut io).poll_write_vectored(&mut cx, &slices);
        assert!(matches!(written, Poll::Ready(Ok(n)) if n > 0));
    }

    #[test]
    fn without_coalescing_every_write_goes_at_once() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut io = CoalescedWrites::new(Vec::new(), false);
        let written = Pin::new(&mut io).poll_write(&mut cx, b"alert");
        assert!(matches!(written, Poll::Ready(Ok(5))));
    }
}
