//! Every variant of [`Error`], built once and mapped on both faces: the gRPC code and the HTTP
//! status each one gets are pinned here, so a variant that is not classified fails to compile
//! (in [`Error::kind`] and in [`expected`]) and one that is misclassified fails this test.
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use axum::response::IntoResponse;
use http::StatusCode;
use tonic::Code;

use crate::error::{Absence, Error, Kind};
use crate::http::failure::{failed, status};
use tapedeck_core::error::code;

/// How many variants [`Error`] has: the number of arms of [`expected`].
const VARIANTS: usize = 61;

/// How many kinds [`Kind`] has: each one is some variant's.
const KINDS: usize = 13;

/// The variant's name, its gRPC code and its HTTP status. No wildcard arm: a new variant does
/// not compile until its answers on both faces are written down here.
#[rustfmt::skip] // A table: one row per variant.
fn expected(err: &Error) -> (&'static str, Code, StatusCode) {
    use Code as G;
    use StatusCode as H;
    match err {
        Error::InvalidConversationId { .. } => ("InvalidConversationId", G::InvalidArgument, H::BAD_REQUEST),
        Error::MissingConversationId => ("MissingConversationId", G::InvalidArgument, H::BAD_REQUEST),
        Error::ConversationIdChanged => ("ConversationIdChanged", G::InvalidArgument, H::BAD_REQUEST),
        Error::ChunkTooLarge { .. } => ("ChunkTooLarge", G::ResourceExhausted, H::PAYLOAD_TOO_LARGE),
        Error::RecordingTooLarge { .. } => ("RecordingTooLarge", G::ResourceExhausted, H::PAYLOAD_TOO_LARGE),
        Error::TooManyLiveRecordings { .. } => ("TooManyLiveRecordings", G::ResourceExhausted, H::TOO_MANY_REQUESTS),
        Error::TooManyIds { .. } => ("TooManyIds", G::InvalidArgument, H::BAD_REQUEST),
        Error::RecordingNotFound { .. } => ("RecordingNotFound", G::NotFound, H::NOT_FOUND),
        Error::AlreadyRecording { .. } => ("AlreadyRecording", G::AlreadyExists, H::CONFLICT),
        Error::ResumeElsewhere { .. } => ("ResumeElsewhere", G::FailedPrecondition, H::CONFLICT),
        Error::Redirect { .. } => ("Redirect", G::Unavailable, H::SERVICE_UNAVAILABLE),
        Error::OwnerUnreachable { .. } => ("OwnerUnreachable", G::Unavailable, H::SERVICE_UNAVAILABLE),
        Error::ResumePastEnd { .. } => ("ResumePastEnd", G::FailedPrecondition, H::CONFLICT),
        Error::AlreadyEnded { .. } => ("AlreadyEnded", G::FailedPrecondition, H::CONFLICT),
        Error::ResumeInsideCharacter { .. } => ("ResumeInsideCharacter", G::InvalidArgument, H::BAD_REQUEST),
        Error::ResumeUnsettled { .. } => ("ResumeUnsettled", G::Unavailable, H::SERVICE_UNAVAILABLE),
        Error::Fenced => ("Fenced", G::Aborted, H::CONFLICT),
        Error::RetentionTooLong { .. } => ("RetentionTooLong", G::InvalidArgument, H::BAD_REQUEST),
        Error::BadPageToken => ("BadPageToken", G::InvalidArgument, H::BAD_REQUEST),
        Error::BadStatusFilter { .. } => ("BadStatusFilter", G::InvalidArgument, H::BAD_REQUEST),
        Error::OffsetOutOfRange { .. } => ("OffsetOutOfRange", G::OutOfRange, H::BAD_REQUEST),
        Error::OffsetInsideCharacter { .. } => ("OffsetInsideCharacter", G::InvalidArgument, H::BAD_REQUEST),
        Error::NotText { .. } => ("NotText", G::FailedPrecondition, H::CONFLICT),
        Error::ForkedStream => ("ForkedStream", G::FailedPrecondition, H::CONFLICT),
        Error::NegativeOffset { .. } => ("NegativeOffset", G::InvalidArgument, H::BAD_REQUEST),
        Error::Unauthenticated { .. } => ("Unauthenticated", G::Unauthenticated, H::UNAUTHORIZED),
        Error::PermissionDenied { .. } => ("PermissionDenied", G::PermissionDenied, H::FORBIDDEN),
        Error::Setup(crate::error::Setup::BadApiKey { .. }) => ("BadApiKey", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Setup(crate::error::Setup::BadJwtKey { .. }) => ("BadJwtKey", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Offline { .. } => ("Offline", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Setup(crate::error::Setup::Locator { .. }) => ("Locator", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Setup(crate::error::Setup::Tls { .. }) => ("Tls", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Setup(crate::error::Setup::ObjectStoreSetting { .. }) => ("ObjectStoreSetting", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::ObjectStoreUnavailable { .. } => ("ObjectStoreUnavailable", G::Unavailable, H::SERVICE_UNAVAILABLE),
        Error::NoQuorum { .. } => ("NoQuorum", G::Unavailable, H::SERVICE_UNAVAILABLE),
        Error::Setup(crate::error::Setup::Cluster { .. }) => ("Cluster", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::LeaderRefused { kind: Kind::AlreadyExists, .. } => ("LeaderRefused", G::AlreadyExists, H::CONFLICT),
        Error::LeaderRefused { .. } => ("LeaderRefused", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Superseded => ("Superseded", G::Aborted, H::CONFLICT),
        Error::RecordingEnded => ("RecordingEnded", G::Aborted, H::CONFLICT),
        Error::ShuttingDown => ("ShuttingDown", G::Unavailable, H::SERVICE_UNAVAILABLE),
        Error::SchemaVersion { .. } => ("SchemaVersion", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::OpenDatabase { .. } => ("OpenDatabase", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::DamagedDatabase { .. } => ("DamagedDatabase", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::UnreadableDatabase { .. } => ("UnreadableDatabase", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::DatabaseInUse { .. } => ("DatabaseInUse", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::DataDir { .. } => ("DataDir", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::DiskFull { .. } => ("DiskFull", G::ResourceExhausted, H::INSUFFICIENT_STORAGE),
        Error::StoreFull => ("StoreFull", G::ResourceExhausted, H::INSUFFICIENT_STORAGE),
        Error::Storage(_) => ("Storage", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::DatabaseUnavailable => ("DatabaseUnavailable", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Corrupt { .. } => ("Corrupt", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Decode { .. } => ("Decode", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Encode { .. } => ("Encode", G::Internal, H::INTERNAL_SERVER_ERROR),
        // Answered as what it shares.
        Error::Shared(inner) => {
            let (_, grpc, http) = expected(inner);
            ("Shared", grpc, http)
        }
        Error::Snapshot { .. } => ("Snapshot", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::WriterThread(_) => ("WriterThread", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Task(_) => ("Task", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Setup(crate::error::Setup::Listener { .. }) => ("Listener", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Setup(crate::error::Setup::Bind { .. }) => ("Bind", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Setup(crate::error::Setup::Reflection(_)) => ("Reflection", G::Internal, H::INTERNAL_SERVER_ERROR),
        Error::Setup(crate::error::Setup::Serve(_)) => ("Serve", G::Internal, H::INTERNAL_SERVER_ERROR),
    }
}

fn io() -> std::io::Error {
    std::io::Error::other("the detail a client must not read")
}

/// One value of every variant.
async fn every_variant() -> Vec<Error> {
    let id = || "c1".to_string();
    let path = || std::path::PathBuf::from("/data/tapedeck.redb");
    let aborted = tokio::spawn(std::future::pending::<()>());
    aborted.abort();
    let join = aborted.await.expect_err("an aborted task fails");
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(b"\xff not a descriptor set")
        .build_v1()
        .err()
        .expect("a bad descriptor set is refused");
    let transport =
        tonic::transport::Endpoint::from_shared("not a uri").expect_err("a bad URI is refused");
    let reason = || "a reason".to_string();
    vec![
        Error::InvalidConversationId { reason: reason() },
        Error::MissingConversationId,
        Error::ConversationIdChanged,
        Error::ChunkTooLarge { size: 2, max: 1 },
        Error::RecordingTooLarge { size: 2, max: 1 },
        Error::TooManyLiveRecordings { max: 1 },
        Error::TooManyIds { count: 2, max: 1 },
        Error::RecordingNotFound {
            id: id(),
            why: Absence::Unknown,
        },
        Error::AlreadyRecording { id: id() },
        Error::ResumeElsewhere {
            id: id(),
            address: "10.0.0.2:9090".into(),
        },
        Error::OwnerUnreachable {
            id: id(),
            address: "10.0.0.2:9090".into(),
        },
        Error::Redirect {
            id: id(),
            address: "10.0.0.2:9090".into(),
        },
        Error::ResumePastEnd {
            id: id(),
            offset: 2,
            committed: 1,
        },
        Error::AlreadyEnded {
            id: id(),
            status: tapedeck_core::status::Status::Completed,
            bytes: 1,
        },
        Error::ResumeInsideCharacter { offset: 1 },
        Error::ResumeUnsettled { id: id() },
        Error::Fenced,
        Error::RetentionTooLong { asked: 2, max: 1 },
        Error::BadPageToken,
        Error::BadStatusFilter { value: 99 },
        Error::OffsetOutOfRange { offset: 2, len: 1 },
        Error::OffsetInsideCharacter { offset: 1 },
        Error::NotText {
            content_type: "application/octet-stream".into(),
        },
        Error::ForkedStream,
        Error::NegativeOffset { offset: -1 },
        Error::Unauthenticated { reason: reason() },
        Error::PermissionDenied {
            caller: "k".into(),
            action: "replay",
            id: id(),
            needs: "replay",
        },
        Error::Setup(crate::error::Setup::BadApiKey { reason: reason() }),
        Error::Setup(crate::error::Setup::BadJwtKey { reason: reason() }),
        Error::Offline { reason: reason() },
        Error::Setup(crate::error::Setup::Locator { reason: reason() }),
        Error::Setup(crate::error::Setup::Tls { reason: reason() }),
        Error::Setup(crate::error::Setup::ObjectStoreSetting { reason: reason() }),
        Error::ObjectStoreUnavailable { detail: reason() },
        Error::NoQuorum {
            leader: Some(2),
            leader_address: Some("10.0.0.2:7070".into()),
        },
        Error::Setup(crate::error::Setup::Cluster { reason: reason() }),
        Error::LeaderRefused {
            kind: Kind::AlreadyExists,
            message: reason(),
        },
        Error::Superseded,
        Error::RecordingEnded,
        Error::ShuttingDown,
        Error::SchemaVersion {
            path: path(),
            found: 9,
            expected: 1,
        },
        Error::OpenDatabase {
            path: path(),
            source: redb::DatabaseError::DatabaseAlreadyOpen,
        },
        Error::DamagedDatabase {
            path: path(),
            source: Box::new(Error::DatabaseUnavailable),
        },
        Error::UnreadableDatabase {
            path: path(),
            panic: "a panic".into(),
        },
        Error::DatabaseInUse { path: path() },
        Error::DataDir {
            path: path(),
            source: io(),
        },
        Error::DiskFull { source: io() },
        Error::StoreFull,
        Error::Storage(redb::Error::Corrupted("a detail".into())),
        Error::DatabaseUnavailable,
        Error::Corrupt {
            detail: "a detail".into(),
        },
        Error::Decode {
            what: "a row",
            source: bincode::error::DecodeError::UnexpectedEnd { additional: 1 },
        },
        Error::Encode {
            what: "a row",
            source: bincode::error::EncodeError::UnexpectedEnd,
        },
        Error::Shared(Arc::new(Error::StoreFull)),
        Error::Snapshot {
            action: "read",
            source: io(),
        },
        Error::WriterThread(io()),
        Error::Task(join),
        Error::Setup(crate::error::Setup::Listener {
            addr: "127.0.0.1:9090".into(),
            source: io(),
        }),
        Error::Setup(crate::error::Setup::Bind {
            addr: "127.0.0.1:9090".parse().expect("a socket address"),
            what: "gRPC",
            flag: "--listen",
            env: "TAPEDECK_LISTEN",
            source: io(),
        }),
        Error::Setup(crate::error::Setup::Reflection(reflection)),
        Error::Setup(crate::error::Setup::Serve(transport)),
    ]
}

#[tokio::test]
async fn every_variant_has_its_answer_on_both_faces() {
    let mut seen = BTreeSet::new();
    let mut kinds = HashSet::new();
    for err in every_variant().await {
        let (name, grpc, http) = expected(&err);
        assert!(seen.insert(name), "{name} built twice");
        let kind = err.kind();
        kinds.insert(kind);
        assert_eq!(code(kind), grpc, "gRPC code of {name} ({kind:?})");
        assert_eq!(status(kind), http, "HTTP status of {name} ({kind:?})");
        let message = err.client_message();
        let reply = failed(err).into_response();
        assert_eq!(reply.status(), http, "HTTP reply to {name}");
        let retry = reply.headers().get(http::header::RETRY_AFTER);
        assert_eq!(
            retry.is_some(),
            http == StatusCode::SERVICE_UNAVAILABLE,
            "{name}"
        );
        let challenge = reply.headers().get(http::header::WWW_AUTHENTICATE);
        assert_eq!(
            challenge.is_some(),
            http == StatusCode::UNAUTHORIZED,
            "{name}"
        );
        if kind == Kind::Internal {
            assert_eq!(
                message, "internal storage error; see the server log",
                "{name}"
            );
        }
        assert!(
            !message.contains("must not read"),
            "{name} leaks: {message}"
        );
    }
    assert_eq!(seen.len(), VARIANTS, "every variant is built once");
    assert_eq!(kinds.len(), KINDS, "every kind is some variant's");
}

#[tokio::test]
async fn the_grpc_status_carries_the_client_message() {
    for err in every_variant().await {
        let (name, grpc, _) = expected(&err);
        let message = err.client_message();
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), grpc, "{name}");
        assert_eq!(status.message(), message, "{name}");
    }
}
