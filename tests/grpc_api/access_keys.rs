//! Grants beyond HS256, through a real server: signed with an RSA, EC (P-256) or Ed25519 key
//! whose public half the server is given (`--jwt-public-key`), checked for their issuer
//! (`--jwt-issuer`) and their `nbf`; and the forgeries a verifier must refuse: a grant with no
//! signature (`alg: none`), one signed with another key, and an HS256 grant whose secret is the
//! server's public key (algorithm confusion). Key pairs: `tests/fixtures/jwt`.
use crate::common;

use std::path::PathBuf;

use common::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use tapedeck::access::{AccessConfig, Secret};
use tapedeck::pb::ReplayRequest;
use tonic::Code;

const TARGET: &str = "chat-7";
const JWT_SECRET: &str = "grant-signing-secret-of-32-bytes";
const ISSUER: &str = "https://issuer.example";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jwt")
        .join(name)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims of a reader grant of [`TARGET`] for ten minutes, with `extra` claims added.
fn claims(extra: serde_json::Value) -> serde_json::Value {
    let mut claims = serde_json::json!({
        "sub": "user-7",
        "exp": now() + 600,
        "conversations": {TARGET: "reader"},
    });
    for (name, value) in extra.as_object().unwrap() {
        claims[name] = value.clone();
    }
    claims
}

fn signed(alg: Algorithm, key: &EncodingKey, claims: &serde_json::Value) -> String {
    jsonwebtoken::encode(&Header::new(alg), claims, key).unwrap()
}

/// A server whose access control is `access`.
async fn server_with(access: AccessConfig) -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.access = access;
    let server = TestServer::start(config).await;
    (dir, server)
}

/// What the server answers a replay of [`TARGET`] carrying `token`: OK (the recording is not
/// there, so the stream is empty) once the grant is accepted.
async fn replay_with(server: &TestServer, token: &str) -> Result<(), tonic::Status> {
    let mut request = tonic::Request::new(ReplayRequest {
        conversation_id: TARGET.into(),
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    server.recorder().await.replay(request).await.map(drop)
}

/// Asserts `answer` is UNAUTHENTICATED saying `says`, without repeating `token`.
fn refused(answer: Result<(), tonic::Status>, says: &str, token: &str) {
    let err = answer.expect_err("the grant was accepted");
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    assert!(err.message().contains(says), "`{says}` missing from: {err}");
    assert!(!err.message().contains(token), "{err}");
}

#[tokio::test]
async fn grants_signed_with_an_rsa_ec_or_ed25519_key_are_verified_with_its_public_half() {
    for (kind, alg) in [
        ("rsa", Algorithm::RS256),
        ("ec", Algorithm::ES256),
        ("ed25519", Algorithm::EdDSA),
    ] {
        let (_dir, server) = server_with(AccessConfig {
            jwt_public_key: Some(fixture(&format!("{kind}-public.pem"))),
            ..AccessConfig::default()
        })
        .await;
        let pem = |name: String| std::fs::read(fixture(&name)).unwrap();
        let private = pem(format!("{kind}-private.pem"));
        let other = pem(format!("{kind}-other-private.pem"));
        let key = |pem: &[u8]| match alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(pem).unwrap(),
            Algorithm::ES256 => EncodingKey::from_ec_pem(pem).unwrap(),
            _ => EncodingKey::from_ed_pem(pem).unwrap(),
        };
        let good = signed(alg, &key(&private), &claims(serde_json::json!({})));
        replay_with(&server, &good)
            .await
            .unwrap_or_else(|err| panic!("{kind}: {err}"));
        let forged = signed(alg, &key(&other), &claims(serde_json::json!({})));
        refused(
            replay_with(&server, &forged).await,
            "bad signature",
            &forged,
        );
        server.stop().await;
    }
}

#[tokio::test]
async fn the_issuer_is_checked_when_one_is_set() {
    let (_dir, server) = server_with(AccessConfig {
        jwt_secret: Some(Secret::new(JWT_SECRET)),
        jwt_issuer: Some(ISSUER.into()),
        ..AccessConfig::default()
    })
    .await;
    let key = EncodingKey::from_secret(JWT_SECRET.as_bytes());
    let right = signed(
        Algorithm::HS256,
        &key,
        &claims(serde_json::json!({"iss": ISSUER})),
    );
    replay_with(&server, &right).await.unwrap();
    let wrong = signed(
        Algorithm::HS256,
        &key,
        &claims(serde_json::json!({"iss": "https://elsewhere.example"})),
    );
    refused(replay_with(&server, &wrong).await, "wrong issuer", &wrong);
    let none = signed(Algorithm::HS256, &key, &claims(serde_json::json!({})));
    refused(replay_with(&server, &none).await, "`iss`", &none);
    server.stop().await;
}

#[tokio::test]
async fn a_grant_that_is_not_valid_yet_is_refused() {
    let (_dir, server) = server_with(AccessConfig {
        jwt_secret: Some(Secret::new(JWT_SECRET)),
        ..AccessConfig::default()
    })
    .await;
    let key = EncodingKey::from_secret(JWT_SECRET.as_bytes());
    let later = signed(
        Algorithm::HS256,
        &key,
        &claims(serde_json::json!({"nbf": now() + 600})),
    );
    refused(
        replay_with(&server, &later).await,
        "not valid yet (nbf)",
        &later,
    );
    let earlier = signed(
        Algorithm::HS256,
        &key,
        &claims(serde_json::json!({"nbf": now() - 60})),
    );
    replay_with(&server, &earlier).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn unsigned_and_algorithm_confused_grants_are_refused() {
    use base64::Engine;
    let public_pem = std::fs::read(fixture("rsa-public.pem")).unwrap();
    // With only a public key: HS256 is not accepted at all, so a grant whose secret is the
    // public key (which anyone may hold) gets nowhere.
    let (_dir, server) = server_with(AccessConfig {
        jwt_public_key: Some(fixture("rsa-public.pem")),
        ..AccessConfig::default()
    })
    .await;
    let confused = signed(
        Algorithm::HS256,
        &EncodingKey::from_secret(&public_pem),
        &claims(serde_json::json!({})),
    );
    refused(
        replay_with(&server, &confused).await,
        "signed with HS256 are not accepted",
        &confused,
    );
    // `alg: none`, no signature.
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let unsigned = format!(
        "{}.{}.",
        b64.encode(br#"{"alg":"none","typ":"JWT"}"#),
        b64.encode(claims(serde_json::json!({})).to_string())
    );
    refused(
        replay_with(&server, &unsigned).await,
        "not a well-formed JWT",
        &unsigned,
    );
    server.stop().await;
    // With a secret too: the HS256 grant is checked against the secret, not the public key.
    let (_dir, server) = server_with(AccessConfig {
        jwt_secret: Some(Secret::new(JWT_SECRET)),
        jwt_public_key: Some(fixture("rsa-public.pem")),
        ..AccessConfig::default()
    })
    .await;
    refused(
        replay_with(&server, &confused).await,
        "bad signature",
        &confused,
    );
    server.stop().await;
}
