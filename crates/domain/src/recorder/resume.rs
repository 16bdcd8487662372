//! Resuming: a producer that believes some bytes of its recording are committed takes over the
//! live recording (fencing the producer attached to it), or makes an ended one live again, or
//! finds out why it cannot.
use super::deck::{Deck, fresh};
use super::progress::Status;
use super::tape::{Opening, Tape, TapeWriter};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::{Admission, RecordingMeta};

impl Deck {
    /// Hands conversation `id`'s recording to a producer that believes `resume_from` bytes of
    /// it are committed: takes over the live recording (fencing the producer attached to it),
    /// or makes an `interrupted` or `failed` one live again. With no recording, and
    /// `resume_from` 0, starts a new one kept `retention_ms` once finished.
    ///
    /// Fails with `ResumePastEnd` when `resume_from` is past what is committed,
    /// `AlreadyEnded` for a completed or cancelled recording, `TooManyLiveRecordings`, or a
    /// storage error.
    pub async fn resume(
        &self,
        id: &ConversationId,
        resume_from: u64,
        retention_ms: Option<u64>,
    ) -> Result<TapeWriter> {
        // A recording that ends, or goes live, between the look and the commit sends it round
        // again; it settles at once unless producers keep racing each other.
        for attempt in 0.. {
            if attempt > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(attempt.min(20))).await;
            }
            if attempt == MAX_RESUME_ATTEMPTS {
                break;
            }
            if let Some(tape) = self.live(id.key()) {
                match self.store.attach(tape.clone(), resume_from).await {
                    Ok(resumed) => {
                        tracing::info!(conversation = %id, session = resumed.session, committed = resumed.bytes, "producer resumed");
                        return Ok(TapeWriter::resumed(self.store.clone(), tape, resumed));
                    }
                    Err(Error::RecordingEnded | Error::Superseded) => {
                        self.settled(&tape).await;
                        continue;
                    }
                    Err(err) => return Err(err),
                }
            }
            let registry = self.registry.clone();
            let resuming = id.clone();
            let admitted = self
                .admit(id, retention_ms, None, move |admission| {
                    if registry.lock().contains_key(&resuming.key()) {
                        return Err(Error::RecordingEnded);
                    }
                    let (opening, reopen) = resumption(&resuming, admission, resume_from)?;
                    let (tape, replaced) = registry.admit(resuming, opening)?;
                    Ok((tape, replaced, reopen))
                })
                .await;
            match admitted {
                Ok((tape, reopened)) => {
                    let session = tape.holder().session;
                    let bytes = tape.progress().bytes;
                    if reopened {
                        tracing::info!(conversation = %id, session, committed = bytes, "producer resumed an ended recording");
                    } else {
                        tracing::info!(conversation = %id, generation = tape.generation(), "recording started");
                    }
                    let resumed = crate::store::Resumed {
                        session,
                        chunks: tape.progress().chunks,
                        bytes,
                    };
                    return Ok(TapeWriter::resumed(self.store.clone(), tape, resumed));
                }
                // Someone else made it live meanwhile: take it over from them.
                Err(Error::RecordingEnded) => continue,
                Err(err) => return Err(err),
            }
        }
        Err(Error::ResumeUnsettled { id: id.to_string() })
    }

    /// Waits until `tape`'s end is published (it has left the registry).
    async fn settled(&self, tape: &Tape) {
        let mut progress = tape.subscribe();
        let _ = progress.wait_for(|p| !p.status.is_live()).await;
    }
}

/// Looks a resume goes round before giving up on a recording whose state does not settle.
const MAX_RESUME_ATTEMPTS: u64 = 50;

/// How a resume from `resume_from` opens the conversation's stored recording: reopened when
/// it ended without its producer finishing it, new when there is none (or it was deleted).
///
/// Fails with `ResumePastEnd` or `AlreadyEnded`.
fn resumption(
    id: &ConversationId,
    admission: Admission<'_>,
    resume_from: u64,
) -> Result<(Opening, bool)> {
    let past_end = |committed| Error::ResumePastEnd {
        id: id.to_string(),
        offset: resume_from,
        committed,
    };
    let previous: Option<&RecordingMeta> = admission.previous;
    match previous {
        Some(meta) if meta.status.is_resumable() => {
            if resume_from > meta.byte_len {
                return Err(past_end(meta.byte_len));
            }
            let opening = Opening {
                generation: meta.generation,
                now_ms: admission.now_ms,
                chunks: meta.chunk_count,
                bytes: meta.byte_len,
                attached: true,
                timed_chunks: meta.timed_chunks,
            };
            Ok((opening, true))
        }
        Some(meta) if matches!(meta.status, Status::Completed | Status::Cancelled) => {
            Err(Error::AlreadyEnded {
                id: id.to_string(),
                status: meta.status,
                bytes: meta.byte_len,
            })
        }
        // Live in the file but not in the registry: its end is being recorded; look again.
        Some(meta) if meta.status.is_live() => Err(Error::RecordingEnded),
        _ if resume_from > 0 => Err(past_end(0)),
        _ => {
            let generation = previous.map_or(1, |p| p.generation + 1);
            Ok((fresh(generation, admission.now_ms), false))
        }
    }
}
