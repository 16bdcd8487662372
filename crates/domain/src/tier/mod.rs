//! The object-store tier: ended recordings sealed into an object store (any S3-compatible
//! store, or a local directory), so that they outlive the disk and the instance that recorded
//! them, and are read from there by any instance.
//!
//! # Layout
//! - `keys`: the object names (no raw id ever reaches one); `sealed`: a sealed recording's
//!   object (header, then bytes).
//! - `seal`: upload, then read back and verify. The recorder's sealer (`recorder/sealer.rs`)
//!   drives it for every ended recording and has the store mark what was verified.
//! - `remote`: finding and reading a sealed recording (range reads), by the name `newest` keeps
//!   for its newest copy when there is one; `listing`: pages of the
//!   conversations it holds, in key order; `collect`: delete, and
//!   the expiry of copies whose recorder may be gone (any instance collects; racing
//!   collectors are harmless).
mod collect;
mod keys;
mod listing;
mod newest;
mod remote;
mod seal;
pub mod sealed;

use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{ClientConfigKey, ObjectMeta, ObjectStore, PutPayload, RetryConfig};

pub use collect::Collected;
pub use keys::{Keys, Version};
pub use remote::{Remote, Sealed};
pub use seal::{Step, Upload};

/// The object-store tier's settings.
#[derive(Debug, Clone)]
pub struct TierSettings {
    /// The object store ended recordings are sealed into, and read from when they are not
    /// local: `s3://BUCKET/PREFIX` or `file:///PATH` (`--object-store`).
    pub url: String,
    /// How long a sealed recording's chunks stay on local disk; `None` (the default) keeps
    /// them for the recording's whole retention (`--local-retention`).
    pub local_retention: Option<std::time::Duration>,
}

use crate::error::{Error, Result};

/// An object store holding sealed recordings under one prefix. Cheap to clone.
#[derive(Clone)]
pub struct Tier {
    objects: Arc<dyn ObjectStore>,
    keys: Keys,
    /// The store as configured, for logs: the URL without credentials (they come only from
    /// the environment).
    describe: Arc<str>,
    /// How long a tombstone left here answers "deleted" or "expired".
    tombstone_ms: u64,
}

impl std::fmt::Debug for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tier")
            .field("store", &self.describe)
            .finish_non_exhaustive()
    }
}

impl Tier {
    /// Checks `url` as [`open`](Self::open) reads it, without opening anything: the command
    /// line refuses a bad one before the data dir is touched.
    ///
    /// Fails with `ObjectStoreSetting` naming what is wrong.
    pub fn check_url(url: &str) -> Result<()> {
        Target::parse(url).map(drop)
    }

    /// Checks that an `s3://` store at `url` has credentials to sign with: an access key
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), a web identity's or a container role's
    /// variables, or unsigned requests (`AWS_SKIP_SIGNATURE=true`); or that the machine's
    /// instance role may be asked (`instance_credentials`). Without any of them, the S3 client
    /// asks the cloud's metadata address (169.254.169.254), which off a cloud machine only
    /// times out, request after request.
    ///
    /// Fails with `ObjectStoreSetting` saying what to set (never a value).
    pub fn check_credentials(url: &str, instance_credentials: bool) -> Result<()> {
        let (Target::S3 { .. }, _) = Target::parse(url)? else {
            return Ok(());
        };
        let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
        let signed = set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY");
        let role = set("AWS_WEB_IDENTITY_TOKEN_FILE")
            || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
            || set("AWS_CONTAINER_CREDENTIALS_FULL_URI");
        let unsigned = std::env::var("AWS_SKIP_SIGNATURE").is_ok_and(|v| v == "true");
        if signed || role || unsigned || instance_credentials {
            return Ok(());
        }
        Err(Error::Setup(crate::error::Setup::ObjectStoreSetting {
            reason: "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
                     run with a web identity or container role, or pass \
                     --object-store-instance-credentials \
                     (TAPEDECK_OBJECT_STORE_INSTANCE_CREDENTIALS) to ask this machine's \
                     instance metadata service"
                .into(),
        }))
    }

    /// The tier at `url`: `s3://BUCKET/PREFIX` (credentials, region and endpoint from the
    /// standard `AWS_*` variables) or `file:///PATH`.
    ///
    /// Fails with `ObjectStoreSetting` naming what is wrong (never a credential).
    pub fn open(url: &str) -> Result<Tier> {
        let bad = |reason: String| Error::Setup(crate::error::Setup::ObjectStoreSetting { reason });
        let (target, prefix) = Target::parse(url)?;
        let objects: Arc<dyn ObjectStore> = match target {
            Target::S3 { bucket } => {
                // Set key by key: `with_client_options` would drop what the environment set
                // (AWS_ALLOW_HTTP among it).
                let timeout =
                    |key, value: &str| (AmazonS3ConfigKey::Client(key), value.to_string());
                let timeouts = [
                    timeout(ClientConfigKey::ConnectTimeout, "2s"),
                    timeout(ClientConfigKey::Timeout, "30s"),
                ];
                let store = timeouts
                    .into_iter()
                    .fold(AmazonS3Builder::from_env(), |builder, (key, value)| {
                        builder.with_config(key, value)
                    })
                    .with_bucket_name(bucket)
                    .with_retry(retry())
                    .build()
                    .map_err(|err| bad(format!("the S3 settings are unusable: {err}")))?;
                Arc::new(store)
            }
            Target::File { path } => {
                std::fs::create_dir_all(path)
                    .map_err(|err| bad(format!("cannot create {path}: {err}")))?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(path)
                    .map_err(|err| bad(format!("cannot use {path}: {err}")))?;
                Arc::new(store)
            }
        };
        Ok(Tier {
            objects,
            keys: Keys::new(prefix),
            describe: url.into(),
            tombstone_ms: 24 * 60 * 60 * 1000,
        })
    }

    /// This tier, keeping the tombstones it leaves for `keep` (`--tombstone-retention`).
    pub fn with_tombstone_retention(mut self, keep: Duration) -> Self {
        self.tombstone_ms = keep.as_millis() as u64;
        self
    }

    /// Whether listings come in name order (S3 does; a local directory does not).
    fn lists_in_order(&self) -> bool {
        self.describe.starts_with("s3://")
    }

    /// The configured URL (it holds no credential).
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// The object names.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    async fn put(&self, path: &Path, bytes: bytes::Bytes) -> Result<()> {
        self.objects
            .put(path, PutPayload::from_bytes(bytes))
            .await
            .map(drop)
            .map_err(unavailable)
    }

    /// The object at `path`, or `None` if there is none.
    async fn get(&self, path: &Path) -> Result<Option<bytes::Bytes>> {
        match self.objects.get(path).await {
            Ok(got) => got.bytes().await.map(Some).map_err(unavailable),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(unavailable(err)),
        }
    }

    async fn get_range(&self, path: &Path, range: std::ops::Range<u64>) -> Result<bytes::Bytes> {
        self.objects
            .get_range(path, range)
            .await
            .map_err(unavailable)
    }

    /// Deletes `path`; one that is already gone is no failure (collectors race).
    async fn delete(&self, path: &Path) -> Result<()> {
        match self.objects.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(unavailable(err)),
        }
    }

    /// Every object under `prefix`, in name order.
    async fn list(&self, prefix: &Path) -> Result<Vec<ObjectMeta>> {
        let mut listed: Vec<ObjectMeta> = self
            .objects
            .list(Some(prefix))
            .try_collect()
            .await
            .map_err(unavailable)?;
        // S3 lists in name order; a local directory does not.
        listed.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(listed)
    }
}

/// What an `--object-store` URL names.
enum Target<'a> {
    /// An S3 bucket (the rest of the URL is the prefix).
    S3 { bucket: &'a str },
    /// A local directory (the prefix is empty).
    File { path: &'a str },
}

impl Target<'_> {
    /// `url`'s target and the prefix of every object name under it.
    fn parse(url: &str) -> Result<(Target<'_>, Path)> {
        let bad = |reason: String| Error::Setup(crate::error::Setup::ObjectStoreSetting { reason });
        let (target, prefix) = if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad(format!(
                    "{url:?} names no bucket; use s3://BUCKET/PREFIX"
                )));
            }
            (Target::S3 { bucket }, prefix)
        } else if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad(format!("{url:?} is not absolute; use file:///PATH")));
            }
            (Target::File { path }, "")
        } else {
            return Err(bad(format!(
                "{url:?} is neither s3://BUCKET/PREFIX nor file:///PATH"
            )));
        };
        let prefix = Path::parse(prefix.trim_matches('/'))
            .map_err(|err| bad(format!("the prefix in {url:?} is not a valid key: {err}")))?;
        Ok((target, prefix))
    }
}

/// Few retries: a read of what only the store holds answers UNAVAILABLE promptly (connections
/// time out after 2 s), and the sealer retries on its own schedule.
fn retry() -> RetryConfig {
    RetryConfig {
        max_retries: 2,
        retry_timeout: Duration::from_secs(5),
        ..RetryConfig::default()
    }
}

fn unavailable(err: object_store::Error) -> Error {
    Error::ObjectStoreUnavailable {
        detail: err.to_string(),
    }
}
