//! Bad files and settings, with the real binary: a damaged database, a data dir that is a file
//! or read-only, a port or database already in use. Each start is refused with a non-zero exit
//! and exactly one line saying what is wrong and what to do, never a panic or a backtrace. A
//! database left behind by SIGKILL is recovered on the next start (its log replayed) and keeps
//! its recordings.
mod common;

use std::ffi::OsStr;
use std::path::Path;

use common::*;
use tapedeck::pb::CheckRecordingsRequest;

/// Arguments of a refused start on `data_dir`.
fn refused_start(data_dir: &Path) -> (std::process::ExitStatus, String) {
    run_binary_to_exit(&[
        OsStr::new("--listen"),
        OsStr::new("127.0.0.1:0"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
    ])
}

fn assert_refused(data_dir: &Path, what: &str, hint: &str) {
    let (status, stderr) = refused_start(data_dir);
    assert!(!status.success(), "started anyway; stderr:\n{stderr}");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert_one_clear_line(&stderr, what, hint);
}

/// A valid database with one completed recording, closed cleanly by SIGTERM.
async fn valid_database(data_dir: &Path) -> std::path::PathBuf {
    let server = BinaryServer::spawn(data_dir, &[]);
    record_all(&server.recorder().await, b"kept", &["some ", "text"]).await;
    assert!(server.terminate().await.success());
    data_dir.join("tapedeck.redb")
}

/// Deterministic filler bytes (xorshift), so a failure can be reproduced.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

const DAMAGED_HINT: &str = "restore it from a backup, or move it away";

#[test]
fn a_file_of_random_bytes_is_refused_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tapedeck.redb"), noise(256 * 1024, 7)).unwrap();
    assert_refused(dir.path(), "cannot open database", DAMAGED_HINT);
}

#[tokio::test]
async fn a_truncated_database_is_refused_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = valid_database(dir.path()).await;
    let len = std::fs::metadata(&path).unwrap().len();
    for keep in [len / 2, 4096, 100] {
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(keep).unwrap();
        drop(file);
        assert_refused(dir.path(), "cannot open database", DAMAGED_HINT);
    }
}

#[tokio::test]
async fn a_database_with_a_wiped_header_is_refused_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = valid_database(dir.path()).await;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[..4096].fill(0);
    std::fs::write(&path, bytes).unwrap();
    assert_refused(dir.path(), "cannot open database", DAMAGED_HINT);
}

/// redb panics (`unwrap` on a UTF-8 error) when a table name in the file is not UTF-8; the
/// binary must report a damaged file, not print the panic and its backtrace.
#[tokio::test]
async fn a_database_that_makes_redb_panic_is_refused_without_a_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let path = valid_database(dir.path()).await;
    let mut bytes = std::fs::read(&path).unwrap();
    // Every copy of the name: older pages may still hold one.
    let names: Vec<usize> = bytes
        .windows(b"recordings".len())
        .enumerate()
        .filter(|(_, w)| *w == b"recordings")
        .map(|(at, _)| at)
        .collect();
    assert!(!names.is_empty(), "table name not in the file");
    for at in names {
        bytes[at + 3] = 0xff;
    }
    std::fs::write(&path, bytes).unwrap();
    assert_refused(dir.path(), "cannot open database", DAMAGED_HINT);
}

#[test]
fn a_data_dir_that_is_a_file_is_refused_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"hello").unwrap();
    assert_refused(&file, "is not a directory", "--data-dir");
}

#[test]
fn a_read_only_data_dir_is_refused_with_one_clear_line() {
    if !is_root() {
        // Anyone else is held back by the permission bits.
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
        assert_refused(dir.path(), "Permission denied", "--data-dir");
        return;
    }
    if !root_tests_enabled("a_read_only_data_dir_is_refused_with_one_clear_line") {
        return;
    }
    // Root ignores permission bits, so the directory is a read-only mount.
    let read_only = Tmpfs::mount(1024 * 1024, true);
    assert_refused(&read_only.path, "Read-only file system", "--data-dir");
}

#[test]
fn a_port_in_use_is_refused_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (status, stderr) = run_binary_to_exit(&[
        OsStr::new("--listen"),
        OsStr::new(&addr),
        OsStr::new("--data-dir"),
        dir.path().as_os_str(),
    ]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert_one_clear_line(&stderr, &format!("cannot listen on {addr}"), "--listen");
    assert!(stderr.contains("TAPEDECK_LISTEN"), "{stderr}");
    assert!(
        !dir.path().join("tapedeck.redb").exists(),
        "the port is bound before the database is opened"
    );
}

/// A busy port of the HTTP face, or of metrics, is named by its own flag and variable, not by
/// `--listen` (whose port was free).
#[test]
fn a_busy_port_names_the_flag_and_variable_of_its_own_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for (flag, env) in [
        ("--http-listen", "TAPEDECK_HTTP_LISTEN"),
        ("--metrics-listen", "TAPEDECK_METRICS_LISTEN"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (status, stderr) = run_binary_to_exit(&[
            OsStr::new("--listen"),
            OsStr::new("127.0.0.1:0"),
            OsStr::new(flag),
            OsStr::new(&addr),
            OsStr::new("--data-dir"),
            dir.path().as_os_str(),
        ]);
        assert_eq!(status.code(), Some(1), "{flag}: {stderr}");
        assert_one_clear_line(&stderr, &format!("cannot listen on {addr}"), flag);
        assert!(stderr.contains(env), "{flag}: {stderr}");
        assert!(!stderr.contains("--listen "), "{flag}: {stderr}");
        assert!(!dir.path().join("tapedeck.redb").exists(), "{flag}");
    }
}

#[test]
fn a_database_in_use_by_another_server_is_refused_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let running = BinaryServer::spawn(dir.path(), &[]);
    assert_refused(dir.path(), "in use by another process", "--data-dir");
    drop(running);
}

#[tokio::test]
async fn a_database_left_by_sigkill_replays_its_log_and_keeps_its_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(dir.path(), &[]);
    let client = server.recorder().await;
    record_all(&client, b"finished", &["all ", "of ", "it"]).await;
    let live = Recording::open(&client, b"live").await;
    live.send("part").await;
    let mut stream = replay_when_live(&client, b"live", 0).await.unwrap();
    let mut seen = String::new();
    while seen.len() < "part".len() {
        seen.push_str(&stream.message().await.unwrap().unwrap().content);
    }
    server.kill();

    // No grace period: the recording left live is detached at start-up and, with nobody to
    // resume it, interrupted at once.
    let (server, log) = BinaryServer::spawn_logged(dir.path(), &["--producer-grace", "0s"]);
    let lines = log.lock().unwrap().clone();
    // redb is back at its last checkpoint (quick-repair: no walk of the file); what was
    // committed since is replayed from the write-ahead log.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("replayed the write-ahead log")),
        "no replay logged:\n{}",
        lines.join("\n")
    );
    assert!(lines.iter().any(|l| l.contains("detached")), "{lines:?}");
    let client = server.recorder().await;
    let finished = replay_text(&client, b"finished").await.unwrap();
    assert_eq!(finished.text, "all of it");
    assert_eq!(finished.status.as_deref(), Some("completed"));
    let interrupted = replay_text(&client, b"live").await.unwrap();
    assert_eq!(interrupted.text, "part");
    assert_eq!(interrupted.status.as_deref(), Some("interrupted"));
    let live_now = client
        .clone()
        .check_recordings(CheckRecordingsRequest {
            conversation_ids: vec![b"live".to_vec(), b"finished".to_vec()],
        })
        .await
        .unwrap()
        .into_inner()
        .conversation_ids;
    assert!(live_now.is_empty(), "{live_now:?}");
    // The recovered file takes new recordings and closes cleanly.
    record_all(&client, b"after", &["new"]).await;
    assert!(server.terminate().await.success());
    let (server, log) = BinaryServer::spawn_logged(dir.path(), &[]);
    assert!(
        !log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("repaired it") || l.contains("replaying")),
        "a clean shutdown needs no repair and leaves nothing to replay"
    );
    assert_eq!(
        replay_text(&server.recorder().await, b"after")
            .await
            .unwrap()
            .text,
        "new"
    );
}
