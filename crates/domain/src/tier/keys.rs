//! The object store's key layout. Every name is made of the conversation's storage key in hex
//! and zero-padded numbers, never of the id a producer sent: an id such as `../x` or one with
//! control characters cannot reach outside the prefix or confuse a listing.
//!
//! ```text
//! PREFIX/recordings/KEY/CREATED-GENERATION-FINISHED   a sealed recording (one per end)
//! PREFIX/newest/KEY                                   a copy of the newest of them, if named
//! PREFIX/expiry/EXPIRES/KEY/CREATED-GENERATION-FINISHED   when that copy is collected
//! PREFIX/tombstones/KEY                               a deleted or collected recording
//! PREFIX/forget/FORGOTTEN/KEY                         when that tombstone goes
//! ```
//!
//! Numbers are 20 digits, so names sort as their numbers do: a conversation's newest copy is
//! its last name, and the schedules list in time order. `newest/KEY` lets a reader find that
//! copy with one request instead of a listing and a read (see `newest`).
use object_store::path::Path;

/// One sealed copy of a recording: the recording it is, and the end it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// When the recording started, in ms since the epoch.
    pub created_ms: u64,
    /// Its generation (the conversation's count of recordings).
    pub generation: u64,
    /// When it ended; a reopened recording that ends again is another version.
    pub finished_ms: u64,
}

impl Version {
    fn name(&self) -> String {
        format!(
            "{:020}-{:020}-{:020}",
            self.created_ms, self.generation, self.finished_ms
        )
    }

    fn parse(name: &str) -> Option<Version> {
        let mut parts = name.split('-').map(parse_number);
        let version = Version {
            created_ms: parts.next()??,
            generation: parts.next()??,
            finished_ms: parts.next()??,
        };
        parts.next().is_none().then_some(version)
    }
}

/// The names under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: Path,
}

impl Keys {
    /// The names under `prefix`.
    pub fn new(prefix: Path) -> Keys {
        Keys { prefix }
    }

    /// The prefix itself.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    fn under(&self, parts: &[&str]) -> Path {
        parts
            .iter()
            .fold(self.prefix.clone(), |path, part| path.child(*part))
    }

    /// Where conversation `key`'s sealed copies are.
    pub fn recordings_of(&self, key: u128) -> Path {
        self.under(&["recordings", &hex(key)])
    }

    /// One sealed copy.
    pub fn recording(&self, key: u128, version: Version) -> Path {
        self.under(&["recordings", &hex(key), &version.name()])
    }

    /// The copy of conversation `key`'s newest sealed copy (see `newest`).
    pub fn newest(&self, key: u128) -> Path {
        self.under(&["newest", &hex(key)])
    }

    /// The marker that has copy `version` collected at `expires_ms`.
    pub fn expiry(&self, expires_ms: u64, key: u128, version: Version) -> Path {
        self.under(&["expiry", &number(expires_ms), &hex(key), &version.name()])
    }

    /// Every expiry marker.
    pub fn expiries(&self) -> Path {
        self.under(&["expiry"])
    }

    /// Conversation `key`'s tombstone.
    pub fn tombstone(&self, key: u128) -> Path {
        self.under(&["tombstones", &hex(key)])
    }

    /// The marker that has `key`'s tombstone forgotten at `forgotten_ms`.
    pub fn forget(&self, forgotten_ms: u64, key: u128) -> Path {
        self.under(&["forget", &number(forgotten_ms), &hex(key)])
    }

    /// Every forget marker.
    pub fn forgets(&self) -> Path {
        self.under(&["forget"])
    }

    /// The copy a name under [`recordings_of`](Self::recordings_of) is, if it is one.
    pub fn version_of(&self, path: &Path) -> Option<Version> {
        Version::parse(path.filename()?)
    }

    /// `(key, version)` of a sealed copy's name.
    pub fn parse_recording(&self, path: &Path) -> Option<(u128, Version)> {
        match self.rest(path, "recordings")?.as_slice() {
            [key, version] => Some((parse_hex(key)?, Version::parse(version)?)),
            _ => None,
        }
    }

    /// `(expires at, key, version)` of an expiry marker's name.
    pub fn parse_expiry(&self, path: &Path) -> Option<(u64, u128, Version)> {
        let rest: Vec<_> = self.rest(path, "expiry")?;
        match rest.as_slice() {
            [at, key, version] => {
                Some((parse_number(at)?, parse_hex(key)?, Version::parse(version)?))
            }
            _ => None,
        }
    }

    /// `(forgotten at, key)` of a forget marker's name.
    pub fn parse_forget(&self, path: &Path) -> Option<(u64, u128)> {
        match self.rest(path, "forget")?.as_slice() {
            [at, key] => Some((parse_number(at)?, parse_hex(key)?)),
            _ => None,
        }
    }

    /// The parts of `path` after `PREFIX/kind`.
    fn rest(&self, path: &Path, kind: &str) -> Option<Vec<String>> {
        let mut parts = path.prefix_match(&self.prefix)?;
        if parts.next()?.as_ref() != kind {
            return None;
        }
        Some(parts.map(|part| part.as_ref().to_string()).collect())
    }
}

fn hex(key: u128) -> String {
    format!("{key:032x}")
}

fn number(value: u64) -> String {
    format!("{value:020}")
}

fn parse_number(text: &str) -> Option<u64> {
    (text.len() == 20 && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

fn parse_hex(text: &str) -> Option<u128> {
    (text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u128::from_str_radix(text, 16).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ConversationId;

    fn keys() -> Keys {
        Keys::new(Path::from("tenant/tapedeck"))
    }

    #[test]
    fn names_hold_no_raw_id_and_stay_under_the_prefix() {
        let version = Version {
            created_ms: 1,
            generation: 2,
            finished_ms: 3,
        };
        for raw in [
            &b"../../etc/passwd"[..],
            b"a/b\\c",
            b"\x00\x1b[31m\n",
            b"%2e%2e",
            b".",
        ] {
            let key = ConversationId::parse(raw).unwrap().key();
            for path in [
                keys().recording(key, version),
                keys().newest(key),
                keys().expiry(9, key, version),
                keys().tombstone(key),
                keys().forget(9, key),
            ] {
                let text = path.as_ref();
                assert!(text.starts_with("tenant/tapedeck/"), "{text}");
                assert!(
                    text.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'/' || b == b'-'),
                    "{text}"
                );
                assert!(!text.contains(".."), "{text}");
            }
        }
    }

    #[test]
    fn names_parse_back_and_sort_as_their_numbers() {
        let older = Version {
            created_ms: 9,
            generation: 1,
            finished_ms: 10,
        };
        let newer = Version {
            finished_ms: 100,
            ..older
        };
        let key = 0xabcdef;
        let (a, b) = (keys().recording(key, older), keys().recording(key, newer));
        assert!(a.as_ref() < b.as_ref());
        assert_eq!(keys().version_of(&b), Some(newer));
        assert_eq!(keys().parse_recording(&b), Some((key, newer)));
        let marker = keys().expiry(42, key, newer);
        assert_eq!(keys().parse_expiry(&marker), Some((42, key, newer)));
        assert_eq!(keys().parse_forget(&keys().forget(7, key)), Some((7, key)));
        assert_eq!(keys().parse_expiry(&keys().forget(7, key)), None);
    }
}
