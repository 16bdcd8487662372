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
use std::future::poll_fn;
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
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use super::connections::{Warning, Warnings};
use crate::metrics as metric;

/// What the reader path needs from the connection loop.
pub(super) struct ReaderSocket {
    pub(super) stream: TcpStream,
    /// Longest one event may take to be written (`--http-request-timeout`).
    pub(super) timeout: Duration,
    /// Ends the response (as a shutdown ends hyper's) when cancelled.
    pub(super) stop: CancellationToken,
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
    write(&mut socket, &head[..], slow).await.ok()?;
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
    pub(super) async fn send(mut self, warnings: Arc<Warnings>, held: impl Send) {
        let slow = &warnings.slow_readers;
        let stop = self.socket.stop.clone();
        loop {
            let frame = tokio::select! {
                next = poll_fn(|cx| self.poll_next(cx)) => match next {
                    Next::Frame(frame) => frame,
                    Next::Gone => return,
                },
                () = stop.cancelled() => None,
            };
            let data = match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue, // trailers: none on this face
                },
                // The response failed midway: the client sees the body cut short, as with
                // hyper.
                Some(Err(_)) => return,
                None => break,
            };
            if data.is_empty() {
                continue;
            }
            let written = match self.chunked {
                true => write(&mut self.socket, chunk(data), slow).await,
                false => write(&mut self.socket, data, slow).await,
            };
            if written.is_err() {
                return;
            }
        }
        if self.chunked
            && write(&mut self.socket, &b"0\r\n\r\n"[..], slow)
                .await
                .is_err()
        {
            return;
        }
        let _ = self.socket.stream.shutdown().await;
        drop(held);
    }
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
fn chunk(data: Bytes) -> impl Buf {
    let mut length = Vec::with_capacity(10);
    let _ = write!(length, "{:x}\r\n", data.len());
    Bytes::from(length).chain(data).chain(&b"\r\n"[..])
}

/// Writes `bytes`, within the timeout; a reader too slow for it is cut.
async fn write(socket: &mut ReaderSocket, mut bytes: impl Buf, slow: &Warning) -> Result<(), ()> {
    let pending = bytes.remaining();
    match tokio::time::timeout(socket.timeout, socket.stream.write_all_buf(&mut bytes)).await {
        Ok(Ok(())) => Ok(()),
        // The client went away.
        Ok(Err(_)) => Err(()),
        Err(_) => {
            metrics::counter!(metric::HTTP_SLOW_READERS_CUT).increment(1);
            let timeout = socket.timeout;
            slow.bite(|cut| {
                tracing::warn!(
                    timeout = %humantime::format_duration(timeout),
                    pending_bytes = pending,
                    cut,
                    "an SSE reader did not take an event in time (--http-request-timeout); connection closed"
                )
            });
            Err(())
        }
    }
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
    }
}
