//! `tapedeck serve`'s flags checked together and turned into a [`Config`]: everything that
//! can be refused is refused here, before anything is bound or opened.
use std::net::SocketAddr;

use tapedeck::Config;
use tapedeck::access::{AccessConfig, ApiKey, Secret};
use tapedeck::config::{
    HttpSettings, LocatorConfig, OnConflict, RecorderSettings, ServerSettings, StoreSettings,
    TierSettings, TlsFiles,
};

use super::serve::{Conflict, LogFormat, ServeArgs};

/// What `tapedeck serve` runs with.
pub(crate) struct Settings {
    /// The server's settings.
    pub(crate) config: Config,
    /// Where to serve Prometheus metrics, if anywhere.
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// How to write logs.
    pub(crate) log_format: LogFormat,
}

impl ServeArgs {
    /// The settings these flags ask for.
    ///
    /// Fails with one line naming the flag and its variable when a credential is malformed,
    /// a public address has no access control, the locator's flags do not go together, the
    /// object store's URL is malformed, or the retention is longer than the longest allowed.
    pub(crate) fn settings(self) -> Result<Settings, String> {
        let access = access_config(&self).map_err(|err| err.to_string())?;
        let exposed = std::iter::once(self.listen)
            .chain(self.http_listen.0)
            .find(|addr| !addr.ip().is_loopback());
        if let Some(addr) = exposed
            && !access.is_enabled()
            && !self.allow_unauthenticated
        {
            return Err(format!(
                "refusing to serve {addr} without access control: anyone who can reach it could \
                 read and cancel every recording; configure --api-key, --jwt-secret or \
                 --jwt-public-key, or pass --allow-unauthenticated"
            ));
        }
        check_locator_flags(&self)?;
        if let Some(url) = &self.object_store {
            tapedeck::tier::Tier::check_url(url).map_err(|err| err.to_string())?;
            let instance = self.object_store_instance_credentials;
            tapedeck::tier::Tier::check_credentials(url, instance).map_err(|e| e.to_string())?;
        }
        let cluster = match (self.node_id, self.cluster_listen, &self.cluster_peers) {
            (Some(node_id), Some(listen), Some(peers)) => {
                let mut config = tapedeck::cluster::ClusterConfig::new(node_id, listen, peers)?;
                if let Some(every) = self.cluster_snapshot_every {
                    config.snapshot_every = every;
                }
                Some(config)
            }
            _ => None,
        };
        if self.retention > self.max_retention {
            return Err(format!(
                "--retention {} is longer than --max-retention {}; raise --max-retention",
                self.retention, self.max_retention
            ));
        }
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
            }),
            _ => None,
        };
        let config = Config {
            server: ServerSettings {
                listen: self.listen,
                http_listen: self.http_listen.0,
                data_dir: self.data_dir,
                shutdown_timeout: self.shutdown_timeout.into(),
                tls,
            },
            store: StoreSettings {
                retention: self.retention.into(),
                tombstone_retention: self.tombstone_retention.into(),
                checkpoint_bytes: self.checkpoint_size.0,
                cache_bytes: self.cache_size.0,
                commit_interval: self.commit_interval.into(),
            },
            recorder: RecorderSettings {
                max_retention: self.max_retention.into(),
                producer_grace: self.producer_grace.into(),
                on_conflict: match self.on_conflict {
                    Conflict::Supersede => OnConflict::Supersede,
                    Conflict::Reject => OnConflict::Reject,
                },
                gc_interval: self.gc_interval.into(),
                idle_timeout: self.idle_timeout.into(),
                max_chunk_bytes: usize::try_from(self.max_chunk_bytes.0).unwrap_or(usize::MAX),
                max_recording_bytes: self.max_recording_bytes.0,
                max_live_recordings: self.max_live_recordings as usize,
            },
            http: HttpSettings {
                bounds: tapedeck::http::Bounds {
                    request_timeout: self.http_request_timeout.into(),
                    max_connections: self.http_max_connections as usize,
                },
                path_prefix: self.http_path_prefix,
            },
            access,
            locator: self.redis_url.zip(self.advertised_address).map(
                |(redis_url, advertised_address)| LocatorConfig {
                    redis_url,
                    advertised_address,
                    advertised_http_address: self.advertised_http_address,
                },
            ),
            tier: self.object_store.map(|url| TierSettings {
                url,
                local_retention: self.local_retention.map(Into::into),
            }),
            cluster,
        };
        Ok(Settings {
            config,
            metrics_listen: self.metrics_listen,
            log_format: self.log_format,
        })
    }
}

/// The locator's flags come together. The URL is checked here rather than by clap, whose
/// errors repeat the value: a URL may hold a password.
fn check_locator_flags(args: &ServeArgs) -> Result<(), String> {
    let refused = |reason: &str| Err(reason.to_string());
    match (&args.redis_url, &args.advertised_address) {
        (Some(_), None) => refused(
            "--redis-url needs --advertised-address, the host:port other \
             instances send clients to",
        ),
        (None, Some(_)) => refused(
            "--advertised-address is used only with --redis-url, which \
             turns the locator on",
        ),
        (Some(url), Some(_))
            if redis::IntoConnectionInfo::into_connection_info(url.as_str()).is_err() =>
        {
            refused("--redis-url is not a Redis URL; use redis://[user:password@]host:port[/db]")
        }
        _ => Ok(()),
    }
}

/// The access settings of `args`. API keys are parsed here rather than by clap, whose error
/// would repeat the text given, secret included.
/// Every credential is checked here, before anything is opened: one that is set but empty
/// (an unset variable in a compose file) must not turn access control on and let anyone in.
fn access_config(args: &ServeArgs) -> tapedeck::Result<AccessConfig> {
    let mut api_keys = args
        .api_keys
        .iter()
        .map(|text| {
            ApiKey::parse(text).map_err(|err| name_setting(err, "--api-key (TAPEDECK_API_KEYS)"))
        })
        .collect::<tapedeck::Result<Vec<_>>>()?;
    if let Some(file) = &args.api_keys_file {
        let setting = "--api-keys-file (TAPEDECK_API_KEYS_FILE)";
        if file.as_os_str().is_empty() {
            return Err(tapedeck::Error::Setup(tapedeck::error::Setup::BadApiKey {
                reason: format!("{setting} is empty: name a file of API keys, or leave it unset"),
            }));
        }
        api_keys.extend(ApiKey::read_file(file).map_err(|err| name_setting(err, setting))?);
    }
    let config = AccessConfig {
        api_keys,
        jwt_secret: args.jwt_secret.clone().map(Secret::new),
        jwt_public_key: args.jwt_public_key.clone(),
        jwt_issuer: args.jwt_issuer.clone(),
        jwt_audience: args.jwt_audience.clone(),
    };
    config.check()?;
    Ok(config)
}

/// `err`, an API key refusal, with the setting it came from in front of its reason.
fn name_setting(err: tapedeck::Error, setting: &str) -> tapedeck::Error {
    match err {
        tapedeck::Error::Setup(tapedeck::error::Setup::BadApiKey { reason }) => {
            tapedeck::Error::Setup(tapedeck::error::Setup::BadApiKey {
                reason: format!("{setting}: {reason}"),
            })
        }
        other => other,
    }
}
