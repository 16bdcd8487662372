//! JSON mode (`application/json` streams): each message is one tapedeck chunk. An append's
//! body is validated, and a top-level array is flattened one level into its elements; a read
//! returns its messages as one JSON array.
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::value::RawValue;

/// Why a JSON append is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum JsonRefusal {
    /// The body is not JSON.
    Invalid(String),
    /// The body is an empty array: nothing to append.
    EmptyArray,
}

/// Whether `content_type` names JSON mode (parameters such as `charset` aside).
pub(crate) fn is_json(content_type: &str) -> bool {
    essence(content_type).eq_ignore_ascii_case("application/json")
}

/// The media type without parameters, trimmed.
pub(crate) fn essence(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

/// The messages of an append body: the elements of a top-level array, or the body itself.
/// `allow_empty` accepts `[]` (a create's initial body) as no messages.
pub(crate) fn messages(body: &[u8], allow_empty: bool) -> Result<Vec<Bytes>, JsonRefusal> {
    let value: &RawValue =
        serde_json::from_slice(body).map_err(|err| JsonRefusal::Invalid(err.to_string()))?;
    let text = value.get();
    if !text.starts_with('[') {
        return Ok(vec![Bytes::copy_from_slice(text.as_bytes())]);
    }
    let elements: Vec<&RawValue> =
        serde_json::from_str(text).map_err(|err| JsonRefusal::Invalid(err.to_string()))?;
    if elements.is_empty() && !allow_empty {
        return Err(JsonRefusal::EmptyArray);
    }
    Ok(elements
        .into_iter()
        .map(|e| Bytes::copy_from_slice(e.get().trim().as_bytes()))
        .collect())
}

/// `messages` as one JSON array.
pub(crate) fn array<'a>(messages: impl IntoIterator<Item = &'a [u8]>) -> Bytes {
    let mut body = BytesMut::new();
    body.put_u8(b'[');
    for (i, message) in messages.into_iter().enumerate() {
        if i > 0 {
            body.put_u8(b',');
        }
        body.put_slice(message);
    }
    body.put_u8(b']');
    body.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(body: &str) -> Vec<String> {
        messages(body.as_bytes(), false)
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
        assert_eq!(messages(b"[]", false), Err(JsonRefusal::EmptyArray));
        assert_eq!(messages(b" [ ] ", true), Ok(vec![]));
        assert!(matches!(
            messages(b"{nope", false),
            Err(JsonRefusal::Invalid(_))
        ));
        let parts: [&[u8]; 2] = [b"1", b"{}"];
        assert_eq!(&array(parts)[..], b"[1,{}]");
    }
}
