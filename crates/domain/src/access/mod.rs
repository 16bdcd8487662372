//! Access control: the credentials a call carries (an API key, a signed grant) become a
//! [`Principal`], and the rules say what it may do with a conversation. With nothing
//! configured, access control is off and every call may do everything.
//!
//! | operation | needs |
//! |---|---|
//! | record | writer, or an API key |
//! | replay, check | reader, or an API key |
//! | cancel | writer, from a user token (an API key alone is not enough) |

mod claims;
mod grant;
mod keys;
mod role;

use std::path::PathBuf;
use std::sync::Arc;

use grant::GrantVerifier;
pub use grant::{Claims, Grant, WILDCARD, mint};
use keys::ApiKeys;
pub use keys::{ApiKey, MIN_JWT_SECRET_BYTES, Secret};
pub use role::Role;

use crate::error::{Error, Result};
use crate::id::ConversationId;

/// What access control is configured with. `AccessConfig::default()` turns it off.
#[derive(Clone, Debug, Default)]
pub struct AccessConfig {
    /// API keys of trusted services. Default none.
    pub api_keys: Vec<ApiKey>,
    /// Shared secret of HS256 grants. Default none.
    pub jwt_secret: Option<Secret>,
    /// PEM file of the public key of RS256, ES256 or EdDSA grants. Default none.
    pub jwt_public_key: Option<PathBuf>,
    /// Required `iss` of grants. Default not checked.
    pub jwt_issuer: Option<String>,
    /// Required `aud` of grants. Default not checked.
    pub jwt_audience: Option<String>,
}

impl AccessConfig {
    /// Whether any credential is configured, which turns access control on.
    pub fn is_enabled(&self) -> bool {
        !self.api_keys.is_empty() || self.jwt_secret.is_some() || self.jwt_public_key.is_some()
    }

    /// Checks that each configured credential is one: a credential that is set but empty
    /// would turn access control on while letting anyone in.
    ///
    /// Fails with `BadJwtKey`, naming the flag and its variable, when the HS256 secret is
    /// empty or shorter than [`MIN_JWT_SECRET_BYTES`], or the public key's path or file is
    /// empty or cannot be read.
    pub fn check(&self) -> Result<()> {
        if let Some(secret) = &self.jwt_secret {
            secret.check_jwt_secret()?;
        }
        if let Some(path) = &self.jwt_public_key {
            read_public_key(path)?;
        }
        Ok(())
    }
}

/// The setting of the public key, in both its forms, for error messages.
const PUBLIC_KEY_SETTING: &str = "--jwt-public-key (TAPEDECK_JWT_PUBLIC_KEY)";

/// The PEM text of the public key file at `path`.
fn read_public_key(path: &std::path::Path) -> Result<Vec<u8>> {
    let bad = |reason: String| Error::Setup(crate::error::Setup::BadJwtKey { reason });
    if path.as_os_str().is_empty() {
        return Err(bad(format!(
            "{PUBLIC_KEY_SETTING} is empty: name a PEM public key file, or leave it unset"
        )));
    }
    let pem = std::fs::read(path).map_err(|err| {
        bad(format!(
            "{PUBLIC_KEY_SETTING}: cannot read {}: {err}",
            path.display()
        ))
    })?;
    if pem.trim_ascii().is_empty() {
        return Err(bad(format!(
            "{PUBLIC_KEY_SETTING}: {} is empty; it must hold a PEM public key",
            path.display()
        )));
    }
    Ok(pem)
}

/// An operation on a conversation, as the rules name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Record a response into it.
    Record,
    /// Replay it, see it in a live check, or read its metadata (Get, List).
    Replay,
    /// Cancel its live response.
    Cancel,
    /// Delete its recording.
    Delete,
}

impl Operation {
    fn verb(self) -> &'static str {
        match self {
            Operation::Record => "record",
            Operation::Replay => "replay",
            Operation::Cancel => "cancel",
            Operation::Delete => "delete",
        }
    }

    fn needs(self) -> &'static str {
        match self {
            Operation::Record => "writer access, or an API key",
            Operation::Replay => "reader access, or an API key",
            Operation::Cancel => "writer access from a user token (an API key alone cannot cancel)",
            Operation::Delete => "writer access, or an API key",
        }
    }
}

/// Who is calling, as far as access control knows.
#[derive(Debug, Clone)]
pub enum Principal {
    /// Access control is off.
    Anyone,
    /// A caller with checked credentials.
    Caller {
        /// The name of the API key it sent, if any.
        key: Option<String>,
        /// The grant its bearer token carries, if any.
        grant: Option<Grant>,
    },
}

impl Principal {
    /// Whether it may do `operation` on `id`.
    pub fn may(&self, operation: Operation, id: &ConversationId) -> bool {
        let Principal::Caller { key, grant } = self else {
            return true;
        };
        let role = grant.as_ref().and_then(|g| g.role(id));
        match operation {
            Operation::Record | Operation::Delete => key.is_some() || role == Some(Role::Writer),
            Operation::Replay => key.is_some() || role.is_some(),
            Operation::Cancel => role == Some(Role::Writer),
        }
    }

    /// Checks that it may do `operation` on `id`; a refusal is logged once, naming the
    /// caller and the conversation.
    ///
    /// Fails with `PermissionDenied`, naming the conversation and the access needed.
    pub fn authorize(&self, operation: Operation, id: &ConversationId) -> Result<()> {
        if self.may(operation, id) {
            return Ok(());
        }
        let caller = self.to_string();
        metrics::counter!(crate::metrics::AUTH_REFUSALS, "reason" => "permission_denied")
            .increment(1);
        tracing::warn!(%caller, conversation = %id, operation = operation.verb(), "access refused");
        Err(Error::PermissionDenied {
            caller,
            action: operation.verb(),
            id: id.to_string(),
            needs: operation.needs(),
        })
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Anyone => f.write_str("anyone"),
            Principal::Caller { key, grant } => match (key, grant) {
                (Some(key), Some(grant)) => {
                    write!(f, "API key {key} with user {}", grant.subject())
                }
                (Some(key), None) => write!(f, "API key {key}"),
                (None, Some(grant)) => write!(f, "user {}", grant.subject()),
                (None, None) => f.write_str("a caller without credentials"),
            },
        }
    }
}

/// Checks the credentials of calls. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Guard {
    inner: Option<Arc<Checks>>,
}

#[derive(Debug)]
struct Checks {
    keys: ApiKeys,
    grants: Option<GrantVerifier>,
}

impl Guard {
    /// A guard that lets every call through: access control is off.
    pub fn off() -> Self {
        Self { inner: None }
    }

    /// A guard for `config`; off when it configures nothing.
    ///
    /// Fails with `BadJwtKey` when a credential is empty or too short (see
    /// [`AccessConfig::check`]) or the public key cannot be read or used.
    pub fn new(config: &AccessConfig) -> Result<Self> {
        if !config.is_enabled() {
            return Ok(Self::off());
        }
        config.check()?;
        let public = match &config.jwt_public_key {
            Some(path) => Some(read_public_key(path)?),
            None => None,
        };
        let grants = (config.jwt_secret.is_some() || public.is_some())
            .then(|| {
                GrantVerifier::new(
                    config.jwt_secret.as_ref(),
                    public.as_deref(),
                    config.jwt_issuer.clone(),
                    config.jwt_audience.clone(),
                )
            })
            .transpose()?;
        Ok(Self {
            inner: Some(Arc::new(Checks {
                keys: ApiKeys::new(config.api_keys.clone()),
                grants,
            })),
        })
    }

    /// Whether calls must carry credentials.
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The principal of a call that sent `api_key` (the `x-api-key` value) and `bearer` (the
    /// token of `authorization: Bearer …`).
    ///
    /// Fails with `Unauthenticated`, saying which credential is missing or wrong (never
    /// repeating it), when access control is on.
    pub fn authenticate(&self, api_key: Option<&str>, bearer: Option<&str>) -> Result<Principal> {
        let Some(checks) = &self.inner else {
            return Ok(Principal::Anyone);
        };
        if api_key.is_none() && bearer.is_none() {
            return Err(unauthenticated(
                "missing credentials: send an API key in x-api-key, or a grant in \
                 authorization: Bearer <token>",
            ));
        }
        let key = match api_key {
            None => None,
            Some(sent) => match checks.keys.find(sent) {
                Some(name) => Some(name.to_string()),
                None if checks.keys.is_empty() => {
                    return Err(unauthenticated("this server accepts no API keys"));
                }
                None => return Err(unauthenticated("unknown API key")),
            },
        };
        let grant = match (bearer, &checks.grants) {
            (None, _) => None,
            (Some(token), Some(grants)) => Some(grants.verify(token)?),
            (Some(_), None) => {
                return Err(unauthenticated(
                    "this server accepts no bearer tokens (no --jwt-secret or --jwt-public-key)",
                ));
            }
        };
        Ok(Principal::Caller { key, grant })
    }
}

fn unauthenticated(reason: &str) -> Error {
    Error::Unauthenticated {
        reason: reason.to_string(),
    }
}
