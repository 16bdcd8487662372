//! The gRPC face: thin adapters from the two Memory Service contracts to the [`Recorder`]. They
//! decode ids, map errors to statuses and shape messages; the behaviour lives in the recorder.

mod recorder;
mod resumer;

pub use recorder::RecorderService;
pub use resumer::ResumerService;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

use crate::error::Error;
use crate::id::ConversationId;
use crate::recorder::{Piece, Recorder, Replay};

/// Messages a replay may run ahead of a slow client before it waits for the client to read.
const REPLAY_BUFFER: usize = 2;

/// Trailer naming how the replayed recording ended.
pub const STATUS_TRAILER: &str = "tapedeck-status";
/// Trailer giving the byte offset after the last byte sent.
pub const OFFSET_TRAILER: &str = "tapedeck-offset";

/// Parses the conversation id of a request; an empty one is reported as missing.
fn parse_id(raw: &[u8]) -> Result<ConversationId, Status> {
    if raw.is_empty() {
        return Err(Error::MissingConversationId.into());
    }
    Ok(ConversationId::parse(raw)?)
}

/// A resume offset from the wire, which carries it signed.
fn parse_offset(raw: i64) -> Result<u64, Status> {
    u64::try_from(raw).map_err(|_| Error::NegativeOffset { offset: raw }.into())
}

/// Opens a replay and streams it on a task of its own: each piece becomes a message made by
/// `message`; the end is an OK status carrying the `tapedeck-*` trailers.
async fn stream_replay<T: Send + 'static>(
    recorder: &Recorder,
    id: &ConversationId,
    offset: u64,
    message: fn(Piece) -> T,
) -> Result<ReceiverStream<Result<T, Status>>, Status> {
    let mut replay = recorder.replay(id, offset).await?;
    let (tx, rx) = mpsc::channel(REPLAY_BUFFER);
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                next = replay.next() => next,
                // The client went away: stop reading for it.
                () = tx.closed() => return,
            };
            let item = match next {
                Ok(Some(piece)) => Ok(message(piece)),
                Ok(None) => Err(end_status(&replay)),
                Err(err) => Err(Status::from(err)),
            };
            let last = item.is_err();
            if tx.send(item).await.is_err() || last {
                return;
            }
        }
    });
    Ok(ReceiverStream::new(rx))
}

/// The OK status that ends a replay, with its terminal state in trailers.
fn end_status(replay: &Replay) -> Status {
    let mut trailers = MetadataMap::new();
    if let Some(status) = replay.ending() {
        trailers.insert(
            STATUS_TRAILER,
            status.as_str().parse().expect("status names are ASCII"),
        );
    }
    trailers.insert(OFFSET_TRAILER, replay.offset().into());
    Status::with_metadata(Code::Ok, "", trailers)
}
