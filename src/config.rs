//! `Config`: every setting of a tapedeck server, assembled from each layer's own settings, with
//! defaults that work out of the box. It owns none of them.
use std::path::PathBuf;

pub use crate::access::AccessConfig;
pub use crate::cluster::ClusterConfig;
pub use crate::http::HttpSettings;
pub use crate::locator::LocatorConfig;
pub use crate::recorder::{OnConflict, RecorderSettings};
pub use crate::serving::ServerSettings;
pub use crate::store::StoreSettings;
pub use crate::tier::TierSettings;
pub use crate::tls::TlsFiles;

/// Settings of a tapedeck server, a group per layer. `Config::default()` is what
/// `tapedeck serve` runs with.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The server's own: addresses, data directory, TLS, shutdown.
    pub server: ServerSettings,
    /// The store's: retention, tombstones, checkpoints, cache, commit pacing.
    pub store: StoreSettings,
    /// The recorder's: producers' limits, the live registry's policy, the sweeper.
    pub recorder: RecorderSettings,
    /// The HTTP face's: its bounds and its path prefix.
    pub http: HttpSettings,
    /// API keys and grant keys; nothing configured (the default) turns access control off.
    pub access: AccessConfig,
    /// Run as one of several instances, located through Redis. Default off (one instance).
    pub locator: Option<LocatorConfig>,
    /// Seal ended recordings into an object store. Default off.
    pub tier: Option<TierSettings>,
    /// Run as one node of a replicated cluster. Default off (a single node).
    pub cluster: Option<ClusterConfig>,
}

impl Config {
    /// Path of the database file inside the data directory.
    pub fn database_path(&self) -> PathBuf {
        self.server.database_path()
    }
}
