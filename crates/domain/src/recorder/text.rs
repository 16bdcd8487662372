//! Which streams hold UTF-8 text, and so may be replayed as text (over gRPC): by content
//! type, and never a fork, whose first bytes live in another recording.
use crate::error::{Error, Result};

/// Refuses a text replay of stream `row` when it is not UTF-8 text, or is a fork (its first
/// bytes live in another recording).
pub(crate) fn text_stream(row: &crate::store::StreamRow) -> Result<()> {
    if row.fork.is_some() {
        return Err(Error::ForkedStream);
    }
    if !is_text(&row.content_type) {
        return Err(Error::NotText {
            content_type: row.content_type.clone(),
        });
    }
    Ok(())
}

/// Whether a stream of `content_type` holds UTF-8 text: `text/*`, JSON (and `+json`,
/// NDJSON), or anything declaring `charset=utf-8`.
pub fn is_text(content_type: &str) -> bool {
    let lower = content_type.to_ascii_lowercase();
    let essence = lower.split(';').next().unwrap_or("").trim();
    essence.starts_with("text/")
        || essence == "application/json"
        || essence.ends_with("+json")
        || essence == "application/ndjson"
        || essence == "application/x-ndjson"
        || lower.replace(' ', "").contains("charset=utf-8")
}
