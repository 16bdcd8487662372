//! Sealing one ended recording: its expiry marker first (so that even a copy never marked is
//! collected in time), then the object, then a read-back that must match byte for byte.
//! Only then may the store mark it, and the copy be named the newest (`newest`). Every step
//! may be repeated after a crash (the names are the recording's own, so a repeat overwrites
//! with the same bytes).
use bytes::Bytes;

use super::sealed::{self, Header};
use super::{Tier, Version};
use crate::error::{Error, Result};
use crate::store::{RecordingCopy, RecordingMeta};

/// The steps of a seal, in order, for logs and for the crash tests' stopping points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The object is written.
    Uploaded,
    /// It was read back and matched.
    Verified,
    /// The store marked it (the recording's row says it is sealed).
    Marked,
}

impl Step {
    /// Its name, as `TAPEDECK_TEST_SEAL_STOP` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Step::Uploaded => "uploaded",
            Step::Verified => "verified",
            Step::Marked => "marked",
        }
    }
}

/// What a seal wrote.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The copy's name.
    pub version: Version,
    /// The object's size.
    pub bytes: u64,
}

impl Tier {
    /// The version `copy` is sealed as.
    pub fn version_of(copy: &RecordingCopy) -> Result<Version> {
        version_of_ended(&copy.meta)
    }

    /// Writes `copy` of conversation `key` and its expiry marker (the name of its newest copy
    /// taken away first: see `newest`).
    ///
    /// Fails with `ObjectStoreUnavailable`.
    pub async fn upload(&self, key: u128, copy: &RecordingCopy) -> Result<(Upload, Header)> {
        let version = Self::version_of(copy)?;
        let (object, header) = sealed::encode(key, copy)?;
        self.unname_newest(key).await?;
        let expires_ms = expiry_of(copy);
        self.put(&self.keys.expiry(expires_ms, key, version), Bytes::new())
            .await?;
        let bytes = object.len() as u64;
        self.put(&self.keys.recording(key, version), object).await?;
        Ok((Upload { version, bytes }, header))
    }

    /// Whether the copy written by [`upload`](Self::upload) reads back exactly as `header`
    /// says: the header equal, the data's length and CRC-32 right.
    ///
    /// Fails with `ObjectStoreUnavailable`.
    pub async fn verify(&self, key: u128, upload: &Upload, header: &Header) -> Result<bool> {
        let path = self.keys.recording(key, upload.version);
        match self.get(&path).await? {
            Some(object) => sealed::verify(&object, header),
            None => Ok(false),
        }
    }
}

/// The version a recording that ended as `meta` says is sealed as.
pub(super) fn version_of_ended(meta: &RecordingMeta) -> Result<Version> {
    let finished_ms = meta.finished_ms.ok_or_else(|| Error::Corrupt {
        detail: "an ended recording has no end time".into(),
    })?;
    Ok(Version {
        created_ms: meta.created_ms,
        generation: meta.generation,
        finished_ms,
    })
}

/// When a sealed copy is collected: its recording's expiry, or sooner, a stream's own
/// `Stream-Expires-At` or its TTL counted from its last write (a copy cannot slide).
fn expiry_of(copy: &RecordingCopy) -> u64 {
    let retention = copy.meta.expires_at_ms.unwrap_or(u64::MAX);
    let Some(row) = &copy.stream_row else {
        return retention;
    };
    let at = row.expires_at_ms.unwrap_or(u64::MAX);
    let ttl = row.ttl_secs.map_or(u64::MAX, |secs| {
        copy.meta
            .updated_ms
            .saturating_add(secs.saturating_mul(1000))
    });
    retention.min(at).min(ttl)
}
