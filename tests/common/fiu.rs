//! libfiu (Debian's `fiu-utils`), preloaded into the real binary: failure points of the POSIX
//! calls (syncs, writes) enabled in a running server with `fiu-ctrl`.
use std::path::Path;
use std::process::Command;

/// libfiu's preload libraries: the remote control, and the POSIX failure points.
pub(crate) const RUN_PRELOAD: &str = "/usr/lib/fiu/fiu_run_preload.so";
pub(crate) const POSIX_PRELOAD: &str = "/usr/lib/fiu/fiu_posix_preload.so";
/// EIO and ENOSPC, as libfiu's `failinfo` (the errno the failing call sets).
pub(crate) const EIO: i32 = 5;
pub(crate) const ENOSPC: i32 = 28;

/// Fails the test, saying what to install, when libfiu is missing.
pub(crate) fn require_libfiu() {
    let missing: Vec<_> = [RUN_PRELOAD, POSIX_PRELOAD, "/usr/bin/fiu-ctrl"]
        .into_iter()
        .filter(|path| !Path::new(path).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "{missing:?} missing: install Debian's fiu-utils (scripts/test.sh does, as root)"
    );
}

/// Runs libfiu's remote `command` in process `pid`.
pub(crate) fn fiu(fifo_prefix: &Path, pid: i32, command: &str) {
    let out = Command::new("fiu-ctrl")
        .arg("-f")
        .arg(fifo_prefix)
        .args(["-c", command])
        .arg(pid.to_string())
        .output()
        .expect("fiu-ctrl runs");
    assert!(
        out.status.success(),
        "fiu-ctrl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes every `fdatasync` and `fsync` of process `pid` fail with EIO from now on.
pub(crate) fn fail_syncs(fifo_prefix: &Path, pid: i32) {
    for point in ["posix/io/sync/fdatasync", "posix/io/sync/fsync"] {
        fiu(
            fifo_prefix,
            pid,
            &format!("enable name={point},failinfo={EIO}"),
        );
    }
}

/// The environment that preloads libfiu, remote-controlled through `fifo_prefix`.
pub(crate) fn preloaded(fifo_prefix: &Path) -> [(String, String); 2] {
    [
        (
            "LD_PRELOAD".to_string(),
            format!("{RUN_PRELOAD} {POSIX_PRELOAD}"),
        ),
        (
            "FIU_CTRL_FIFO".to_string(),
            fifo_prefix.display().to_string(),
        ),
    ]
}
