//! The Python that drives tapedeck with grpcio: the venv `scripts/test.sh` prepares (or
//! `TAPEDECK_TEST_PYTHON`), and stubs generated from `proto/` with grpcio-tools.
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The Python of the test venv; fails the test, saying how to make it, when it is missing.
pub(crate) fn python() -> PathBuf {
    let venv = format!("{ROOT}/target/python-client/bin/python");
    let python: PathBuf = std::env::var_os("TAPEDECK_TEST_PYTHON").map_or(venv.into(), Into::into);
    assert!(
        python.exists(),
        "no Python environment at {}; run scripts/test.sh",
        python.display()
    );
    python
}

/// Generates the Python stubs of every service in `proto/` into `out` (importable as
/// `memory.v1.…` and `tapedeck.v1.…` with `out` on `PYTHONPATH`).
pub(crate) fn generate_stubs(out: &Path) {
    let protos = [
        "memory/v1/response_recorder.proto",
        "memory/v1/response_resumer.proto",
        "tapedeck/v1/recordings.proto",
    ];
    let status = Command::new(python())
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("-I{ROOT}/proto"))
        .arg(format!("--python_out={}", out.display()))
        .arg(format!("--grpc_python_out={}", out.display()))
        .args(protos.map(|proto| format!("{ROOT}/proto/{proto}")))
        .status()
        .expect("cannot run python");
    assert!(status.success(), "grpc_tools.protoc failed");
}

/// A command running `script` (a path under the repository) with the stubs in `stubs`.
pub(crate) fn script(stubs: &Path, script: &str) -> Command {
    let mut command = Command::new(python());
    command
        .arg(format!("{ROOT}/{script}"))
        .env("PYTHONPATH", stubs);
    command
}
