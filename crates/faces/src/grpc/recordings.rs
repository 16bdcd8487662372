//! `tapedeck.v1.Recordings`, the management API: Get, List and Delete over the [`Recorder`].
//! Get and Delete of a recording another instance holds are forwarded to it; List lists
//! every instance's (see `all_instances`).
use tonic::{Request, Response, Status};

use super::all_instances::{self, AllInstancesPage};
use super::instances::{OwnerAnswer, forward_delete, forward_get};
use super::{parse_id, principal};
use crate::access::{Guard, Operation};
use crate::error::{Absence, Error};
use crate::id::ConversationId;
use crate::locator::Locator;
use crate::pb::tapedeck::recordings_server::Recordings;
use crate::pb::tapedeck::{
    DeleteRecordingRequest, DeleteRecordingResponse, GetRecordingRequest, ListRecordingsRequest,
    ListRecordingsResponse, Location, Recording, RecordingStatus, Tombstone,
};
use crate::recorder::{Found, Location as Place, Recorder, RecordingInfo, Status as Lifecycle};
use crate::recorder::{Gone, Tombstone as StoredTombstone};

/// The management API over a [`Recorder`].
#[derive(Clone, Debug)]
pub struct RecordingsService {
    recorder: Recorder,
    guard: Guard,
    locator: Option<Locator>,
}

impl RecordingsService {
    /// A service answering from `recorder`, checking calls with `guard`; with a `locator`,
    /// Get and Delete of a recording another instance holds are forwarded there.
    pub fn new(recorder: Recorder, guard: Guard, locator: Option<Locator>) -> Self {
        Self {
            recorder,
            guard,
            locator,
        }
    }
}

#[tonic::async_trait]
impl Recordings for RecordingsService {
    async fn get(
        &self,
        request: Request<GetRecordingRequest>,
    ) -> Result<Response<Recording>, Status> {
        let principal = principal(&self.guard, request.metadata())?;
        let id = parse_id(&request.into_inner().conversation_id)?;
        principal.authorize(Operation::Replay, &id)?;
        let (found, owner) = match forward_get(self.locator.as_ref(), &self.recorder, &id).await {
            OwnerAnswer::NotNeeded => (self.recorder.get(&id).await?, String::new()),
            OwnerAnswer::Answered(found, owner) => (found, owner),
            OwnerAnswer::Unanswered(address) => return Err(unreachable(&id, address)),
        };
        match found {
            // Held elsewhere: where (a producer resumes there).
            Found::Recording(info) => Ok(Response::new(Recording {
                owner_address: owner,
                ..recording(&info)
            })),
            Found::Gone(tombstone) => Ok(Response::new(buried(&tombstone))),
            Found::Unknown => Err(Error::RecordingNotFound {
                id: id.to_string(),
                why: Absence::Unknown,
            }
            .into()),
        }
    }

    async fn list(
        &self,
        request: Request<ListRecordingsRequest>,
    ) -> Result<Response<ListRecordingsResponse>, Status> {
        let principal = principal(&self.guard, request.metadata())?;
        let request = request.into_inner();
        let only = status_filter(request.status)?;
        let token = Some(request.page_token.as_str()).filter(|t| !t.is_empty());
        let page_size = request.page_size as usize;
        let page = match &self.locator {
            Some(locator) => {
                all_instances::list(locator, &self.recorder, token, page_size, only).await?
            }
            None => {
                let listing = self.recorder.list(token, page_size, only).await?;
                AllInstancesPage {
                    rows: (listing.recordings.into_iter())
                        .map(|info| (info, String::new()))
                        .collect(),
                    next_page_token: listing.next_page_token,
                    unanswered: Vec::new(),
                }
            }
        };
        // Each caller sees the recordings it may read; a page may come back shorter for it.
        let recordings = page
            .rows
            .iter()
            .filter(|(info, _)| {
                ConversationId::parse(&info.meta.original_id)
                    .is_ok_and(|id| principal.may(Operation::Replay, &id))
            })
            .map(|(info, owner)| Recording {
                owner_address: owner.clone(),
                ..recording(info)
            })
            .collect();
        Ok(Response::new(ListRecordingsResponse {
            recordings,
            next_page_token: page.next_page_token.unwrap_or_default(),
            unanswered_instances: page.unanswered,
        }))
    }

    async fn delete(
        &self,
        request: Request<DeleteRecordingRequest>,
    ) -> Result<Response<DeleteRecordingResponse>, Status> {
        let principal = principal(&self.guard, request.metadata())?;
        let id = parse_id(&request.into_inner().conversation_id)?;
        principal.authorize(Operation::Delete, &id)?;
        let existed = match forward_delete(self.locator.as_ref(), &self.recorder, &id).await {
            OwnerAnswer::NotNeeded => self.recorder.delete(&id).await?,
            OwnerAnswer::Answered(existed, _) => existed,
            // It may or may not have been deleted: never "nothing to delete".
            OwnerAnswer::Unanswered(address) => return Err(unreachable(&id, address)),
        };
        Ok(Response::new(DeleteRecordingResponse { existed }))
    }
}

fn unreachable(id: &ConversationId, address: String) -> Status {
    Error::OwnerUnreachable {
        id: id.to_string(),
        address,
    }
    .into()
}

fn recording(info: &RecordingInfo) -> Recording {
    let meta = &info.meta;
    Recording {
        conversation_id: meta.original_id.clone(),
        status: wire_status(meta.status) as i32,
        created_at_ms: meta.created_ms as i64,
        updated_at_ms: meta.updated_ms as i64,
        finished_at_ms: meta.finished_ms.unwrap_or(0) as i64,
        chunk_count: meta.chunk_count,
        byte_length: meta.byte_len,
        end_message: info.end_message.clone().unwrap_or_default(),
        expires_at_ms: meta.expires_at_ms.unwrap_or(0) as i64,
        live_readers: u32::try_from(info.readers).unwrap_or(u32::MAX),
        producer_attached: info.producer_attached,
        tombstone: None,
        owner_address: String::new(),
        location: match info.location {
            Place::Local => Location::Local,
            Place::LocalAndObjectStore => Location::LocalAndObjectStore,
            Place::ObjectStore => Location::ObjectStore,
        } as i32,
    }
}

fn buried(tombstone: &StoredTombstone) -> Recording {
    let status = match tombstone.gone {
        Gone::Expired => RecordingStatus::Expired,
        Gone::Deleted => RecordingStatus::Deleted,
    };
    Recording {
        conversation_id: tombstone.original_id.clone(),
        status: status as i32,
        created_at_ms: tombstone.created_ms as i64,
        updated_at_ms: tombstone.collected_ms as i64,
        finished_at_ms: tombstone.finished_ms.unwrap_or(0) as i64,
        chunk_count: tombstone.chunk_count,
        byte_length: tombstone.byte_len,
        end_message: String::new(),
        expires_at_ms: 0,
        live_readers: 0,
        producer_attached: false,
        tombstone: Some(Tombstone {
            final_status: wire_status(tombstone.status) as i32,
            collected_at_ms: tombstone.collected_ms as i64,
            forgotten_at_ms: tombstone.forgotten_at_ms as i64,
        }),
        location: Location::Unspecified as i32,
        owner_address: String::new(),
    }
}

fn wire_status(status: Lifecycle) -> RecordingStatus {
    match status {
        Lifecycle::Recording => RecordingStatus::Recording,
        Lifecycle::Completed => RecordingStatus::Completed,
        Lifecycle::Cancelled => RecordingStatus::Cancelled,
        Lifecycle::Interrupted => RecordingStatus::Interrupted,
        Lifecycle::Failed => RecordingStatus::Failed,
        // Never stored: a superseded recording is deleted in the commit that replaces it.
        Lifecycle::Superseded | Lifecycle::Deleted => RecordingStatus::Deleted,
    }
}

/// The status a List asks for; `None` for all.
///
/// Fails with `BadStatusFilter` for a value that is no status, or one never stored.
fn status_filter(value: i32) -> Result<Option<Lifecycle>, Status> {
    let bad = || Status::from(Error::BadStatusFilter { value });
    match RecordingStatus::try_from(value).map_err(|_| bad())? {
        RecordingStatus::Unspecified => Ok(None),
        RecordingStatus::Recording => Ok(Some(Lifecycle::Recording)),
        RecordingStatus::Completed => Ok(Some(Lifecycle::Completed)),
        RecordingStatus::Cancelled => Ok(Some(Lifecycle::Cancelled)),
        RecordingStatus::Interrupted => Ok(Some(Lifecycle::Interrupted)),
        RecordingStatus::Failed => Ok(Some(Lifecycle::Failed)),
        RecordingStatus::Deleted => Ok(Some(Lifecycle::Deleted)),
        // Expired recordings are tombstones, which List does not walk.
        RecordingStatus::Expired => Err(bad()),
    }
}
