//! The one mapping of tapedeck's errors to gRPC statuses: each [`Kind`] to its [`Code`], the
//! client's message, and the metadata some answers carry (a not-found's reason, a redirect's
//! address). It lives beside [`Error`] because Rust lets only the crate that defines a type
//! convert it into tonic's `Status`; the gRPC faces re-export it and map nowhere else.
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};

use super::{Error, Kind};

/// Metadata key of the reason of a NOT_FOUND: `unknown`, `expired` or `deleted`.
pub const REASON_METADATA: &str = "tapedeck-reason";
/// Metadata of a redirect: the owner's address, `host:port`.
pub const REDIRECT_METADATA: &str = "tapedeck-redirect";

/// The gRPC code of each kind. No wildcard arm: a new kind does not compile until it is
/// mapped here.
pub fn code(kind: Kind) -> Code {
    match kind {
        Kind::InvalidArgument => Code::InvalidArgument,
        Kind::OutOfRange => Code::OutOfRange,
        Kind::NotFound => Code::NotFound,
        Kind::AlreadyExists => Code::AlreadyExists,
        Kind::FailedPrecondition => Code::FailedPrecondition,
        Kind::Aborted => Code::Aborted,
        Kind::TooLarge | Kind::Busy | Kind::DiskFull => Code::ResourceExhausted,
        Kind::Unavailable => Code::Unavailable,
        Kind::Unauthenticated => Code::Unauthenticated,
        Kind::PermissionDenied => Code::PermissionDenied,
        Kind::Internal => Code::Internal,
    }
}

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        let code = code(err.kind());
        if code == Code::Internal {
            tracing::error!(error = %err, "internal error");
        }
        let message = err.client_message();
        match err.root() {
            Error::RecordingNotFound { why, .. } => {
                let mut metadata = MetadataMap::new();
                metadata.insert(REASON_METADATA, MetadataValue::from_static(why.reason()));
                Status::with_metadata(code, message, metadata)
            }
            Error::Redirect { address, .. } | Error::ResumeElsewhere { address, .. } => {
                Status::with_metadata(code, message, redirect_metadata(address))
            }
            _ => Status::new(code, message),
        }
    }
}

/// Metadata naming the instance to go to: `tapedeck-redirect` (`host:port`) and Memory
/// Service's `x-resumer-redirect-host` / `x-resumer-redirect-port`, which its clients follow.
fn redirect_metadata(address: &str) -> MetadataMap {
    let mut metadata = MetadataMap::new();
    let (host, port) = address.rsplit_once(':').unwrap_or((address, ""));
    let host = host.trim_start_matches('[').trim_end_matches(']');
    for (name, value) in [
        (REDIRECT_METADATA, address),
        ("x-resumer-redirect-host", host),
        ("x-resumer-redirect-port", port),
    ] {
        // Advertised addresses are checked at start-up to be host:port text; a value that
        // is not ASCII is left out rather than failing the answer.
        if let Ok(value) = value.parse() {
            metadata.insert(name, value);
        }
    }
    metadata
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_names_host_and_port_apart() {
        let status = Status::from(Error::Redirect {
            id: "c1".into(),
            address: "[::1]:9090".into(),
        });
        assert_eq!(status.code(), Code::Unavailable);
        let metadata = status.metadata();
        assert_eq!(metadata.get(REDIRECT_METADATA).unwrap(), "[::1]:9090");
        assert_eq!(metadata.get("x-resumer-redirect-host").unwrap(), "::1");
        assert_eq!(metadata.get("x-resumer-redirect-port").unwrap(), "9090");
    }

    #[test]
    fn not_found_names_its_reason_through_a_shared_error() {
        let err = Error::RecordingNotFound {
            id: "c1".into(),
            why: super::super::Absence::Deleted { at_ms: 0 },
        };
        let status = Status::from(Error::Shared(std::sync::Arc::new(err)));
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(status.metadata().get(REASON_METADATA).unwrap(), "deleted");
    }
}
