//! Access control against a real server: every RPC of both APIs × every kind of credential
//! (none, an unknown key, a valid key, expired / forged / wrong-audience grants, reader,
//! writer, wildcard reader, a grant for another conversation). Each case checks the status and
//! that nothing leaked: a refused replay sends no content, a refused id is absent from a
//! check, a refused cancel leaves the recording live.
use crate::common;

use common::*;
use tapedeck::access::{AccessConfig, ApiKey, Claims, Role, Secret};
use tapedeck::pb::{
    CancelRecordRequest, CancelResponseRequest, CheckConversationsRequest, CheckRecordingsRequest,
    RecordRequest, RecordStatus, ReplayRequest, ReplayResponseTokensRequest,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

const KEY: &str = "agent-secret-1";
const JWT_SECRET: &str = "grant-signing-secret-of-32-bytes";
const AUDIENCE: &str = "tapedeck";
/// The conversation every case is about.
const TARGET: &str = "chat-42";

/// A kind of credential a call may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cred {
    None,
    UnknownKey,
    Key,
    Expired,
    Forged,
    WrongAudience,
    Reader,
    Writer,
    WildcardReader,
    OtherConversation,
    KeyAndWriter,
}

const ALL: [Cred; 11] = [
    Cred::None,
    Cred::UnknownKey,
    Cred::Key,
    Cred::Expired,
    Cred::Forged,
    Cred::WrongAudience,
    Cred::Reader,
    Cred::WildcardReader,
    Cred::OtherConversation,
    Cred::Writer,
    Cred::KeyAndWriter,
];

/// What each RPC must answer for a credential: `Ok(())` or the refusal's code.
struct Expected {
    record: Result<(), Code>,
    replay: Result<(), Code>,
    cancel: Result<(), Code>,
    /// `Ok(true)`: the live target is listed; `Ok(false)`: silently left out.
    check: Result<bool, Code>,
}

fn expected(cred: Cred) -> Expected {
    const DENIED: Code = Code::PermissionDenied;
    let unauthenticated = Expected {
        record: Err(Code::Unauthenticated),
        replay: Err(Code::Unauthenticated),
        cancel: Err(Code::Unauthenticated),
        check: Err(Code::Unauthenticated),
    };
    match cred {
        Cred::None | Cred::UnknownKey | Cred::Expired | Cred::Forged | Cred::WrongAudience => {
            unauthenticated
        }
        Cred::Key => Expected {
            record: Ok(()),
            replay: Ok(()),
            cancel: Err(DENIED),
            check: Ok(true),
        },
        Cred::Reader | Cred::WildcardReader => Expected {
            record: Err(DENIED),
            replay: Ok(()),
            cancel: Err(DENIED),
            check: Ok(true),
        },
        Cred::OtherConversation => Expected {
            record: Err(DENIED),
            replay: Err(DENIED),
            cancel: Err(DENIED),
            check: Ok(false),
        },
        Cred::Writer | Cred::KeyAndWriter => Expected {
            record: Ok(()),
            replay: Ok(()),
            cancel: Ok(()),
            check: Ok(true),
        },
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn grant(secret: &str, audience: &str, exp: u64, conversations: &[(&str, Role)]) -> String {
    let claims = Claims {
        sub: "user-7".into(),
        exp,
        nbf: None,
        iss: None,
        aud: Some(audience.into()),
        conversations: conversations
            .iter()
            .map(|(id, role)| (id.to_string(), *role))
            .collect(),
    };
    tapedeck::access::mint(&Secret::new(secret), &claims).unwrap()
}

/// The `x-api-key` and bearer token of `cred`.
fn credentials(cred: Cred) -> (Option<String>, Option<String>) {
    let later = now() + 600;
    let bearer =
        |conversations: &[(&str, Role)]| Some(grant(JWT_SECRET, AUDIENCE, later, conversations));
    match cred {
        Cred::None => (None, None),
        Cred::UnknownKey => (Some("not-a-key".into()), None),
        Cred::Key => (Some(KEY.into()), None),
        Cred::Expired => (
            None,
            Some(grant(
                JWT_SECRET,
                AUDIENCE,
                now() - 3600,
                &[(TARGET, Role::Writer)],
            )),
        ),
        Cred::Forged => (
            None,
            Some(grant(
                "another-secret-of-at-least-32-bytes",
                AUDIENCE,
                later,
                &[(TARGET, Role::Writer)],
            )),
        ),
        Cred::WrongAudience => (
            None,
            Some(grant(
                JWT_SECRET,
                "someone-else",
                later,
                &[(TARGET, Role::Writer)],
            )),
        ),
        Cred::Reader => (None, bearer(&[(TARGET, Role::Reader)])),
        Cred::Writer => (None, bearer(&[(TARGET, Role::Writer)])),
        Cred::WildcardReader => (None, bearer(&[("*", Role::Reader)])),
        Cred::OtherConversation => (None, bearer(&[("chat-99", Role::Writer)])),
        Cred::KeyAndWriter => (Some(KEY.into()), bearer(&[(TARGET, Role::Writer)])),
    }
}

/// `message` as a request carrying `cred`.
fn with<T>(cred: Cred, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let (key, bearer) = credentials(cred);
    let metadata = request.metadata_mut();
    if let Some(key) = key {
        metadata.insert("x-api-key", key.parse().unwrap());
    }
    if let Some(token) = bearer {
        metadata.insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

fn access() -> AccessConfig {
    AccessConfig {
        api_keys: vec![ApiKey::parse(&format!("agent={KEY}")).unwrap()],
        jwt_secret: Some(Secret::new(JWT_SECRET)),
        jwt_audience: Some(AUDIENCE.into()),
        ..AccessConfig::default()
    }
}

/// Which API a case goes through.
#[derive(Debug, Clone, Copy)]
enum Api {
    Current,
    Legacy,
}

struct Clients {
    current: RecorderClient,
    legacy: ResumerClient,
}

/// Waits (at most [`WAIT`]) until the target's liveness is `live`.
async fn until_live_is(clients: &Clients, live: bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while target_is_live(clients).await != live {
        assert!(
            tokio::time::Instant::now() < deadline,
            "target never became live={live}"
        );
        tokio::task::yield_now().await;
    }
}

/// Starts a live recording of the target with the API key, once the previous one has ended;
/// returns its producer (dropping it completes the recording).
async fn live_target(clients: &Clients) -> tokio::sync::mpsc::Sender<RecordRequest> {
    until_live_is(clients, false).await;
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.send(RecordRequest {
        conversation_id: TARGET.into(),
        content: "secret text".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut client = clients.current.clone();
    tokio::spawn(async move {
        client
            .record(with(Cred::Key, ReceiverStream::new(rx)))
            .await
    });
    until_live_is(clients, true).await;
    tx
}

/// Whether the target is live, asked with the API key.
async fn target_is_live(clients: &Clients) -> bool {
    let request = CheckRecordingsRequest {
        conversation_ids: vec![TARGET.into()],
    };
    let live = clients
        .current
        .clone()
        .check_recordings(with(Cred::Key, request))
        .await
        .unwrap()
        .into_inner()
        .conversation_ids;
    !live.is_empty()
}

/// Replays the target with `cred`: `Ok` once the first content arrives.
async fn replay(clients: &Clients, api: Api, cred: Cred) -> Result<(), Code> {
    match api {
        Api::Current => {
            let request = ReplayRequest {
                conversation_id: TARGET.into(),
                resume_offset: 0,
                ..Default::default()
            };
            let mut stream = clients
                .current
                .clone()
                .replay(with(cred, request))
                .await
                .map_err(|s| s.code())?
                .into_inner();
            let first = stream.message().await.map_err(|s| s.code())?.unwrap();
            assert_eq!(first.content, "secret text");
        }
        Api::Legacy => {
            let request = ReplayResponseTokensRequest {
                conversation_id: TARGET.into(),
                resume_position: 0,
            };
            let mut stream = clients
                .legacy
                .clone()
                .replay_response_tokens(with(cred, request))
                .await
                .map_err(|s| s.code())?
                .into_inner();
            let first = stream.message().await.map_err(|s| s.code())?.unwrap();
            assert_eq!(first.token, "secret text");
        }
    }
    Ok(())
}

/// Checks the target and a malformed id with `cred`: whether the target is listed.
async fn check(clients: &Clients, api: Api, cred: Cred) -> Result<bool, Code> {
    let ids = vec![
        TARGET.as_bytes().to_vec(),
        vec![0xff, 0xfe],
        b"chat-99".to_vec(),
    ];
    let listed = match api {
        Api::Current => {
            let request = CheckRecordingsRequest {
                conversation_ids: ids,
            };
            clients
                .current
                .clone()
                .check_recordings(with(cred, request))
                .await
                .map_err(|s| s.code())?
                .into_inner()
                .conversation_ids
        }
        Api::Legacy => {
            let request = CheckConversationsRequest {
                conversation_ids: ids,
            };
            clients
                .legacy
                .clone()
                .check_conversations(with(cred, request))
                .await
                .map_err(|s| s.code())?
                .into_inner()
                .conversation_ids
        }
    };
    assert!(listed.len() <= 1, "{listed:?}");
    Ok(listed == vec![TARGET.as_bytes().to_vec()])
}

/// Cancels the target with `cred`: `Ok` if accepted.
async fn cancel(clients: &Clients, api: Api, cred: Cred) -> Result<(), Code> {
    let accepted = match api {
        Api::Current => {
            let request = CancelRecordRequest {
                conversation_id: TARGET.into(),
            };
            let answer = clients.current.clone().cancel(with(cred, request)).await;
            answer.map_err(|s| s.code())?.into_inner().accepted
        }
        Api::Legacy => {
            let request = CancelResponseRequest {
                conversation_id: TARGET.into(),
            };
            let answer = clients
                .legacy
                .clone()
                .cancel_response(with(cred, request))
                .await;
            answer.map_err(|s| s.code())?.into_inner().accepted
        }
    };
    assert!(
        accepted,
        "an allowed cancel of a live recording is accepted"
    );
    Ok(())
}

/// Records the target whole with `cred`.
async fn record(clients: &Clients, api: Api, cred: Cred) -> Result<(), Code> {
    match api {
        Api::Current => {
            let messages = vec![
                RecordRequest {
                    conversation_id: TARGET.into(),
                    content: "new ".into(),
                    complete: false,
                    ..Default::default()
                },
                RecordRequest {
                    content: "text".into(),
                    complete: true,
                    ..Default::default()
                },
            ];
            let stream = tokio_stream::iter(messages);
            let answer = clients.current.clone().record(with(cred, stream)).await;
            let answer = answer.map_err(|s| s.code())?.into_inner();
            assert_eq!(answer.status, RecordStatus::Success as i32, "{answer:?}");
        }
        Api::Legacy => {
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tx.send(token(TARGET.as_bytes(), "new ", false))
                .await
                .unwrap();
            let opened = clients
                .legacy
                .clone()
                .stream_response_tokens(with(cred, ReceiverStream::new(rx)))
                .await;
            let mut acks = opened.map_err(|s| s.code())?.into_inner();
            let first = acks.message().await.map_err(|s| s.code())?.unwrap();
            assert!(first.success, "{first:?}");
            tx.send(token(b"", "text", true)).await.unwrap();
            assert!(acks.message().await.unwrap().unwrap().success);
        }
    }
    Ok(())
}

async fn matrix(api: Api) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.access = access();
    let server = TestServer::start(config).await;
    let clients = Clients {
        current: server.recorder().await,
        legacy: server.resumer().await,
    };
    for cred in ALL {
        let expected = expected(cred);
        let producer = live_target(&clients).await;
        let case = format!("{api:?} {cred:?}");
        assert_eq!(
            replay(&clients, api, cred).await,
            expected.replay,
            "replay: {case}"
        );
        assert_eq!(
            check(&clients, api, cred).await,
            expected.check,
            "check: {case}"
        );
        let cancelled = cancel(&clients, api, cred).await;
        assert_eq!(cancelled, expected.cancel, "cancel: {case}");
        assert_eq!(
            target_is_live(&clients).await,
            cancelled.is_err(),
            "a refused cancel leaves the recording live: {case}"
        );
        assert_eq!(
            record(&clients, api, cred).await,
            expected.record,
            "record: {case}"
        );
        drop(producer);
    }
    server.stop().await;
}

#[tokio::test]
async fn current_api_follows_the_access_rules_for_every_credential() {
    matrix(Api::Current).await;
}

#[tokio::test]
async fn legacy_api_follows_the_access_rules_for_every_credential() {
    matrix(Api::Legacy).await;
}

#[tokio::test]
async fn refusals_say_why_without_repeating_the_credential() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.access = access();
    let server = TestServer::start(config).await;
    let client = server.recorder().await;
    let ask = |cred| {
        let mut client = client.clone();
        async move {
            let request = ReplayRequest {
                conversation_id: TARGET.into(),
                resume_offset: 0,
                ..Default::default()
            };
            client.replay(with(cred, request)).await.unwrap_err()
        }
    };
    for (cred, says) in [
        (Cred::None, "missing credentials"),
        (Cred::UnknownKey, "unknown API key"),
        (Cred::Expired, "expired"),
        (Cred::Forged, "bad signature"),
        (Cred::WrongAudience, "wrong audience"),
        (
            Cred::OtherConversation,
            "user-7 may not replay conversation chat-42",
        ),
    ] {
        let err = ask(cred).await;
        assert!(err.message().contains(says), "{cred:?}: {err}");
        let (key, token) = credentials(cred);
        for secret in key.iter().chain(token.iter()) {
            assert!(!err.message().contains(secret.as_str()), "{cred:?}: {err}");
        }
        assert!(!err.message().contains(JWT_SECRET));
    }
    // Health and IsEnabled stay open.
    let enabled = client.clone().is_enabled(()).await.unwrap().into_inner();
    assert!(enabled.enabled);
    server.stop().await;
}

/// A grant signed with the right key whose claims cannot be used is refused naming the
/// claim (and, for a role, the roles there are); a token sent with the word `Bearer` twice is
/// told so. Neither the token nor the secret is repeated.
#[tokio::test]
async fn unusable_grants_are_refused_naming_the_claim() {
    use jsonwebtoken::{EncodingKey, Header, encode};
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.access = access();
    let server = TestServer::start(config).await;
    let client = server.recorder().await;
    let signed = |claims: serde_json::Value| {
        let key = EncodingKey::from_secret(JWT_SECRET.as_bytes());
        encode(&Header::default(), &claims, &key).unwrap()
    };
    let later = now() + 600;
    let no_exp = signed(serde_json::json!({
        "sub": "user-7", "aud": AUDIENCE, "conversations": {TARGET: "reader"},
    }));
    let owner = signed(serde_json::json!({
        "sub": "user-7", "exp": later, "aud": AUDIENCE, "conversations": {TARGET: "owner"},
    }));
    let writer = grant(JWT_SECRET, AUDIENCE, later, &[(TARGET, Role::Writer)]);
    for (authorization, token, says) in [
        (format!("Bearer {no_exp}"), &no_exp, "lacks the `exp` claim"),
        (
            format!("Bearer {owner}"),
            &owner,
            "`conversations` claim gives the role `owner`; a role is `reader` or `writer`",
        ),
        (
            format!("Bearer Bearer {writer}"),
            &writer,
            "starts with the word Bearer",
        ),
    ] {
        let mut request = tonic::Request::new(ReplayRequest {
            conversation_id: TARGET.into(),
            ..Default::default()
        });
        let value = authorization.parse().unwrap();
        request.metadata_mut().insert("authorization", value);
        let err = client.clone().replay(request).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{err}");
        assert!(err.message().contains(says), "`{says}` missing from: {err}");
        assert!(!err.message().contains(token.as_str()), "{err}");
        assert!(!err.message().contains(JWT_SECRET), "{err}");
    }
    server.stop().await;
}

/// The management API: Get and List need reader access (List shows a caller only the
/// recordings it may read), Delete needs writer access or an API key.
#[tokio::test]
async fn the_management_api_follows_the_access_rules_for_every_credential() {
    use tapedeck::pb::tapedeck::{
        DeleteRecordingRequest, GetRecordingRequest, ListRecordingsRequest,
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.access = access();
    let server = TestServer::start(config).await;
    let current = server.recorder().await;
    let mut recordings = recordings_client(server.addr).await;
    for cred in ALL {
        let case = format!("{cred:?}");
        // The target and another conversation, recorded with the API key.
        for id in [TARGET, "chat-99"] {
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tx.send(RecordRequest {
                conversation_id: id.into(),
                content: "text".into(),
                complete: true,
                ..Default::default()
            })
            .await
            .unwrap();
            drop(tx);
            let answer = current
                .clone()
                .record(with(Cred::Key, ReceiverStream::new(rx)))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(answer.status, RecordStatus::Success as i32);
        }
        let expected = expected(cred);
        let got = recordings
            .get(with(
                cred,
                GetRecordingRequest {
                    conversation_id: TARGET.into(),
                },
            ))
            .await
            .map(drop)
            .map_err(|s| s.code());
        assert_eq!(got, expected.replay, "get: {case}");

        let listed = recordings
            .list(with(cred, ListRecordingsRequest::default()))
            .await
            .map(|r| {
                r.into_inner()
                    .recordings
                    .into_iter()
                    .map(|r| String::from_utf8(r.conversation_id).unwrap())
                    .collect::<Vec<_>>()
            })
            .map_err(|s| s.code());
        match (&listed, cred) {
            (Err(code), _) => assert_eq!(Err(*code), expected.replay, "list: {case}"),
            (Ok(ids), Cred::Key | Cred::KeyAndWriter | Cred::WildcardReader) => {
                assert_eq!(ids, &[TARGET, "chat-99"], "list: {case}")
            }
            (Ok(ids), Cred::OtherConversation) => assert_eq!(ids, &["chat-99"], "list: {case}"),
            (Ok(ids), _) => assert_eq!(ids, &[TARGET], "list: {case}"),
        }

        let deleted = recordings
            .delete(with(
                cred,
                DeleteRecordingRequest {
                    conversation_id: TARGET.into(),
                },
            ))
            .await
            .map(drop)
            .map_err(|s| s.code());
        // Delete is allowed exactly where recording is.
        assert_eq!(deleted, expected.record, "delete: {case}");
        let after = recordings
            .get(with(
                Cred::Key,
                GetRecordingRequest {
                    conversation_id: TARGET.into(),
                },
            ))
            .await
            .unwrap()
            .into_inner();
        let gone = after.tombstone.is_some();
        assert_eq!(
            gone,
            deleted.is_ok(),
            "a refused delete deletes nothing: {case}"
        );
    }
    server.stop().await;
}
