//! The open-file limit of a bench that holds thousands of connections: raised to its hard
//! maximum, which the servers it spawns inherit. Shared by both bench binaries.
use anyhow::{Context, Result};

/// Raises this process's open-file limit to its hard maximum.
///
/// Fails when the limit cannot be set.
pub(crate) fn raise_to_maximum() -> Result<()> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let files = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: files.maximum,
            maximum: files.maximum,
        },
    )
    .context("raising the open-file limit to its maximum")
}
