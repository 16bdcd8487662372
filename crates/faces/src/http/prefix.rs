//! Where the HTTP face serves streams: `/v1/stream` unless `--http-path-prefix` says otherwise
//! (TanStack AI's adapter, for one, addresses `/streams/<name>`). Checked once, at start, so
//! that every route built from it is a valid one and none collides with the face's own.
use std::fmt;

/// A path prefix under which every stream is served: `{prefix}/{path}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPrefix(String);

/// The protocol's usual place.
pub const DEFAULT_STREAM_PREFIX: &str = "/v1/stream";

/// Paths the face serves itself, which no prefix may take.
const TAKEN: [&str; 4] = ["/console", "/v1/stop", "/healthz", "/readyz"];

impl StreamPrefix {
    /// `text` as a prefix: it starts with `/`, has at least one segment, does not end with
    /// `/`, holds only URL path characters (no `{`, `}`, `*`, `?`, `#`, `%`) and does not
    /// take the console's or the stop route's paths.
    ///
    /// Fails with a message naming what is wrong.
    pub fn parse(text: &str) -> Result<StreamPrefix, String> {
        let bad = |why: &str| Err(format!("`{text}` is not a path prefix: {why}"));
        if !text.starts_with('/') || text.len() < 2 {
            return bad("it must start with / and name at least one segment (e.g. /v1/stream)");
        }
        if text.ends_with('/') || text.contains("//") {
            return bad("no empty segment, and no / at the end");
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || "/-._~".contains(c);
        if !text.chars().all(allowed) {
            return bad("only letters, digits, and / - . _ ~");
        }
        if let Some(taken) = TAKEN
            .iter()
            .find(|taken| text == **taken || text.starts_with(&format!("{taken}/")))
        {
            return bad(&format!("{taken} is the face's own"));
        }
        Ok(StreamPrefix(text.to_string()))
    }

    /// The prefix, without a trailing `/`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The stream path in `path` (a request's path), if it is under the prefix.
    pub fn stream_in<'a>(&self, path: &'a str) -> Option<&'a str> {
        path.strip_prefix(self.0.as_str())?.strip_prefix('/')
    }
}

impl Default for StreamPrefix {
    fn default() -> Self {
        StreamPrefix(DEFAULT_STREAM_PREFIX.to_string())
    }
}

impl fmt::Display for StreamPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_checked_and_strip_what_they_name() {
        let streams = StreamPrefix::parse("/streams").unwrap();
        assert_eq!(streams.stream_in("/streams/chat%2F1"), Some("chat%2F1"));
        assert_eq!(streams.stream_in("/streamsx/a"), None);
        assert_eq!(StreamPrefix::default().as_str(), "/v1/stream");
        for bad in [
            "",
            "/",
            "streams",
            "/streams/",
            "/a//b",
            "/{x}",
            "/a*",
            "/console",
            "/v1/stop",
        ] {
            assert!(StreamPrefix::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(StreamPrefix::parse("/console-x").is_ok());
    }
}
