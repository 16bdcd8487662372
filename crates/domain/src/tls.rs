//! TLS settings from PEM files: the files a server's identity is read from, and the tonic
//! configuration they make, shared by the gRPC port and the cluster port.
use std::path::PathBuf;

use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::error::{Error, Result};

/// PEM files of the server's TLS identity, and optionally of the CA its clients' certificates
/// must chain to (mutual TLS).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
    /// CA of client certificates; when set, clients must present one.
    pub client_ca: Option<PathBuf>,
}

/// The TLS settings `files` name, read now.
///
/// Fails with `Tls` when a file cannot be read.
pub fn server_config(files: &TlsFiles) -> Result<ServerTlsConfig> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|err| {
            Error::Setup(crate::error::Setup::Tls {
                reason: format!("cannot read {}: {err}", path.display()),
            })
        })
    };
    let identity = Identity::from_pem(read(&files.cert)?, read(&files.key)?);
    let mut tls = ServerTlsConfig::new().identity(identity);
    if let Some(ca) = &files.client_ca {
        tls = tls.client_ca_root(Certificate::from_pem(read(ca)?));
    }
    Ok(tls)
}

/// A TLS failure of tonic's, as tapedeck's error.
pub fn error(err: &dyn std::error::Error) -> Error {
    Error::Setup(crate::error::Setup::Tls {
        reason: err.to_string(),
    })
}
