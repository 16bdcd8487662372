//! `Playback`: a replay from the client's side: messages in order, the byte offset reached (to
//! resume from after a dropped connection), and how the recording ended, from the trailers.
use tonic::{Status, Streaming};

use super::Calls;
use crate::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use crate::pb::{ReplayRequest, ReplayResponse};

/// One message of a replay, as the client receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayMessage {
    /// Its text.
    pub content: String,
    /// The byte offset just after it: replay from here to continue.
    pub offset: u64,
    /// Chunked replays: the recorded chunk's index and commit time (ms since the epoch; 0
    /// when not stored).
    pub chunk: Option<(u64, i64)>,
}

/// An open replay.
#[derive(Debug)]
pub struct Playback {
    first: Option<ReplayResponse>,
    stream: Streaming<ReplayResponse>,
    chunked: bool,
    offset: u64,
    ended_as: Option<String>,
    done: bool,
}

/// What opening a replay found.
pub(super) enum Opened {
    /// The server replays it.
    Here(Box<Playback>),
    /// Another instance holds it, at this address.
    Redirect(String),
}

impl Playback {
    /// Opens the replay and reads its first message, which is a redirect when another
    /// instance holds the recording.
    pub(super) async fn open(
        mut client: ResponseRecorderServiceClient<Calls>,
        id: &[u8],
        from: u64,
        chunked: bool,
    ) -> Result<Opened, Status> {
        let request = ReplayRequest {
            conversation_id: id.to_vec(),
            resume_offset: i64::try_from(from)
                .map_err(|_| Status::invalid_argument("the offset is too large"))?,
            chunked,
        };
        let mut stream = client.replay(request).await?.into_inner();
        let first = stream.message().await?;
        if let Some(first) = &first
            && !first.redirect_address.is_empty()
        {
            return Ok(Opened::Redirect(first.redirect_address.clone()));
        }
        let mut replay = Playback {
            done: first.is_none(),
            first,
            stream,
            chunked,
            offset: from,
            ended_as: None,
        };
        if replay.done {
            replay.read_trailers().await?;
        }
        Ok(Opened::Here(Box::new(replay)))
    }

    /// The next message, or `None` once the recording has ended and everything was read.
    ///
    /// Fails with the status that ended the replay (`UNAVAILABLE` when the server shuts down:
    /// replay again from [`offset`](Self::offset)).
    pub async fn next(&mut self) -> Result<Option<ReplayMessage>, Status> {
        let message = match self.first.take() {
            Some(first) => Some(first),
            None if self.done => None,
            None => self.stream.message().await?,
        };
        let Some(message) = message else {
            self.done = true;
            self.read_trailers().await?;
            return Ok(None);
        };
        self.offset = message.offset as u64;
        Ok(Some(ReplayMessage {
            content: message.content,
            offset: self.offset,
            chunk: self
                .chunked
                .then_some((message.chunk_index, message.committed_at_ms)),
        }))
    }

    /// The byte offset after the last message read.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How the recording ended (`completed`, `cancelled`, …), once the replay has.
    pub fn ended_as(&self) -> Option<&str> {
        self.ended_as.as_deref()
    }

    /// Reads how the recording ended. A recording that is not there replays as an empty
    /// stream whose trailer names why (Memory Service's answer); this client keeps it the
    /// explicit `NOT_FOUND` it was, with the same `tapedeck-reason`.
    async fn read_trailers(&mut self) -> Result<(), Status> {
        let Some(trailers) = self.stream.trailers().await? else {
            return Ok(());
        };
        let text = |name| trailers.get(name).and_then(|v| v.to_str().ok());
        if let Some(reason) = text(crate::grpc::REASON_METADATA) {
            let message = format!("{reason}: no recording of this conversation");
            let mut metadata = tonic::metadata::MetadataMap::new();
            if let Ok(value) = reason.parse() {
                metadata.insert(crate::grpc::REASON_METADATA, value);
            }
            return Err(Status::with_metadata(
                tonic::Code::NotFound,
                message,
                metadata,
            ));
        }
        self.ended_as = text(crate::grpc::STATUS_TRAILER).map(str::to_string);
        Ok(())
    }
}
