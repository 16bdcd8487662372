//! Idempotent producers (`Producer-Id` / `-Epoch` / `-Seq`): the protocol's judgement of one
//! request against the producer's stored state. Pure: the caller holds the stream's lock, so
//! judgement and append are serialized per stream, and commits the new state with the data.
use crate::store::{ProducerStamp, ProducerState};

/// Largest epoch or sequence number: 2^53 - 1, for JavaScript clients.
pub const MAX_PRODUCER_NUMBER: u64 = (1 << 53) - 1;

/// What to do with a producer's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// New data: append it, then store `next` as the producer's state.
    Accept { next: ProducerState },
    /// Already appended: answer 204 without appending.
    Duplicate,
    /// An older epoch than the producer's current one: 403 with the current epoch.
    StaleEpoch { current: u64 },
    /// A new epoch must start at sequence 0: 400.
    EpochMustStartAtZero,
    /// A sequence number was skipped: 409 with what was expected.
    Gap { expected: u64, received: u64 },
}

/// Judges request `stamp` against the producer's state (`None` for a producer never seen).
pub(crate) fn judge(state: Option<ProducerState>, stamp: &ProducerStamp) -> Verdict {
    let (epoch, seq) = (stamp.epoch, stamp.seq);
    let Some(state) = state else {
        return match seq {
            0 => Verdict::Accept {
                next: ProducerState { epoch, seq },
            },
            _ => Verdict::Gap {
                expected: 0,
                received: seq,
            },
        };
    };
    if epoch < state.epoch {
        return Verdict::StaleEpoch {
            current: state.epoch,
        };
    }
    if epoch > state.epoch {
        return match seq {
            0 => Verdict::Accept {
                next: ProducerState { epoch, seq },
            },
            _ => Verdict::EpochMustStartAtZero,
        };
    }
    if seq <= state.seq {
        Verdict::Duplicate
    } else if seq == state.seq + 1 {
        Verdict::Accept {
            next: ProducerState { epoch, seq },
        }
    } else {
        Verdict::Gap {
            expected: state.seq + 1,
            received: seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(epoch: u64, seq: u64) -> ProducerStamp {
        ProducerStamp {
            id: "p".into(),
            epoch,
            seq,
        }
    }

    fn state(epoch: u64, seq: u64) -> Option<ProducerState> {
        Some(ProducerState { epoch, seq })
    }

    #[test]
    fn sequences_within_an_epoch() {
        assert!(matches!(judge(None, &stamp(0, 0)), Verdict::Accept { .. }));
        assert!(matches!(
            judge(state(0, 0), &stamp(0, 1)),
            Verdict::Accept { .. }
        ));
        assert_eq!(judge(state(0, 3), &stamp(0, 3)), Verdict::Duplicate);
        assert_eq!(judge(state(0, 3), &stamp(0, 1)), Verdict::Duplicate);
        assert_eq!(
            judge(state(0, 3), &stamp(0, 5)),
            Verdict::Gap {
                expected: 4,
                received: 5
            }
        );
    }

    #[test]
    fn epochs_fence_and_restart_at_zero() {
        assert_eq!(
            judge(state(2, 0), &stamp(1, 0)),
            Verdict::StaleEpoch { current: 2 }
        );
        assert_eq!(
            judge(state(2, 7), &stamp(3, 1)),
            Verdict::EpochMustStartAtZero
        );
        assert_eq!(
            judge(state(2, 7), &stamp(3, 0)),
            Verdict::Accept {
                next: ProducerState { epoch: 3, seq: 0 }
            }
        );
    }
}
