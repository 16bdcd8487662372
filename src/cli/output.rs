//! How the client commands print: recordings as a table or JSON, ids, replayed chunks. Ids
//! and JSON lines go through [`escape`] so that no control character reaches the terminal.
use std::io::Write;

use anyhow::{Result, bail};
use serde_json::{Value, json};
use tapedeck::client::ReplayMessage;
use tapedeck::pb::tapedeck::{Location, Recording, RecordingStatus};

use super::escape;

/// A status's name as the CLI shows and takes it: `completed`, `recording`, …
pub(crate) fn status_name(raw: i32) -> String {
    RecordingStatus::try_from(raw)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("RECORDING_STATUS_")
                .to_lowercase()
        })
        .unwrap_or_else(|_| format!("unknown ({raw})"))
}

/// A status named on the command line.
pub(crate) fn parse_status(text: &str) -> Result<RecordingStatus> {
    let name = format!("RECORDING_STATUS_{}", text.to_uppercase());
    match RecordingStatus::from_str_name(&name) {
        Some(status) if status != RecordingStatus::Unspecified => Ok(status),
        _ => bail!(
            "--status {text} is not a status; use recording, completed, cancelled, \
             interrupted, failed or deleted"
        ),
    }
}

/// One recording as a JSON object.
pub(crate) fn recording_json(r: &Recording) -> Value {
    json!({
        "conversation_id": String::from_utf8_lossy(&r.conversation_id),
        "status": status_name(r.status),
        "created_at_ms": r.created_at_ms,
        "updated_at_ms": r.updated_at_ms,
        "finished_at_ms": r.finished_at_ms,
        "expires_at_ms": r.expires_at_ms,
        "chunk_count": r.chunk_count,
        "byte_length": r.byte_length,
        "end_message": r.end_message,
        "live_readers": r.live_readers,
        "producer_attached": r.producer_attached,
        "location": location_name(r.location),
        "owner_address": r.owner_address,
        "tombstone": r.tombstone.as_ref().map(|t| json!({
            "final_status": status_name(t.final_status),
            "collected_at_ms": t.collected_at_ms,
            "forgotten_at_ms": t.forgotten_at_ms,
        })),
    })
}

/// Where a recording is kept, as the CLI prints it: `local`, `local+object-store`,
/// `object-store`, or empty for a tombstone.
fn location_name(location: i32) -> &'static str {
    match Location::try_from(location) {
        Ok(Location::Local) => "local",
        Ok(Location::LocalAndObjectStore) => "local+object-store",
        Ok(Location::ObjectStore) => "object-store",
        Ok(Location::Unspecified) | Err(_) => "",
    }
}

/// Recordings as a JSON array, or as a table with a header line.
pub(crate) fn recordings(all: &[Recording], json: bool, out: &mut impl Write) -> Result<()> {
    if json {
        let array: Vec<Value> = all.iter().map(recording_json).collect();
        writeln!(out, "{}", escape::json_line(&Value::Array(array)))?;
        return Ok(());
    }
    let shown: Vec<String> = all.iter().map(|r| escape::id(&r.conversation_id)).collect();
    let width = shown
        .iter()
        .map(|id| id.chars().count())
        .max()
        .unwrap_or(0)
        .max("CONVERSATION".len());
    // With several instances, each row's owner, in a last column.
    let owners = all.iter().any(|r| !r.owner_address.is_empty());
    let last = |created: &str, owner: &str| match owners {
        true => format!("{created:<24}  {owner}"),
        false => created.to_string(),
    };
    writeln!(
        out,
        "{:width$}  {:<11}  {:>12}  {:>8}  {:>7}  {:<18}  {}",
        "CONVERSATION",
        "STATUS",
        "BYTES",
        "CHUNKS",
        "READERS",
        "WHERE",
        last("CREATED", "OWNER")
    )?;
    for (r, id) in all.iter().zip(shown) {
        let created = tapedeck::clock::rfc3339(r.created_at_ms.max(0) as u64);
        writeln!(
            out,
            "{:width$}  {:<11}  {:>12}  {:>8}  {:>7}  {:<18}  {}",
            id,
            status_name(r.status),
            r.byte_length,
            r.chunk_count,
            r.live_readers,
            location_name(r.location),
            last(&created, &escape::id(r.owner_address.as_bytes())),
        )?;
    }
    Ok(())
}

/// Conversation ids, one a line or as a JSON array.
pub(crate) fn ids(ids: &[Vec<u8>], json: bool, out: &mut impl Write) -> Result<()> {
    let texts: Vec<String> = ids
        .iter()
        .map(|id| String::from_utf8_lossy(id).into_owned())
        .collect();
    if json {
        writeln!(out, "{}", escape::json_line(&json!(texts)))?;
    } else {
        for text in texts {
            writeln!(out, "{}", escape::for_terminal(&text))?;
        }
    }
    Ok(())
}

/// One replayed chunk as a JSON line.
pub(crate) fn message_json(piece: &ReplayMessage) -> Value {
    let (index, committed_at_ms) = piece.chunk.unwrap_or_default();
    json!({
        "index": index,
        "committed_at_ms": committed_at_ms,
        "offset": piece.offset,
        "content": piece.content,
    })
}
