//! This instance's id, kept in the data dir so that it outlives restarts, and the owner
//! tokens made of it.
use std::path::Path;

use crate::error::{Error, Result};

/// The owner token of generation `generation` of a conversation's recording on `instance`.
pub(super) fn owner_token(instance: &str, generation: u64) -> String {
    format!("{instance}:{generation}")
}

/// Name of the file in the data dir that keeps this instance's id.
pub const INSTANCE_FILE: &str = "tapedeck.instance";

/// This instance's id: read from the data dir, or made and written there on first start. It
/// names the instance's inbox and is part of its owner tokens, so it must outlive restarts:
/// after one, the instance takes its own entries back rather than competing with them.
pub(super) fn instance_id(data_dir: &Path) -> Result<String> {
    let path = data_dir.join(INSTANCE_FILE);
    let failed = |err: std::io::Error| {
        Error::Setup(crate::error::Setup::Locator {
            reason: format!("cannot keep the instance id in {}: {err}", path.display()),
        })
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => match uuid::Uuid::parse_str(text.trim()) {
            Ok(id) => Ok(id.to_string()),
            Err(_) => Err(Error::Setup(crate::error::Setup::Locator {
                reason: format!("{} does not hold a UUID", path.display()),
            })),
        },
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4().to_string();
            let staging = data_dir.join(format!("{INSTANCE_FILE}.new"));
            std::fs::write(&staging, &id).map_err(failed)?;
            std::fs::File::open(&staging)
                .and_then(|f| f.sync_all())
                .map_err(failed)?;
            std::fs::rename(&staging, &path).map_err(failed)?;
            Ok(id)
        }
        Err(err) => Err(failed(err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instance_id_outlives_a_restart_and_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let first = instance_id(dir.path()).unwrap();
        assert_eq!(instance_id(dir.path()).unwrap(), first);
        std::fs::write(dir.path().join(INSTANCE_FILE), "not a uuid").unwrap();
        let err = instance_id(dir.path()).unwrap_err().to_string();
        assert!(err.contains("does not hold a UUID"), "{err}");
    }
}
