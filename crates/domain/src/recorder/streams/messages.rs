//! What a message is. In JSON mode (`application/json` streams) each message is one chunk: an
//! append's body is validated, and a top-level array is flattened one level into its elements.
//! Any other stream takes a body as one chunk. This is the domain's rule, not the face's: the
//! message is what size limits apply to, what a fork's sub-offset counts, and what a read
//! returns whole.
use bytes::Bytes;
use serde_json::value::RawValue;

/// Why an append's body is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyRefused {
    /// The body of a JSON stream is not JSON; says why.
    InvalidJson(String),
    /// The body of a JSON stream is an empty array: nothing to append.
    EmptyJsonArray,
}

/// Whether `content_type` names JSON mode (parameters such as `charset` aside).
pub fn is_json(content_type: &str) -> bool {
    essence(content_type).eq_ignore_ascii_case("application/json")
}

/// The media type without parameters, trimmed.
pub fn essence(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

/// Whether two content types name the same media type (parameters aside, in any case).
pub fn same_type(a: &str, b: &str) -> bool {
    essence(a).eq_ignore_ascii_case(essence(b))
}

/// The messages of a JSON body: the elements of a top-level array, or the body itself.
/// `allow_empty` accepts `[]` (a create's initial body) as no messages.
pub(crate) fn json_messages(body: &[u8], allow_empty: bool) -> Result<Vec<Bytes>, BodyRefused> {
    let value: &RawValue =
        serde_json::from_slice(body).map_err(|err| BodyRefused::InvalidJson(err.to_string()))?;
    let text = value.get();
    if !text.starts_with('[') {
        return Ok(vec![Bytes::copy_from_slice(text.as_bytes())]);
    }
    let elements: Vec<&RawValue> =
        serde_json::from_str(text).map_err(|err| BodyRefused::InvalidJson(err.to_string()))?;
    if elements.is_empty() && !allow_empty {
        return Err(BodyRefused::EmptyJsonArray);
    }
    Ok(elements
        .into_iter()
        .map(|e| Bytes::copy_from_slice(e.get().trim().as_bytes()))
        .collect())
}

/// The chunks a body makes in a stream of `content_type`: its JSON messages, or the body as
/// one chunk. A `create`'s body may be an empty JSON array.
pub(crate) fn chunks_of(
    content_type: &str,
    body: &Bytes,
    create: bool,
) -> Result<Vec<Bytes>, BodyRefused> {
    if body.is_empty() {
        return Ok(vec![]);
    }
    if is_json(content_type) {
        return json_messages(body, create);
    }
    // Copied out: the body may be a slice of the connection's read buffer, which the live
    // recording's in-memory tail would otherwise keep alive whole.
    Ok(vec![Bytes::copy_from_slice(body)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(body: &str) -> Vec<String> {
        json_messages(body.as_bytes(), false)
            .unwrap()
            .iter()
            .map(|m| String::from_utf8(m.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn arrays_flatten_one_level() {
        assert_eq!(texts(r#"{"a":1}"#), [r#"{"a":1}"#]);
        assert_eq!(texts(r#"[{"a":1}, {"b":2}]"#), [r#"{"a":1}"#, r#"{"b":2}"#]);
        assert_eq!(texts("[[1,2],[3,4]]"), ["[1,2]", "[3,4]"]);
        assert_eq!(texts("[[[1,2,3]]]"), ["[[1,2,3]]"]);
    }

    #[test]
    fn empty_arrays_and_bad_json() {
        assert_eq!(
            json_messages(b"[]", false),
            Err(BodyRefused::EmptyJsonArray)
        );
        assert_eq!(json_messages(b" [ ] ", true), Ok(vec![]));
        assert!(matches!(
            json_messages(b"{nope", false),
            Err(BodyRefused::InvalidJson(_))
        ));
    }
}
