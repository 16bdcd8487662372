//! The machine the tests run on: whether they run as root, a tmpfs mounted for a test,
//! a process's resident memory, a filesystem's free space.
use std::path::{Path, PathBuf};

/// Whether a test that mounts a tmpfs (root only) should run: only when `TAPEDECK_ROOT_TESTS=1`
/// asks for it, as CI does. Otherwise it says, past the test harness's capture so that the
/// `cargo test` output shows it, that `test` was skipped and why.
pub(crate) fn root_tests_enabled(test: &str) -> bool {
    use std::io::Write;
    if std::env::var("TAPEDECK_ROOT_TESTS").as_deref() == Ok("1") {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "note: {test} SKIPPED: it mounts a tmpfs, which needs root; run it as root with \
         TAPEDECK_ROOT_TESTS=1 (CI does)"
    );
    false
}

/// Whether this process runs as root (which ignores permission bits).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A tmpfs mounted by the test on a fresh directory; unmounted when dropped. Tests that need
/// one ask [`root_tests_enabled`] first; once asked for, a failed mount is a clear failure.
pub(crate) struct Tmpfs {
    pub(crate) path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_bytes`; `read_only` mounts it read-only.
    pub(crate) fn mount(size_bytes: u64, read_only: bool) -> Tmpfs {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let target = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let options = std::ffi::CString::new(format!("size={size_bytes},mode=0755")).unwrap();
        let flags = if read_only { libc::MS_RDONLY } else { 0 };
        let mounted = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                flags,
                options.as_ptr().cast(),
            )
        };
        if mounted != 0 {
            panic!(
                "cannot mount a tmpfs on {}: {}. This test needs root (or CAP_SYS_ADMIN) to \
                 mount a small filesystem; run it as root, as CI does",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        Tmpfs { path, _dir: dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        let target = std::ffi::CString::new(self.path.as_os_str().as_bytes()).unwrap();
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Resident memory of process `pid` in KiB, from `/proc/<pid>/status`.
pub(crate) fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("no VmRSS line")
}

/// Free bytes on the filesystem holding `path` (for unprivileged users, as `df` shows them).
pub(crate) fn free_bytes(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut stats) }, 0);
    stats.f_bavail as u64 * stats.f_frsize as u64
}

/// Runs `command` to its end as `Command::output` does, but for no longer than `limit`: a
/// child still running then (a Node or Python driver stuck on a server that never answers) is
/// killed, and the test fails with what it printed so far.
pub(crate) fn output_within(
    command: &mut std::process::Command,
    limit: std::time::Duration,
) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let pid = child.id() as i32;
    let (exited, exit) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = exited.send(child.wait());
    });
    let status = match exit.recv_timeout(limit) {
        Ok(status) => status.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) of the child this function started; its waiter reaps it.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!(
                "{command:?} ran past {limit:?}; it printed:\n{}\n{}",
                String::from_utf8_lossy(&stdout.join().unwrap()),
                String::from_utf8_lossy(&stderr.join().unwrap())
            );
        }
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}
