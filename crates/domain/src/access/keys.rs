//! API keys: named secrets that identify trusted services (an agent app, say). Secrets are
//! compared in constant time and never shown: not in logs, errors or `Debug` output.
use std::path::Path;

use subtle::ConstantTimeEq;

use crate::error::{Error, Result};

/// Fewest bytes of an HS256 secret: RFC 7518 (section 3.2) asks for a key at least as long as
/// the hash, 256 bits.
pub const MIN_JWT_SECRET_BYTES: usize = 32;

/// The setting an HS256 secret comes from, in both its forms, for error messages.
const JWT_SECRET_SETTING: &str = "--jwt-secret (TAPEDECK_JWT_SECRET)";

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

    /// Checks that it may sign or check HS256 grants. An empty secret (an unset variable in a
    /// compose file, say) would let anyone mint a valid grant, and a short one can be guessed.
    ///
    /// Fails with `BadJwtKey`, naming the flag and its variable (never the secret), when it is
    /// empty or shorter than [`MIN_JWT_SECRET_BYTES`].
    pub fn check_jwt_secret(&self) -> Result<()> {
        let reason = if self.0.trim().is_empty() {
            format!(
                "{JWT_SECRET_SETTING} is empty: anyone could sign grants with it; set a random \
                 secret of at least {MIN_JWT_SECRET_BYTES} bytes (e.g. `openssl rand -base64 32`), \
                 or leave it unset"
            )
        } else if self.0.len() < MIN_JWT_SECRET_BYTES {
            format!(
                "{JWT_SECRET_SETTING} is shorter than {MIN_JWT_SECRET_BYTES} bytes, the least \
                 HS256 allows (RFC 7518: 256 bits); set a random one (e.g. `openssl rand -base64 \
                 32`)"
            )
        } else {
            return Ok(());
        };
        Err(Error::Setup(crate::error::Setup::BadJwtKey { reason }))
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
        // The text holds a secret: only its shape is described.
        // A secret of nothing but `=` is padding: a base64 secret given without its name
        // (`c2VjcmV0=`) splits into a "name" that is the secret and an empty one. So the name
        // is never shown either.
        let reason = match text.trim().split_once('=') {
            Some((name, secret))
                if !name.trim().is_empty() && !secret.trim().trim_matches('=').is_empty() =>
            {
                return Ok(ApiKey {
                    name: name.trim().to_string(),
                    secret: Secret::new(secret.trim()),
                });
            }
            Some((name, _)) if !name.trim().is_empty() => {
                "an API key has an empty secret (or only '='): anyone could send it; an API \
                 key is written name=secret"
                    .into()
            }
            _ => "an API key is written name=secret, with neither side empty".into(),
        };
        Err(Error::Setup(crate::error::Setup::BadApiKey { reason }))
    }

    /// Reads `path`: one `name=secret` a line; blank lines and `#` comments are skipped.
    ///
    /// Fails with `BadApiKey` when the file cannot be read or a line is not `name=secret`.
    pub fn read_file(path: &Path) -> Result<Vec<ApiKey>> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            Error::Setup(crate::error::Setup::BadApiKey {
                reason: format!("cannot read API keys file {}: {err}", path.display()),
            })
        })?;
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let key = ApiKey::parse(line).map_err(|err| {
                Error::Setup(crate::error::Setup::BadApiKey {
                    reason: format!(
                        "{} line {}: {}",
                        path.display(),
                        n + 1,
                        match err {
                            Error::Setup(crate::error::Setup::BadApiKey { reason }) => reason,
                            other => other.to_string(),
                        }
                    ),
                })
            })?;
            keys.push(key);
        }
        // A file meant to turn access control on that turns nothing on is a mistake.
        if keys.is_empty() {
            return Err(Error::Setup(crate::error::Setup::BadApiKey {
                reason: format!(
                    "{} holds no API key: write one name=secret a line",
                    path.display()
                ),
            }));
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
        for bad in ["", "name", "=secret", "name=", "name=  "] {
            assert!(ApiKey::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn empty_and_short_jwt_secrets_are_refused_without_showing_them() {
        for bad in ["", "   ", "shh", &"x".repeat(MIN_JWT_SECRET_BYTES - 1)] {
            let err = Secret::new(bad).check_jwt_secret().unwrap_err().to_string();
            assert!(err.contains("--jwt-secret"), "{err}");
            assert!(err.contains("TAPEDECK_JWT_SECRET"), "{err}");
            assert!(bad.trim().is_empty() || !err.contains(bad), "{err}");
        }
        let good = Secret::new("x".repeat(MIN_JWT_SECRET_BYTES));
        assert!(good.check_jwt_secret().is_ok());
    }
}
