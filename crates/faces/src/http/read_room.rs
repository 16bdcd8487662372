//! How much one catch-up response may carry: up to 8 MiB while the face's read budget has
//! room, else 1 MiB; and its body, sent in slices that hold that room until the last one is
//! taken, its pieces never copied into one buffer. Fewer, larger responses are what a reader
//! catching up on a long stream wants (each one costs it a round trip); the budget keeps many
//! such readers at once from holding more than 256 MiB of response bodies between them.
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most bytes one catch-up response carries when the budget has room.
pub(crate) const LARGE_READ_BYTES: usize = 8 * 1024 * 1024;
/// Most bytes one catch-up response carries otherwise.
pub(crate) const SMALL_READ_BYTES: usize = 1024 * 1024;
/// Bytes of large responses that may be held at once, read or being sent.
const BUDGET_BYTES: usize = 256 * 1024 * 1024;
/// The budget's unit: a permit is a KiB.
const UNIT: usize = 1024;
/// Bytes of a body handed to the connection at a time.
const SLICE_BYTES: usize = 256 * 1024;

/// The face's budget for large catch-up responses.
#[derive(Debug)]
pub(crate) struct CatchUpBudget {
    budget: Arc<Semaphore>,
}

impl Default for CatchUpBudget {
    fn default() -> Self {
        Self {
            budget: Arc::new(Semaphore::new(BUDGET_BYTES / UNIT)),
        }
    }
}

/// ResponseRoom taken in the budget for one response; given back when its body is sent.
pub(crate) struct ResponseRoom {
    /// Most bytes the response may carry.
    pub(crate) bytes: usize,
    permit: Option<OwnedSemaphorePermit>,
}

impl CatchUpBudget {
    /// ResponseRoom for one response: large if the budget has it, small (outside the budget) if not.
    pub(crate) fn take(&self) -> ResponseRoom {
        let units = (LARGE_READ_BYTES / UNIT) as u32;
        match self.budget.clone().try_acquire_many_owned(units) {
            Ok(permit) => ResponseRoom {
                bytes: LARGE_READ_BYTES,
                permit: Some(permit),
            },
            Err(_) => ResponseRoom::small(),
        }
    }
}

impl ResponseRoom {
    /// Small room, outside the budget: for a long-poll, which may wait seconds, and reads
    /// that carry nothing.
    pub(crate) fn small() -> ResponseRoom {
        ResponseRoom {
            bytes: SMALL_READ_BYTES,
            permit: None,
        }
    }

    /// A body of `pieces`, one after the other (sent as they are, never copied into one
    /// buffer), holding this room until its last slice is taken.
    pub(crate) fn body_of(self, pieces: Vec<Bytes>) -> Body {
        let rest: VecDeque<Bytes> = pieces.into_iter().filter(|p| !p.is_empty()).collect();
        let left = rest.iter().map(|p| p.len() as u64).sum();
        Body::new(Sliced {
            rest,
            left,
            room: self.permit,
        })
    }
}

/// A response body of known length, handed out a slice at a time (slices of its pieces, not
/// copies), so that the connection holds only a few of them at once.
struct Sliced {
    /// What is left to send, none of it empty.
    rest: VecDeque<Bytes>,
    /// Its length.
    left: u64,
    room: Option<OwnedSemaphorePermit>,
}

impl http_body::Body for Sliced {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let Some(piece) = self.rest.front_mut() else {
            self.room = None;
            return Poll::Ready(None);
        };
        let slice = piece.split_to(piece.len().min(SLICE_BYTES));
        if piece.is_empty() {
            self.rest.pop_front();
        }
        self.left -= slice.len() as u64;
        if self.rest.is_empty() {
            // The last slice is the connection's now: what it holds is bounded by its buffer.
            self.room = None;
        }
        Poll::Ready(Some(Ok(Frame::data(slice))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn large_reads_while_the_budget_has_room_then_small_ones() {
        let room = CatchUpBudget::default();
        let taken: Vec<ResponseRoom> = (0..BUDGET_BYTES / LARGE_READ_BYTES)
            .map(|_| room.take())
            .collect();
        assert!(taken.iter().all(|r| r.bytes == LARGE_READ_BYTES));
        assert_eq!(room.take().bytes, SMALL_READ_BYTES, "the budget is spent");
        let data = Bytes::from(vec![7u8; SLICE_BYTES * 2 + 5]);
        let mut taken = taken.into_iter();
        let body = taken.next().unwrap().body_of(vec![data.clone()]);
        let collected = body.collect().await.unwrap().to_bytes();
        assert_eq!(collected, data);
        // Pieces go out one after the other, in slices, with their length known up front.
        let pieces = vec![
            Bytes::from_static(b"ab"),
            Bytes::new(),
            data.clone(),
            Bytes::from_static(b"z"),
        ];
        let body = taken.next().unwrap().body_of(pieces);
        assert_eq!(body.size_hint().exact(), Some(data.len() as u64 + 3));
        let collected = body.collect().await.unwrap().to_bytes();
        assert_eq!(collected, [&b"ab"[..], &data, b"z"].concat());
        assert_eq!(
            room.take().bytes,
            LARGE_READ_BYTES,
            "a sent body gives its room back"
        );
    }
}
