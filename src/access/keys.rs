//! API keys: named secrets that identify trusted services (an agent app, say). Secrets are
//! compared in constant time and never shown: not in logs, errors or `Debug` output.
use std::path::Path;

use subtle::ConstantTimeEq;

use crate::error::{Error, Result};

/// A secret string; its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// One API key: a name for logs, and its secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKey {
    /// Who holds it, as logged.
    pub name: String,
    /// What the holder sends in `x-api-key`.
    pub secret: Secret,
}

impl ApiKey {
    /// Parses `name=secret`.
    ///
    /// Fails with `BadApiKey` when either side is empty or there is no `=`.
    pub fn parse(text: &str) -> Result<Self> {
        match text.trim().split_once('=') {
            Some((name, secret)) if !name.trim().is_empty() && !secret.trim().is_empty() => {
                Ok(ApiKey {
                    name: name.trim().to_string(),
                    secret: Secret::new(secret.trim()),
                })
            }
            // The text holds a secret: only its shape is described.
            _ => Err(Error::BadApiKey {
                reason: "an API key is written name=secret, with neither side empty".into(),
            }),
        }
    }

    /// Reads `path`: one `name=secret` a line; blank lines and `#` comments are skipped.
    ///
    /// Fails with `BadApiKey` when the file cannot be read or a line is not `name=secret`.
    pub fn read_file(path: &Path) -> Result<Vec<ApiKey>> {
        let text = std::fs::read_to_string(path).map_err(|err| Error::BadApiKey {
            reason: format!("cannot read API keys file {}: {err}", path.display()),
        })?;
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let key = ApiKey::parse(line).map_err(|_| Error::BadApiKey {
                reason: format!(
                    "{} line {}: an API key is written name=secret",
                    path.display(),
                    n + 1
                ),
            })?;
            keys.push(key);
        }
        Ok(keys)
    }
}

/// The configured API keys.
#[derive(Clone, Debug, Default)]
pub(super) struct ApiKeys {
    keys: Vec<ApiKey>,
}

impl ApiKeys {
    pub(super) fn new(keys: Vec<ApiKey>) -> Self {
        Self { keys }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The name of the key whose secret is `sent`. Every key is compared, each in constant
    /// time, so the time taken says nothing about which secret came close.
    pub(super) fn find(&self, sent: &str) -> Option<&str> {
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.secret.expose().as_bytes().ct_eq(sent.as_bytes())) {
                found = Some(key.name.as_str());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_and_match_without_showing_secrets() {
        let key = ApiKey::parse("agent = s3cret").unwrap();
        assert_eq!(key.name, "agent");
        assert!(!format!("{key:?}").contains("s3cret"));
        let keys = ApiKeys::new(vec![key, ApiKey::parse("other=x").unwrap()]);
        assert_eq!(keys.find("s3cret"), Some("agent"));
        assert_eq!(keys.find("s3cre"), None);
        for bad in ["", "name", "=secret", "name="] {
            assert!(ApiKey::parse(bad).is_err(), "{bad:?}");
        }
    }
}
