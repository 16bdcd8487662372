//! Access control as deployed: protected mode and credential settings with the real binary;
//! TLS and mutual TLS with real certificates (made by rcgen) and a real TLS client; grants
//! minted by `tapedeck token` accepted by a server checking them.
use crate::common;

use std::ffi::OsStr;
use std::path::Path;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tapedeck::access::{AccessConfig, Secret};
use tapedeck::config::TlsFiles;
use tapedeck::pb::ReplayRequest;
use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// The HS256 secret of these tests: 32 bytes, the least tapedeck accepts.
const SECRET: &str = "access-setup-secret-of-32-bytes!";

#[test]
fn a_public_address_without_credentials_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = run_binary_to_exit(&[
        OsStr::new("--listen"),
        OsStr::new("0.0.0.0:0"),
        OsStr::new("--data-dir"),
        dir.path().as_os_str(),
    ]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_one_clear_line(&stderr, "without access control", "--allow-unauthenticated");
    assert!(!dir.path().join("tapedeck.redb").exists());
}

#[test]
fn a_public_address_serves_with_credentials_or_when_allowed() {
    for extra in [
        ["--api-key", "agent=s3cret"],
        ["--allow-unauthenticated", "--"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port().port().to_string();
        let listen = format!("0.0.0.0:{port}");
        let mut args = vec!["--listen", listen.as_str()];
        args.extend(extra.iter().filter(|a| **a != "--"));
        let mut child = spawn_serving(dir.path(), &args, None);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

#[test]
fn a_malformed_api_key_is_refused_without_echoing_it() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr) = run_binary_to_exit(&[
        OsStr::new("--api-key"),
        OsStr::new("justasecretvalue"),
        OsStr::new("--data-dir"),
        dir.path().as_os_str(),
    ]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_one_clear_line(&stderr, "API key", "name=secret");
    assert!(!stderr.contains("justasecretvalue"), "{stderr}");
}

/// Runs `tapedeck serve` on a public address with `args` and `env` set; checks it was refused
/// with exit code 2 and one line naming `flag` and `variable`, and that no secret in `hidden`
/// shows.
fn assert_credential_refused(
    args: &[&str],
    env: &[(&str, &str)],
    flag: &str,
    variable: &str,
    hidden: &[&str],
) {
    let dir = tempfile::tempdir().unwrap();
    let mut all: Vec<&OsStr> = vec![
        OsStr::new("--listen"),
        OsStr::new("0.0.0.0:0"),
        OsStr::new("--data-dir"),
        dir.path().as_os_str(),
    ];
    all.extend(args.iter().map(OsStr::new));
    let (status, stderr) = run_binary_to_exit_with_env(&all, env);
    assert_eq!(status.code(), Some(2), "{args:?} {env:?}: {stderr}");
    assert_one_clear_line(&stderr, flag, variable);
    for secret in hidden {
        assert!(!stderr.contains(secret), "{secret:?} shown: {stderr}");
    }
    assert!(
        !dir.path().join("tapedeck.redb").exists(),
        "{args:?} {env:?}"
    );
}

/// An empty secret is no secret: set but empty (an unset variable in a compose file), it
/// would turn access control on, pass protected mode, and let anyone mint a valid grant.
#[test]
fn empty_and_short_jwt_secrets_are_refused_from_the_flag_and_the_variable() {
    let (flag, variable) = ("--jwt-secret", "TAPEDECK_JWT_SECRET");
    assert_credential_refused(&[flag, ""], &[], flag, variable, &[]);
    assert_credential_refused(&[], &[(variable, "")], flag, variable, &[]);
    assert_credential_refused(&[], &[(variable, "   ")], flag, variable, &[]);
    let short = "s3cret-of-31-bytes-is-too-short";
    assert_eq!(short.len(), 31);
    assert_credential_refused(&[flag, short], &[], flag, variable, &[short]);
    assert_credential_refused(&[], &[(variable, short)], flag, variable, &[short]);
}

#[test]
fn empty_api_key_secrets_and_empty_key_files_are_refused() {
    let (flag, variable) = ("--api-key", "TAPEDECK_API_KEYS");
    assert_credential_refused(&[flag, "agent="], &[], flag, variable, &[]);
    assert_credential_refused(&[flag, "agent= "], &[], flag, variable, &[]);
    // A base64 secret given without its name: its "name" is the secret, never shown.
    let bare = "c2VjcmV0LXdpdGgtcGFkZGluZw";
    for padded in [format!("{bare}="), format!("{bare}==")] {
        assert_credential_refused(&[flag, &padded], &[], flag, variable, &[bare]);
    }
    assert_credential_refused(&[], &[(variable, "")], flag, variable, &[]);
    assert_credential_refused(
        &[],
        &[(variable, "agent=s3cret,other=")],
        flag,
        variable,
        &["s3cret"],
    );

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "# no keys yet\n\n").unwrap();
    let empty = empty.to_str().unwrap();
    let keys_file = dir.path().join("keys");
    std::fs::write(&keys_file, "agent=s3cret\nother=\n").unwrap();
    let keys_file = keys_file.to_str().unwrap();
    let (flag, variable) = ("--api-keys-file", "TAPEDECK_API_KEYS_FILE");
    assert_credential_refused(&[flag, empty], &[], flag, variable, &[]);
    assert_credential_refused(&[], &[(variable, empty)], flag, variable, &[]);
    assert_credential_refused(&[], &[(variable, "")], flag, variable, &[]);
    assert_credential_refused(&[flag, keys_file], &[], flag, variable, &["s3cret"]);

    let no_key = dir.path().join("no-key.pem");
    std::fs::write(&no_key, "\n").unwrap();
    let no_key = no_key.to_str().unwrap();
    let (flag, variable) = ("--jwt-public-key", "TAPEDECK_JWT_PUBLIC_KEY");
    assert_credential_refused(&[flag, no_key], &[], flag, variable, &[]);
    assert_credential_refused(&[], &[(variable, "")], flag, variable, &[]);
}

/// `tapedeck token` refuses to sign with a secret the server would refuse: a grant signed
/// with an empty secret is one anyone can make.
#[test]
fn tapedeck_token_refuses_empty_and_short_secrets() {
    let short = "s3cret-of-31-bytes-is-too-short";
    for (args, env) in [
        (vec!["--jwt-secret", ""], vec![]),
        (vec!["--jwt-secret", short], vec![]),
        (vec![], vec![("TAPEDECK_JWT_SECRET", "")]),
        (vec![], vec![("TAPEDECK_JWT_SECRET", short)]),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
            .arg("token")
            .args(&args)
            .args(["--subject", "user-7", "--conversation", "*=writer"])
            .env_remove("TAPEDECK_JWT_SECRET")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(
            output.stdout.is_empty(),
            "a grant was printed for {args:?} {env:?}"
        );
        assert_one_clear_line(&stderr, "--jwt-secret", "TAPEDECK_JWT_SECRET");
        assert!(!stderr.contains(short), "{stderr}");
    }
}

#[tokio::test]
async fn a_grant_from_tapedeck_token_is_accepted() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["token", "--jwt-secret", SECRET, "--subject", "user-7"])
        .args(["--conversation", "chat-42=writer", "--ttl", "15m"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let token = String::from_utf8(output.stdout).unwrap().trim().to_string();

    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.access = AccessConfig {
        jwt_secret: Some(Secret::new(SECRET)),
        ..AccessConfig::default()
    };
    let server = TestServer::start(config).await;
    let client = server.recorder().await;
    let mut request = tonic::Request::new(tokio_stream::iter(vec![tapedeck::pb::RecordRequest {
        conversation_id: b"chat-42".to_vec(),
        content: "granted".into(),
        complete: true,
        ..Default::default()
    }]));
    let bearer = format!("Bearer {token}").parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    let answer = client.clone().record(request).await.unwrap().into_inner();
    assert_eq!(answer.status, tapedeck::pb::RecordStatus::Success as i32);
    // The same grant names no other conversation.
    let mut other = tonic::Request::new(ReplayRequest {
        conversation_id: b"chat-43".to_vec(),
        resume_offset: 0,
        ..Default::default()
    });
    let bearer = format!("Bearer {token}").parse().unwrap();
    other.metadata_mut().insert("authorization", bearer);
    let err = client.clone().replay(other).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    server.stop().await;
}

/// A CA, a server certificate for `localhost` and a client certificate, as PEM files in `dir`.
struct Pki {
    ca: String,
    client_cert: String,
    client_key: String,
    files: TlsFiles,
}

fn pki(dir: &Path) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec![name.to_string()]).unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf("localhost");
    let (client_cert, client_key) = leaf("agent");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let files = TlsFiles {
        cert: write("server.pem", &server_cert),
        key: write("server.key", &server_key),
        client_ca: None,
    };
    write("ca.pem", &ca.pem());
    Pki {
        ca: ca.pem(),
        client_cert,
        client_key,
        files,
    }
}

/// A TLS client of the current API at `addr`, trusting `pki`'s CA, presenting its client
/// certificate when `identify`.
async fn tls_client(
    addr: std::net::SocketAddr,
    pki: &Pki,
    identify: bool,
) -> Result<RecorderClient, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pki.ca))
        .domain_name("localhost");
    if identify {
        tls = tls.identity(Identity::from_pem(&pki.client_cert, &pki.client_key));
    }
    let channel = Channel::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(ResponseRecorderServiceClient::new(channel))
}

#[tokio::test]
async fn tls_serves_tls_clients_and_refuses_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let mut config = test_config(&dir.path().join("data"));
    config.server.tls = Some(pki.files.clone());
    let server = TestServer::start(config).await;

    let client = tls_client(server.addr, &pki, false).await.unwrap();
    record_all(&client, b"over-tls", &["private ", "words"]).await;
    assert_eq!(
        replay_text(&client, b"over-tls").await.unwrap().text,
        "private words"
    );
    // A plaintext client gets nothing: its channel connects lazily, so the call itself is
    // what fails.
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect_lazy();
    let request = ReplayRequest {
        conversation_id: b"over-tls".to_vec(),
        resume_offset: 0,
        ..Default::default()
    };
    let refused = ResponseRecorderServiceClient::new(channel)
        .replay(request)
        .await;
    assert!(
        refused.is_err(),
        "a plaintext client was answered by a TLS server"
    );
    server.stop().await;
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate_from_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let mut config = test_config(&dir.path().join("data"));
    let mut files = pki.files.clone();
    files.client_ca = Some(dir.path().join("ca.pem"));
    config.server.tls = Some(files);
    let server = TestServer::start(config).await;

    let identified = tls_client(server.addr, &pki, true).await.unwrap();
    record_all(&identified, b"mutual", &["both ", "sides"]).await;

    // Without a certificate the handshake, or the first call, fails: with the TLS alert that
    // says why, not with any error at all.
    let refusal = match tls_client(server.addr, &pki, false).await {
        Err(err) => format!("{err:?}"),
        Ok(anonymous) => format!("{:?}", replay_text(&anonymous, b"mutual").await.err()),
    };
    assert!(refusal.contains("CertificateRequired"), "{refusal}");
    server.stop().await;
}

#[tokio::test]
async fn the_rust_client_speaks_tls_and_sends_its_grant() {
    use tapedeck::client::{Client, ClientConfig, RecordOptions};
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let mut config = test_config(&dir.path().join("data"));
    config.server.tls = Some(pki.files.clone());
    config.access = AccessConfig {
        jwt_secret: Some(Secret::new(SECRET)),
        ..AccessConfig::default()
    };
    let server = TestServer::start(config).await;
    let claims = tapedeck::access::Claims {
        sub: "user-7".into(),
        exp: 4_102_444_800, // 2100-01-01
        nbf: None,
        iss: None,
        aud: None,
        conversations: [("chat-tls".to_string(), tapedeck::access::Role::Writer)].into(),
    };
    let grant = tapedeck::access::mint(&Secret::new(SECRET), &claims).unwrap();
    let client_config = ClientConfig {
        bearer: Some(grant),
        tls_ca: Some(dir.path().join("ca.pem")),
        ..ClientConfig::new(format!("localhost:{}", server.addr.port()))
    };
    let client = Client::connect(client_config).await.unwrap();
    assert!(client.is_enabled().await.unwrap());
    let recording = client
        .record(b"chat-tls", RecordOptions::default())
        .await
        .unwrap();
    recording.send("over TLS, ").await.unwrap();
    recording.send("with a grant").await.unwrap();
    recording.complete().await.unwrap();
    let mut replay = client.replay(b"chat-tls", 10).await.unwrap();
    let piece = replay.next().await.unwrap().unwrap();
    assert_eq!(piece.content, "with a grant");
    assert_eq!(piece.offset, 22);
    assert_eq!(client.get(b"chat-tls").await.unwrap().byte_length, 22);
    // The grant names no other conversation.
    let err = client.replay(b"chat-other", 0).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    server.stop().await;
}
