//! Bad files and settings, with the real binary: a damaged database, a data dir that is a file
//! or read-only, a port or database already in use. Each start is refused with a non-zero exit
//! and exactly one line saying what is wrong and what to do, never a panic or a backtrace. A
//! database left behind by SIGKILL is recovered on the next start (rolled forward through its
//! log) and keeps its recordings.
use crate::common;

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

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
async fn a_database_left_by_sigkill_rolls_forward_through_its_log_and_keeps_its_recordings() {
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
    // committed since is rolled forward from the write-ahead log.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("rolled the write-ahead log forward")),
        "no rolling forward logged:\n{}",
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
            .any(|l| l.contains("repaired it") || l.contains("rolling the write-ahead log")),
        "a clean shutdown needs no repair and leaves nothing to roll forward"
    );
    assert_eq!(
        replay_text(&server.recorder().await, b"after")
            .await
            .unwrap()
            .text,
        "new"
    );
}

/// Base seed of the damage below; `TAPEDECK_FUZZ_SEED` replays another run.
const FUZZ_SEED: u64 = 0x7a9e_dec4;
/// Damaged files tried.
const FUZZ_CASES: u64 = 100;
/// redb's page size: damage lands on whole pages' worth of the file.
const PAGE: u64 = 4096;
/// Cases run at once: each mostly waits on the processes it starts.
const FUZZ_WORKERS: usize = 4;

/// A small xorshift generator: the same seed damages the same bytes.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Writes 1 to 3 runs of random bytes (1 byte to a whole page each) over random pages of
/// `path`; says where, for the failure message.
fn damage(path: &Path, rng: &mut Rng) -> String {
    let mut bytes = std::fs::read(path).unwrap();
    let pages = (bytes.len() as u64).div_ceil(PAGE);
    let mut what = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let page = rng.below(pages);
        let len = 1 + rng.below(PAGE);
        let start = (page * PAGE + rng.below(PAGE - len + 1)) as usize;
        let end = (start + len as usize).min(bytes.len());
        for byte in &mut bytes[start..end] {
            *byte = rng.next() as u8;
        }
        what.push(format!("{start}..{end} (page {page})"));
    }
    std::fs::write(path, bytes).unwrap();
    what.join(", ")
}

/// redb's own verdict on a copy of `path`, opened for real: whether its check passes. A panic
/// of redb's open is a damaged file too.
fn redb_says_intact(path: &Path) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.redb");
    std::fs::copy(path, &copy).unwrap();
    std::panic::catch_unwind(|| {
        redb::Database::open(&copy)
            .ok()
            .and_then(|mut db| db.check_integrity().ok())
            == Some(true)
    })
    .unwrap_or(false)
}

/// The bytes and modification time of `path`.
fn snapshot(path: &Path) -> (Vec<u8>, std::time::SystemTime) {
    let bytes = std::fs::read(path).unwrap();
    let modified = std::fs::metadata(path).unwrap().modified().unwrap();
    (bytes, modified)
}

/// How a run of the binary ended: exit code (`None`: it was serving, and was killed) and
/// stderr.
struct Outcome {
    code: Option<i32>,
    stderr: String,
}

/// Runs `tapedeck ARGS` to its end.
fn run_tool(args: &[&OsStr]) -> Outcome {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    Outcome {
        code: output.status.code(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Starts `tapedeck serve` on `data_dir`: either it refuses (its exit code and stderr), or it
/// listens, and is killed (`code: None`).
fn try_serve(data_dir: &Path) -> Outcome {
    use std::io::BufRead;
    use std::sync::mpsc::RecvTimeoutError;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tapedeck"))
        .args(["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"])
        .args(["--log-format", "json", "--data-dir"])
        .arg(data_dir)
        .env("RUST_BACKTRACE", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines, line) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for text in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(text);
        }
    });
    let mut logged = Vec::new();
    loop {
        match line.recv_timeout(WAIT) {
            Ok(text) if text.contains("tapedeck listening") => {
                child.kill().unwrap();
                child.wait().unwrap();
                return Outcome {
                    code: None,
                    stderr: String::new(),
                };
            }
            Ok(text) => logged.push(text),
            Err(RecvTimeoutError::Disconnected) => {
                let status = child.wait().unwrap();
                return Outcome {
                    code: status.code(),
                    stderr: logged.join("\n"),
                };
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("serve neither listened nor exited in {WAIT:?}: {logged:?}");
            }
        }
    }
}

/// Checks that no run panicked, and that a refusal was exit code 1 and one clear line (serve
/// may log, as JSON, what it did before it found the damage: a log rolled forward, say; its refusal
/// is then the last line).
fn assert_clean(outcome: &Outcome, what: &str) {
    let stderr = &outcome.stderr;
    assert_ne!(outcome.code, Some(101), "{what} panicked:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{what}:\n{stderr}");
    if outcome.code.is_none_or(|code| code == 0) {
        return;
    }
    assert_eq!(outcome.code, Some(1), "{what}:\n{stderr}");
    let said: Vec<&str> = stderr
        .lines()
        .filter(|line| serde_json::from_str::<serde_json::Value>(line).is_err())
        .collect();
    assert_eq!(said.len(), 1, "{what}: not one line:\n{stderr}");
    assert!(said[0].starts_with("tapedeck: error: "), "{what}: {stderr}");
    assert_eq!(stderr.lines().last(), Some(said[0]), "{what}: {stderr}");
}

/// Random bytes over random pages of a real file, 100 times: `db stats`, `db check`, `db
/// compact` and `serve` each refuse with one line and exit code 1, or succeed when the damage
/// was harmless; none ever panics. The tools agree with redb's own check, run on a copy
/// opened for real: a file it finds damaged is refused ("is damaged") and never written
/// (bytes and mtime compared; compact refuses it untouched), and only a file it passes is
/// reported on. serve checks no more than it reads at start-up (a whole-file check would cost
/// every restart a read of the file): it may start on damage it never reads, never panics.
#[tokio::test]
async fn damaged_files_are_refused_by_every_tool_in_one_line_and_never_written() {
    let seed = std::env::var("TAPEDECK_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(FUZZ_SEED);
    let template = tempfile::tempdir().unwrap();
    let server = BinaryServer::spawn(template.path(), &[]);
    let client = server.recorder().await;
    for n in 0..24 {
        let id = format!("fuzz-{n}");
        let tokens: Vec<String> = (0..8).map(|t| format!("token {t} of {id}; ")).collect();
        let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
        record_all(&client, id.as_bytes(), &tokens).await;
    }
    assert!(server.terminate().await.success());
    // Free pages given back, so that most damage lands on pages in use.
    let compacted = run_tool(&[
        OsStr::new("db"),
        OsStr::new("compact"),
        OsStr::new("--data-dir"),
        template.path().as_os_str(),
    ]);
    assert_eq!(compacted.code, Some(0), "{}", compacted.stderr);

    // redb's panics in the oracle are expected: kept out of the test's output.
    let previous = std::sync::Arc::new(std::panic::take_hook());
    let others = previous.clone();
    std::panic::set_hook(Box::new(move |info| {
        let name = std::thread::current().name().map(str::to_owned);
        if !name.is_some_and(|name| name.starts_with("fuzz-worker")) {
            others(info);
        }
    }));
    let started = std::time::Instant::now();
    let next = AtomicU64::new(0);
    let damaged = AtomicU64::new(0);
    let template = template.path();
    let results = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..FUZZ_WORKERS)
            .map(|n| {
                std::thread::Builder::new()
                    .name(format!("fuzz-worker-{n}"))
                    .spawn_scoped(scope, || {
                        loop {
                            let case = next.fetch_add(1, Ordering::Relaxed);
                            if case >= FUZZ_CASES {
                                return None;
                            }
                            // A failure names its seed and case: rerun it alone with them.
                            let found =
                                std::panic::catch_unwind(|| fuzz_case(template, seed, case));
                            match found {
                                Ok(true) => {
                                    damaged.fetch_add(1, Ordering::Relaxed);
                                }
                                Ok(false) => {}
                                Err(panic) => return Some(panic),
                            }
                        }
                    })
                    .unwrap()
            })
            .collect();
        workers
            .into_iter()
            .filter_map(|w| w.join().ok().flatten())
            .collect::<Vec<_>>()
    });
    let _ = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| previous(info)));
    if let Some(panic) = results.into_iter().next() {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!("{message}");
    }
    let damaged = damaged.into_inner();
    eprintln!(
        "{FUZZ_CASES} damaged files (seed {seed}): {damaged} refused as damaged, {} harmless, \
         in {:?}",
        FUZZ_CASES - damaged,
        started.elapsed()
    );
    assert!(
        damaged > FUZZ_CASES / 2,
        "the damage was mostly harmless: {damaged}"
    );
}

/// Case `case` of the run seeded `seed`, on a copy of the data dir `template`; whether redb's
/// check found the file damaged.
fn fuzz_case(template: &Path, seed: u64, case: u64) -> bool {
    let mut rng = Rng::new(seed ^ case);
    let copy_of = |from: &Path| {
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
        dir
    };
    let dir = copy_of(template);
    let path = dir.path().join("tapedeck.redb");
    let hit = damage(&path, &mut rng);
    let case_name = format!("seed {seed} case {case} (damage at {hit})");
    let fine = redb_says_intact(&path);
    // serve runs on a copy of its own: it may recover the file in place.
    let serve_dir = copy_of(dir.path());
    for tool in ["stats", "check", "compact"] {
        let before = snapshot(&path);
        let outcome = run_tool(&[
            OsStr::new("db"),
            OsStr::new(tool),
            OsStr::new("--data-dir"),
            dir.path().as_os_str(),
        ]);
        let what = format!("db {tool}, {case_name}");
        assert_clean(&outcome, &what);
        assert_eq!(
            outcome.code == Some(0),
            fine,
            "{what}: redb's check says intact={fine}, the tool exited {:?}:\n{}",
            outcome.code,
            outcome.stderr
        );
        if !fine {
            assert!(
                outcome.stderr.contains("is damaged"),
                "{what}: {}",
                outcome.stderr
            );
        }
        if tool != "compact" || !fine {
            assert!(snapshot(&path) == before, "{what}: the file was written");
        }
    }
    assert_clean(&try_serve(serve_dir.path()), &format!("serve, {case_name}"));
    !fine
}
