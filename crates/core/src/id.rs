//! `ConversationId`: the wire forms of a conversation id (16 raw bytes, UUID text, or any other
//! short UTF-8 text) and the 128-bit key they all map to.
use uuid::Uuid;

use crate::error::{Error, Result};

/// Longest accepted textual id, in bytes.
pub const MAX_TEXT_ID_BYTES: usize = 256;

/// Namespace of the name-based (v5) UUIDs made from textual ids that are not UUIDs.
const TEXT_ID_NAMESPACE: Uuid = Uuid::from_u128(0x7a9e_61c4_0b5d_4f8e_9c3a_2d1e_8f60_b7a4);

/// A conversation, as its storage key plus the bytes the caller used for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationId {
    uuid: Uuid,
    original: Vec<u8>,
}

impl ConversationId {
    /// Parses a wire id: 16 bytes are a big-endian UUID; UUID text (hyphenated or 32 hex digits,
    /// any case) is that UUID; other UTF-8 text of 1-256 bytes maps to a UUIDv5 of its bytes.
    ///
    /// Fails with `InvalidConversationId` for an empty, longer, or non-UTF-8 id.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let uuid = if bytes.is_empty() {
            return Err(invalid("it is empty"));
        } else if bytes.len() == 16 {
            // Sixteen bytes are a binary UUID, even when they happen to be valid text.
            Uuid::from_slice(bytes).map_err(|e| invalid(&e.to_string()))?
        } else if bytes.len() > MAX_TEXT_ID_BYTES {
            return Err(invalid(&format!(
                "it is {} bytes long; text ids are at most {MAX_TEXT_ID_BYTES} bytes",
                bytes.len()
            )));
        } else {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| invalid("it is neither a 16-byte binary UUID nor UTF-8 text"))?;
            parse_uuid_text(text).unwrap_or_else(|| Uuid::new_v5(&TEXT_ID_NAMESPACE, bytes))
        };
        Ok(Self {
            uuid,
            original: bytes.to_vec(),
        })
    }

    /// The storage key.
    pub fn key(&self) -> u128 {
        self.uuid.as_u128()
    }

    /// The UUID every form of this id maps to.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// The id exactly as the caller sent it.
    pub fn original(&self) -> &[u8] {
        &self.original
    }
}

/// The id as the caller sent it: its text (control characters escaped, so a log line stays
/// one line), or the UUID of a 16-byte binary id.
impl std::fmt::Display for ConversationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match std::str::from_utf8(&self.original) {
            Ok(text) if self.original.len() != 16 => write!(f, "{}", text.escape_debug()),
            _ => self.uuid.fmt(f),
        }
    }
}

/// Accepts only the hyphenated and the 32-hex-digit simple forms (not braced or URN forms,
/// which are ordinary text ids here).
fn parse_uuid_text(text: &str) -> Option<Uuid> {
    match text.len() {
        32 | 36 => Uuid::try_parse(text).ok(),
        _ => None,
    }
}

fn invalid(reason: &str) -> Error {
    Error::InvalidConversationId {
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "6F1C2B0E-3D4A-4B5C-8D9E-0A1B2C3D4E5F";

    #[test]
    fn binary_and_text_forms_share_a_key() {
        let uuid = Uuid::parse_str(TEXT).unwrap();
        let binary = ConversationId::parse(uuid.as_bytes()).unwrap();
        let hyphenated = ConversationId::parse(TEXT.as_bytes()).unwrap();
        let simple = ConversationId::parse(uuid.simple().to_string().as_bytes()).unwrap();
        assert_eq!(binary.key(), hyphenated.key());
        assert_eq!(binary.key(), simple.key());
        assert_eq!(hyphenated.original(), TEXT.as_bytes());
    }

    #[test]
    fn other_text_maps_to_a_stable_name_based_uuid() {
        let a = ConversationId::parse(b"chat-42").unwrap();
        let b = ConversationId::parse(b"chat-42").unwrap();
        let c = ConversationId::parse(b"chat-43").unwrap();
        assert_eq!(a.key(), b.key());
        assert_ne!(a.key(), c.key());
        assert_eq!(a.uuid().get_version_num(), 5);
    }

    #[test]
    fn ids_display_as_the_caller_sent_them() {
        let uuid = Uuid::parse_str(TEXT).unwrap();
        assert_eq!(ConversationId::parse(b"nope").unwrap().to_string(), "nope");
        assert_eq!(
            ConversationId::parse(TEXT.as_bytes()).unwrap().to_string(),
            TEXT
        );
        let binary = ConversationId::parse(uuid.as_bytes()).unwrap();
        assert_eq!(binary.to_string(), uuid.hyphenated().to_string());
        assert_eq!(ConversationId::parse(b"a\nb").unwrap().to_string(), "a\\nb");
    }

    #[test]
    fn empty_long_and_non_utf8_ids_are_refused() {
        for bad in [&b""[..], &[b'x'; 300][..], &[0xff, 0xfe, 0x00][..]] {
            let err = ConversationId::parse(bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidConversationId { .. }),
                "{bad:?}"
            );
        }
        assert!(ConversationId::parse(&[b'x'; 256]).is_ok());
    }
}
