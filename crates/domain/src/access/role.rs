//! [`Role`]: how far a grant opens a conversation, as its claims name it.
use serde::{Deserialize, Serialize};

/// How far a grant opens a conversation; a writer may read too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// May replay it and see it in a live check.
    Reader,
    /// May also record it and cancel it.
    Writer,
}
