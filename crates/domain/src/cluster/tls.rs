//! TLS between nodes: with `--tls-cert`, a node serves its cluster port with the same identity
//! as gRPC, and dials the others presenting it; it trusts the peers' certificates when the CA
//! of `--tls-client-ca` signed them (or, without one, when they are its own certificate).
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use crate::error::{Error, Result};
use crate::tls::TlsFiles;

/// The cluster port's TLS, if gRPC has TLS.
///
/// Fails when the files cannot be read.
pub(super) fn server(files: Option<&TlsFiles>) -> Result<Option<ServerTlsConfig>> {
    files.map(crate::tls::server_config).transpose()
}

/// The TLS this node dials the others with, if gRPC has TLS.
///
/// Fails when the files cannot be read.
pub(super) fn client(files: Option<&TlsFiles>) -> Result<Option<ClientTlsConfig>> {
    let Some(files) = files else {
        return Ok(None);
    };
    let cert = read(&files.cert)?;
    let key = read(&files.key)?;
    let trusted = match &files.client_ca {
        Some(ca) => read(ca)?,
        None => cert.clone(),
    };
    Ok(Some(
        ClientTlsConfig::new()
            .identity(Identity::from_pem(cert, key))
            .ca_certificate(Certificate::from_pem(trusted)),
    ))
}

fn read(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|err| {
        Error::Setup(crate::error::Setup::Tls {
            reason: format!("cannot read {}: {err}", path.display()),
        })
    })
}
