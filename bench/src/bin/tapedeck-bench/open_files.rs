//! The open-file limit of a bench that holds thousands of connections: raised as far as it
//! goes, which the servers it spawns inherit. Shared by both bench binaries.
use anyhow::{Context, Result};

/// Raises this process's open-file limit: as root to the kernel's ceiling (`fs.nr_open`),
/// otherwise to its hard maximum.
///
/// Fails when the limit cannot be set.
pub(crate) fn raise_to_maximum() -> Result<()> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    if let Some(ceiling) = ceiling {
        let raised = Rlimit {
            current: Some(ceiling),
            maximum: Some(ceiling),
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return Ok(());
        }
    }
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
