//! A failing disk under the real binary: libfiu (Debian's `fiu-utils`, which the test command
//! installs) is preloaded into the server, and once producers have recordings acknowledged,
//! `fiu-ctrl` makes every `fdatasync` and `fsync` fail with EIO, or every write fail with
//! ENOSPC. The server must stop acknowledging, refuse its producers, and say why in its log;
//! started again without libfiu on the same data dir, it must replay every acknowledged byte
//! and nothing never sent.
use crate::common;

use std::path::Path;
use std::time::Duration;

use common::fiu::*;
use common::*;

/// Records `count` tokens on the legacy API, each acknowledged; returns the producer and the
/// text acknowledged.
async fn acknowledged(
    resumer: &ResumerClient,
    id: &[u8],
    count: usize,
) -> (LegacyProducer, String) {
    let mut producer = LegacyProducer::start(resumer, id, "t0 ").await;
    assert!(producer.ack().await.success);
    let mut acked = String::from("t0 ");
    for i in 1..count {
        let text = format!("t{i} ");
        producer.send(id, &text, false).await;
        assert!(producer.ack().await.success, "{text} before the failure");
        acked.push_str(&text);
    }
    (producer, acked)
}

/// A server with libfiu preloaded, its data dir `data` and its remote control `fiu-ctrl` in
/// the returned temp dir; its log kept.
fn preloaded_server() -> (tempfile::TempDir, BinaryServer, LogLines) {
    require_libfiu();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let prefix = dir.path().join("fiu-ctrl");
    let (server, log) = BinaryServer::spawn_logged_with_env(&data, &[], &preloaded(&prefix));
    (dir, server, log)
}

/// Restarts the server on `data` without libfiu and checks `id` holds every acknowledged
/// byte and nothing never sent. Left `recording` in the file, it is detached after the
/// restart: with no grace it ends at once, as interrupted, and its replay ends.
async fn kept_after_a_restart(data: &Path, id: &[u8], acked: &str, sent: &str) {
    let server = BinaryServer::spawn(data, &["--producer-grace", "0s"]);
    let replayed = replay_text(&server.recorder().await, id)
        .await
        .expect("the recording replays after the restart");
    assert_kept(
        &replayed.text,
        acked,
        sent,
        std::str::from_utf8(id).unwrap(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_syncs_fail_stops_acknowledging_and_loses_nothing_acknowledged() {
    let (dir, server, log) = preloaded_server();
    let (data, fifo_prefix) = (dir.path().join("data"), dir.path().join("fiu-ctrl"));
    let resumer = server.resumer().await;
    let id = b"failing-disk";
    let (mut producer, acked) = acknowledged(&resumer, id, 50).await;

    fail_syncs(&fifo_prefix, server.pid());
    let text = "t50 ";
    let mut sent = acked.clone();
    sent.push_str(text);
    producer.send(id, text, false).await;
    // The legacy API refuses in its answer (`success: false`, with why), or ends the call.
    let refused = match producer.next().await {
        Ok(Some(ack)) => {
            assert!(
                !ack.success,
                "{text} was acknowledged on a disk whose syncs fail"
            );
            Some(ack.error_message)
        }
        Ok(None) => None,
        Err(status) => Some(status.message().to_string()),
    };
    let refused = refused.expect("the producer is refused once syncs fail");
    assert!(!refused.is_empty(), "the refusal says why");
    // A new recording is refused too, and the log says why.
    let mut fresh = LegacyProducer::start(&resumer, b"after-the-failure", "x").await;
    let answer = fresh.next().await;
    assert!(
        !matches!(answer, Ok(Some(ref ack)) if ack.success),
        "a new recording was acknowledged on a disk whose syncs fail: {answer:?}"
    );
    let lines = log.lock().unwrap().join("\n");
    assert!(
        lines.contains("Input/output error") || lines.contains("os error 5"),
        "the log names the failing sync:\n{lines}"
    );

    server.kill();
    kept_after_a_restart(&data, id, &acked, &sent).await;
}

/// ENOSPC on every write (the log's and the database's): producers are refused with the disk
/// full, the log says so, nothing acknowledged is lost; once writes succeed again the server
/// takes new recordings by itself, and after a restart every acknowledged byte is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_disk_fills_refuses_then_recovers_and_loses_nothing_acknowledged() {
    let (dir, server, log) = preloaded_server();
    let (data, fifo_prefix) = (dir.path().join("data"), dir.path().join("fiu-ctrl"));
    let resumer = server.resumer().await;
    let id = b"full-disk";
    let (mut producer, acked) = acknowledged(&resumer, id, 50).await;

    let write_fails = format!("enable name=posix/io/rw/pwrite,failinfo={ENOSPC}");
    fiu(&fifo_prefix, server.pid(), &write_fails);
    let text = "t50 ";
    let mut sent = acked.clone();
    sent.push_str(text);
    producer.send(id, text, false).await;
    match producer.next().await {
        Ok(Some(ack)) => {
            assert!(!ack.success, "{text} was acknowledged on a full disk");
            assert!(ack.error_message.contains("full"), "{ack:?}");
        }
        Ok(None) => {}
        Err(status) => assert!(status.message().contains("full"), "{status:?}"),
    }
    let lines = log.lock().unwrap().join("\n");
    assert!(
        lines.contains("No space left on device") || lines.contains("os error 28"),
        "the log names the full disk:\n{lines}"
    );

    // Room again: a new recording is taken within a few seconds (the store looks for room
    // once a second).
    fiu(
        &fifo_prefix,
        server.pid(),
        "disable name=posix/io/rw/pwrite",
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut fresh = LegacyProducer::start(&resumer, b"after-the-room", "x").await;
        if matches!(fresh.next().await, Ok(Some(ref ack)) if ack.success) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new recording was taken once the disk had room"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.kill();
    kept_after_a_restart(&data, id, &acked, &sent).await;
}
