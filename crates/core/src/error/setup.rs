//! [`Setup`]: why a server cannot be set up, or cannot go on: a setting (API keys, JWT keys,
//! the object store, TLS files, the Redis locator), a port, the gRPC services, the cluster's
//! log and network. Each message names the flag or variable to change where one caused it.
use std::net::SocketAddr;

/// Why a server cannot be set up, or cannot go on; all internal to a client.
#[derive(Debug, thiserror::Error)]
pub enum Setup {
    /// An API key setting that is not `name=secret`.
    #[error("bad API key setting: {reason}")]
    BadApiKey {
        /// What is wrong; never the secret.
        reason: String,
    },
    /// A JWT key that cannot be used.
    #[error("bad JWT key: {reason}")]
    BadJwtKey {
        /// What is wrong.
        reason: String,
    },
    /// The locator cannot be set up (a bad `--redis-url`, an unreadable instance id file).
    #[error("cannot set up the Redis locator: {reason}")]
    Locator {
        /// What is wrong.
        reason: String,
    },
    /// `--object-store` cannot be used.
    #[error("cannot use --object-store (TAPEDECK_OBJECT_STORE): {reason}")]
    ObjectStoreSetting {
        /// What is wrong, and what to do.
        reason: String,
    },
    /// The TLS settings cannot be used.
    #[error("cannot set up TLS: {reason}")]
    Tls {
        /// What is wrong.
        reason: String,
    },
    /// This node's cluster cannot run: its log cannot be opened or written, or its network
    /// cannot be set up.
    #[error("the cluster cannot run: {reason}")]
    Cluster {
        /// What failed.
        reason: String,
    },
    /// The listening socket failed.
    #[error("the listener on {addr} failed: {source}")]
    Listener {
        /// The address it listens on, if known.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A port could not be bound. The message names the setting of that address, flag and
    /// variable, since a server has several (gRPC, the HTTP face, metrics).
    #[error(
        "cannot listen on {addr} ({what}): {source}; is another process using it? choose \
         another address with {flag} (or {env})"
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What was to listen there: "gRPC", "the HTTP face", "metrics".
        what: &'static str,
        /// The flag that sets the address, e.g. `--http-listen`.
        flag: &'static str,
        /// The environment variable that sets it, e.g. `TAPEDECK_HTTP_LISTEN`.
        env: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC reflection service could not be built.
    #[error("cannot build the gRPC reflection service: {0}")]
    Reflection(#[source] tonic_reflection::server::Error),
    /// The gRPC server stopped with an error.
    #[error("the gRPC server failed: {0}")]
    Serve(#[source] tonic::transport::Error),
}
