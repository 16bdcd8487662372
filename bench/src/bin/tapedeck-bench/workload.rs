//! What to run: the live workload (producers, rate, token size, recording length, subscribers,
//! duration), the replay workload, the three standard scenarios, and the token format that
//! carries each token's send time and sequence number to its readers.
use std::time::Duration;

use serde::Serialize;

/// Smallest token: 16 hex digits of send time plus 8 of sequence number.
pub(crate) const MIN_TOKEN_BYTES: usize = 24;

/// A live workload: producers record tokens while subscribers follow each recording.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LiveWorkload {
    /// Concurrent producers, each recording one response after another.
    pub producers: usize,
    /// Tokens per second per producer (open loop); `None` sends each token as soon as the
    /// previous one was accepted (closed loop).
    pub rate: Option<f64>,
    /// Size of every token, in bytes (at least [`MIN_TOKEN_BYTES`]).
    pub token_bytes: usize,
    /// Tokens in one recording before the producer completes it and starts the next.
    pub tokens_per_recording: usize,
    /// Live subscribers following each recording from its start.
    pub subscribers: usize,
    /// How long producers keep starting and feeding recordings.
    #[serde(serialize_with = "seconds")]
    pub duration: Duration,
    /// Client connections the producers (and, where the protocol allows, subscribers) share.
    pub connections: usize,
}

/// A catch-up workload: completed recordings loaded first, then read back whole.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReplayWorkload {
    /// Completed recordings to load and replay.
    pub recordings: usize,
    /// Tokens in each recording.
    pub tokens_per_recording: usize,
    /// Size of every token, in bytes.
    pub token_bytes: usize,
    /// Recordings loaded at once (each by its own producer, closed loop).
    pub load_concurrency: usize,
    /// Recordings replayed at once.
    pub replay_concurrency: usize,
    /// Client connections shared by loaders and readers.
    pub connections: usize,
}

/// One scenario of a run.
#[derive(Debug, Clone)]
pub(crate) enum Scenario {
    Live {
        name: String,
        workload: LiveWorkload,
    },
    Replay {
        name: String,
        workload: ReplayWorkload,
    },
}

impl Scenario {
    pub(crate) fn name(&self) -> &str {
        match self {
            Scenario::Live { name, .. } | Scenario::Replay { name, .. } => name,
        }
    }
}

/// Token size of the standard scenarios: a streamed text delta with its framing.
pub(crate) const STANDARD_TOKEN_BYTES: usize = 32;
/// Tokens per recording in (a) and (b): a typical LLM answer.
pub(crate) const STANDARD_TOKENS_PER_RECORDING: usize = 500;
/// Client connections in the standard scenarios.
pub(crate) const STANDARD_CONNECTIONS: usize = 32;

/// (a) 200 producers × 50 tokens/s, one live subscriber each, 30 s.
pub(crate) fn standard_live() -> LiveWorkload {
    LiveWorkload {
        producers: 200,
        rate: Some(50.0),
        token_bytes: STANDARD_TOKEN_BYTES,
        tokens_per_recording: STANDARD_TOKENS_PER_RECORDING,
        subscribers: 1,
        duration: Duration::from_secs(30),
        connections: STANDARD_CONNECTIONS,
    }
}

/// (b) 1,000 producers, closed loop, no subscribers, 30 s.
pub(crate) fn standard_closed() -> LiveWorkload {
    LiveWorkload {
        producers: 1000,
        rate: None,
        subscribers: 0,
        ..standard_live()
    }
}

/// (c) 1,000 completed recordings of 2,000 tokens, replayed whole.
pub(crate) fn standard_replay() -> ReplayWorkload {
    ReplayWorkload {
        recordings: 1000,
        tokens_per_recording: 2000,
        token_bytes: STANDARD_TOKEN_BYTES,
        load_concurrency: 100,
        replay_concurrency: 16,
        connections: STANDARD_CONNECTIONS,
    }
}

/// A token sent at `sent_ns` (since the run's clock started) with sequence number `seq` in its
/// recording, padded to `bytes`. ASCII only, so every byte is a character boundary.
pub(crate) fn encode_token(sent_ns: u64, seq: u32, bytes: usize) -> String {
    let mut token = format!("{sent_ns:016x}{seq:08x}");
    token.extend(std::iter::repeat_n('.', bytes.saturating_sub(token.len())));
    token
}

/// The send time and sequence number at the head of a token.
pub(crate) fn decode_token(token: &[u8]) -> Option<(u64, u32)> {
    let text = std::str::from_utf8(token.get(..MIN_TOKEN_BYTES)?).ok()?;
    let sent = u64::from_str_radix(&text[..16], 16).ok()?;
    let seq = u32::from_str_radix(&text[16..], 16).ok()?;
    Some((sent, seq))
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trips() {
        let token = encode_token(123_456_789, 42, 32);
        assert_eq!(token.len(), 32);
        assert_eq!(decode_token(token.as_bytes()), Some((123_456_789, 42)));
    }
}
