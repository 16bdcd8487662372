//! An SSE reader served on its own socket, without hyper: the request (claimed by `head`) goes
//! through the same router and layers as any other (access, CORS, telemetry, the handler), and
//! its response is written here, chunked, and the connection closed after it.
//!
//! What it saves is memory per reader: while a reader waits for the next event it holds its
//! socket, its response body and a small task, not a hyper connection with read and write
//! buffers (the HTTP face's readers are mostly idle, and many).
//!
//! A reader's pending bytes are at most one event: its body is asked for the next event only
//! once the last one is written. A reader that takes longer than `--http-request-timeout` to
//! take one is cut, with a warning and `tapedeck_http_slow_readers_cut_total`. A reader that
//! closes its end is noticed at once, as hyper would.
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::{Buf, Bytes};
use http::{HeaderMap, Request};
use http_body::Body as _;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tower_service::Service;

use super::connections::{Warning, Warnings};
use crate::metrics as metric;

/// What the reader path needs from the connection loop.
pub(super) struct ReaderSocket {
    pub(super) stream: TcpStream,
    /// Longest one event may take to be written (`--http-request-timeout`).
    pub(super) timeout: Duration,
}

/// A response whose head is written, and its body, to be sent.
pub(super) struct Answered {
    socket: ReaderSocket,
    body: Body,
    chunked: bool,
}

/// Answers `request` through `router` on its own socket, up to the response's head.
///
/// The response's body is sent by [`Answered::send`], in a task of its own: a reader waits
/// long for its next event, holding only what that takes (not the request, the router's
/// future or the response's head).
pub(super) async fn answer(
    mut socket: ReaderSocket,
    request: Request<Body>,
    mut router: Router,
    slow: &Warning,
) -> Option<Answered> {
    let Ok(response) = router.call(request).await;
    let (parts, body) = response.into_parts();
    let length = body.size_hint().exact();
    let head = response_head(parts.status, &parts.headers, length);
    let written = tokio::time::timeout(socket.timeout, socket.stream.write_all(&head)).await;
    match written {
        Ok(Ok(())) => {}
        // The client went away.
        Ok(Err(_)) => return None,
        Err(_) => {
            cut(slow, socket.timeout, head.len());
            return None;
        }
    }
    Some(Answered {
        socket,
        body,
        chunked: length.is_none(),
    })
}

/// What a waiting reader's socket and body have for it.
enum Next {
    /// The body's next frame, or its end.
    Frame(Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>),
    /// The client closed its end, or the socket failed.
    Gone,
}

impl Answered {
    /// Polls the body for its next frame and, meanwhile, the socket for the client's close:
    /// in one poll, so the wait holds no future for either. What a client sends after its
    /// request is read and dropped: a reader sends nothing more.
    fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Next> {
        use std::task::Poll;
        if let Poll::Ready(frame) = std::pin::Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(Next::Frame(frame));
        }
        loop {
            match self.socket.stream.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(Next::Gone),
                Poll::Ready(Ok(())) => {}
            }
            let mut sink = [0u8; 64];
            match self.socket.stream.try_read(&mut sink) {
                Ok(0) => return Poll::Ready(Next::Gone),
                Ok(_) => continue,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return Poll::Ready(Next::Gone),
            }
        }
    }

    /// Sends the body, then closes the connection; `held` (its place among the connections)
    /// is let go then.
    pub(super) fn send<H: Unpin>(self, warnings: Arc<Warnings>, held: H) -> Sending<H> {
        Sending {
            answered: self,
            warnings,
            held: Some(held),
            pending: None,
            body_ended: false,
        }
    }
}

/// A response's body being sent (see [`Answered::send`]). Written as a future by hand, not an
/// `async fn`, because a reader waits in it for long and its size is every reader's cost: it
/// holds the socket, the body and what it needs to send them, and a write the socket did not
/// take at once is boxed with its timer. A shutdown ends the body (the recorder's stop, which
/// comes first, ends every SSE read), and so this.
pub(super) struct Sending<H> {
    answered: Answered,
    warnings: Arc<Warnings>,
    /// Let go once the connection is closed.
    held: Option<H>,
    /// The rest of a write the socket did not take at once.
    pending: Option<Box<Pending>>,
    /// The body has ended (its last chunk is written or pending): the socket is shut next.
    body_ended: bool,
}

/// The rest of a write, and when the reader is cut if it has not taken it.
struct Pending {
    bytes: Framed,
    /// Its length when it began, for the warning.
    length: usize,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

/// Bytes as they go on the wire: a chunk's length line, its data, its line end (for a body
/// that is not chunked, the data alone).
type Framed = bytes::buf::Chain<bytes::buf::Chain<LengthLine, Bytes>, &'static [u8]>;

/// A chunk's length line (hex digits, CRLF), held inline: no allocation for it per event.
#[derive(Default)]
struct LengthLine {
    bytes: [u8; 18],
    start: u8,
}

impl LengthLine {
    fn of(length: usize) -> Self {
        let mut line = LengthLine::default();
        let mut at = line.bytes.len() - 2;
        line.bytes[at..].copy_from_slice(b"\r\n");
        let mut rest = length;
        loop {
            at -= 1;
            line.bytes[at] = b"0123456789abcdef"[rest % 16];
            rest /= 16;
            if rest == 0 {
                break;
            }
        }
        line.start = at as u8;
        line
    }

    /// No line: a body that is not chunked.
    fn none() -> Self {
        LengthLine {
            bytes: [0; 18],
            start: 18,
        }
    }
}

impl Buf for LengthLine {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.start as usize
    }

    fn chunk(&self) -> &[u8] {
        &self.bytes[self.start as usize..]
    }

    fn advance(&mut self, count: usize) {
        assert!(count <= self.remaining(), "advanced past the length line");
        self.start += count as u8;
    }
}

/// What the loop does next.
enum Step {
    /// Poll again: there may be more to do at once.
    Again,
    /// Wait for a wake-up.
    Wait,
    /// Done: the connection is closed (or given up on).
    Done,
}

impl<H: Unpin> std::future::Future for Sending<H> {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        use std::task::Poll;
        let this = self.get_mut();
        loop {
            let step = match this.pending.is_some() {
                true => this.poll_pending(cx),
                false if this.body_ended => this.poll_shutdown(cx),
                false => this.poll_body(cx),
            };
            match step {
                Step::Again => continue,
                Step::Wait => return Poll::Pending,
                Step::Done => {
                    this.held.take();
                    return Poll::Ready(());
                }
            }
        }
    }
}

impl<H> Sending<H> {
    /// Takes the body's next frame and writes it, or notices the client gone.
    fn poll_body(&mut self, cx: &mut std::task::Context<'_>) -> Step {
        let frame = match self.answered.poll_next(cx) {
            std::task::Poll::Pending => return Step::Wait,
            std::task::Poll::Ready(Next::Gone) => return Step::Done,
            std::task::Poll::Ready(Next::Frame(frame)) => frame,
        };
        let chunked = self.answered.chunked;
        let bytes = match frame {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if data.is_empty() => return Step::Again,
                Ok(data) if chunked => chunk(data),
                Ok(data) => LengthLine::none().chain(data).chain(&b""[..]),
                Err(_) => return Step::Again, // trailers: none on this face
            },
            // The response failed midway: the client sees the body cut short, as with hyper.
            Some(Err(_)) => return Step::Done,
            None => {
                self.body_ended = true;
                if !chunked {
                    return Step::Again;
                }
                LengthLine::of(0).chain(Bytes::new()).chain(&b"\r\n"[..])
            }
        };
        self.write(bytes)
    }

    /// Writes `bytes` at once if the socket takes them all (most writes); else holds the rest,
    /// to be written within the timeout.
    fn write(&mut self, mut bytes: Framed) -> Step {
        let length = bytes.remaining();
        let mut slices = [std::io::IoSlice::new(&[]); 3];
        let n = bytes.chunks_vectored(&mut slices);
        match self.answered.socket.stream.try_write_vectored(&slices[..n]) {
            Ok(written) => bytes.advance(written),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            // The client went away.
            Err(_) => return Step::Done,
        }
        if bytes.has_remaining() {
            let deadline = Box::pin(tokio::time::sleep(self.answered.socket.timeout));
            self.pending = Some(Box::new(Pending {
                bytes,
                length,
                deadline,
            }));
        }
        Step::Again
    }

    /// Writes what is pending as the socket takes it; cuts the reader when its time is up.
    fn poll_pending(&mut self, cx: &mut std::task::Context<'_>) -> Step {
        use std::task::Poll;
        use tokio::io::AsyncWrite;
        let Some(pending) = self.pending.as_deref_mut() else {
            return Step::Again;
        };
        let stream = std::pin::Pin::new(&mut self.answered.socket.stream);
        let mut slices = [std::io::IoSlice::new(&[]); 3];
        let n = pending.bytes.chunks_vectored(&mut slices);
        match stream.poll_write_vectored(cx, &slices[..n]) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Step::Done,
            Poll::Ready(Ok(written)) => {
                pending.bytes.advance(written);
                if !pending.bytes.has_remaining() {
                    self.pending = None;
                }
                return Step::Again;
            }
            Poll::Pending => {}
        }
        if pending.deadline.as_mut().poll(cx).is_pending() {
            return Step::Wait;
        }
        cut(
            &self.warnings.slow_readers,
            self.answered.socket.timeout,
            pending.length,
        );
        Step::Done
    }

    /// Closes the sending side once everything is written.
    fn poll_shutdown(&mut self, cx: &mut std::task::Context<'_>) -> Step {
        use tokio::io::AsyncWrite;
        let stream = std::pin::Pin::new(&mut self.answered.socket.stream);
        match stream.poll_shutdown(cx) {
            std::task::Poll::Pending => Step::Wait,
            std::task::Poll::Ready(_) => Step::Done,
        }
    }
}

/// Counts and warns of a reader cut for not taking `pending_bytes` within `timeout`.
fn cut(slow: &Warning, timeout: Duration, pending_bytes: usize) {
    metrics::counter!(metric::HTTP_SLOW_READERS_CUT).increment(1);
    slow.bite(|cut| {
        tracing::warn!(
            timeout = %humantime::format_duration(timeout),
            pending_bytes,
            cut,
            "an SSE reader did not take an event in time (--http-request-timeout); connection closed"
        )
    });
}

/// The status line and headers of `status` and `headers`, with the framing of a body of
/// `length` bytes (chunked when unknown); the connection closes after it.
fn response_head(status: http::StatusCode, headers: &HeaderMap, length: Option<u64>) -> Vec<u8> {
    let mut head = Vec::with_capacity(512);
    let _ = write!(
        head,
        "HTTP/1.1 {} {}\r\n",
        status.as_str(),
        status.canonical_reason().unwrap_or("")
    );
    for (name, value) in headers {
        // The framing is this writer's to say.
        if matches!(
            name,
            &http::header::CONTENT_LENGTH
                | &http::header::TRANSFER_ENCODING
                | &http::header::CONNECTION
        ) {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    match length {
        Some(length) => {
            let _ = write!(head, "content-length: {length}\r\n");
        }
        None => head.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    let _ = write!(head, "connection: close\r\ndate: {date}\r\n\r\n");
    head
}

/// `data` as one chunk of a chunked body: its length, itself, a line end (written in one
/// vectored write, without a copy).
fn chunk(data: Bytes) -> Framed {
    LengthLine::of(data.len()).chain(data).chain(&b"\r\n"[..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_frames_the_body_itself_and_closes_the_connection() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "text/event-stream".parse().unwrap());
        headers.insert("content-length", "9".parse().unwrap());
        headers.insert("connection", "keep-alive".parse().unwrap());
        let head = String::from_utf8(response_head(http::StatusCode::OK, &headers, None)).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"));
        assert!(head.contains("transfer-encoding: chunked\r\nconnection: close\r\ndate: "));
        assert!(!head.contains("content-length") && !head.contains("keep-alive"));
        assert!(head.ends_with("\r\n\r\n"));
        let head = response_head(http::StatusCode::UNAUTHORIZED, &HeaderMap::new(), Some(12));
        assert!(
            String::from_utf8(head)
                .unwrap()
                .contains("401 Unauthorized\r\ncontent-length: 12\r\n")
        );
    }

    #[test]
    fn a_chunk_says_its_length_in_hex() {
        let mut framed = chunk(Bytes::from_static(&[b'x'; 26]));
        let framed = framed.copy_to_bytes(framed.remaining()).to_vec();
        let expected = [&b"1a\r\n"[..], &[b'x'; 26], b"\r\n"].concat();
        assert_eq!(framed, expected);
        for length in [0, 1, 15, 16, 255, 4096, 262_143, usize::MAX] {
            let line = LengthLine::of(length);
            assert_eq!(line.chunk(), format!("{length:x}\r\n").as_bytes());
        }
        let mut end = LengthLine::of(0).chain(Bytes::new()).chain(&b"\r\n"[..]);
        assert_eq!(&end.copy_to_bytes(end.remaining())[..], b"0\r\n\r\n");
        assert_eq!(LengthLine::none().remaining(), 0);
    }
}
