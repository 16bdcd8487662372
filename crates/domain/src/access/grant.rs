//! Signed conversation grants: a short-lived JWT that the agent app, which knows who may see
//! what, issues to a user; tapedeck checks its signature (HS256 with a shared secret, or RS256,
//! ES256 or EdDSA with a public key), its times, issuer and audience, and reads which
//! conversations it opens, and how far. Signatures are checked by `jsonwebtoken`.
use std::collections::{BTreeMap, HashMap};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::claims;
use super::keys::Secret;
use super::role::Role;
use crate::error::{Error, Result};
use crate::id::ConversationId;

/// Clock skew allowed on `exp` and `nbf`, in seconds.
const LEEWAY_SECONDS: u64 = 30;
/// The claim key that stands for every conversation.
pub const WILDCARD: &str = "*";

/// The claims of a grant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// Who the grant is for.
    pub sub: String,
    /// Expiry, in seconds since the epoch (required).
    pub exp: u64,
    /// Not valid before, in seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// Issuer, checked against `--jwt-issuer` when that is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// Audience, checked against `--jwt-audience` when that is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<String>,
    /// Conversation id (as the APIs take it) or `"*"` → role.
    #[serde(default)]
    pub conversations: BTreeMap<String, Role>,
}

/// A verified grant: who, and their role per conversation.
#[derive(Debug, Clone)]
pub struct Grant {
    subject: String,
    roles: HashMap<u128, Role>,
    wildcard: Option<Role>,
}

impl Grant {
    /// Who the grant is for (`sub`).
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The caller's role for `id`: the higher of what names it and what `"*"` gives.
    pub fn role(&self, id: &ConversationId) -> Option<Role> {
        self.roles.get(&id.key()).copied().max(self.wildcard)
    }
}

/// Checks bearer tokens.
#[derive(Clone)]
pub(super) struct GrantVerifier {
    secret: Option<DecodingKey>,
    public: Option<(DecodingKey, Algorithm)>,
    issuer: Option<String>,
    audience: Option<String>,
}

impl std::fmt::Debug for GrantVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantVerifier").finish_non_exhaustive()
    }
}

impl GrantVerifier {
    /// A verifier of HS256 tokens signed with `secret` and/or of tokens signed with the private
    /// half of `public_pem` (RSA: RS256; EC P-256: ES256; Ed25519: EdDSA).
    ///
    /// Fails with `BadJwtKey` when the public key is none of those.
    pub(super) fn new(
        secret: Option<&Secret>,
        public_pem: Option<&[u8]>,
        issuer: Option<String>,
        audience: Option<String>,
    ) -> Result<Self> {
        let public = match public_pem {
            None => None,
            Some(pem) => Some(
                DecodingKey::from_rsa_pem(pem)
                    .map(|key| (key, Algorithm::RS256))
                    .or_else(|_| DecodingKey::from_ec_pem(pem).map(|k| (k, Algorithm::ES256)))
                    .or_else(|_| DecodingKey::from_ed_pem(pem).map(|k| (k, Algorithm::EdDSA)))
                    .map_err(|_| {
                        Error::Setup(crate::error::Setup::BadJwtKey {
                            reason: "the public key is not a PEM RSA, EC (P-256) or Ed25519 key"
                                .into(),
                        })
                    })?,
            ),
        };
        Ok(Self {
            secret: secret.map(|s| DecodingKey::from_secret(s.expose().as_bytes())),
            public,
            issuer,
            audience,
        })
    }

    /// The grant `token` carries.
    ///
    /// Fails with `Unauthenticated`, saying why (expired, bad signature, wrong issuer or
    /// audience, not yet valid, malformed, which claim is missing or wrong); the token itself
    /// is never repeated.
    pub(super) fn verify(&self, token: &str) -> Result<Grant> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| unauthenticated(not_a_jwt(token)))?;
        let key = match (header.alg, &self.secret, &self.public) {
            (Algorithm::HS256, Some(secret), _) => secret,
            (alg, _, Some((public, expected))) if alg == *expected => public,
            (alg, _, _) => {
                return Err(unauthenticated(&format!(
                    "bearer tokens signed with {alg:?} are not accepted by this server"
                )));
            }
        };
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        // A required issuer or audience is required to be there: jsonwebtoken checks them
        // only when the grant has them.
        let mut required = vec!["exp", "sub"];
        if self.issuer.is_some() {
            required.push("iss");
        }
        if self.audience.is_some() {
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        validation.validate_aud = self.audience.is_some();
        if let Some(audience) = &self.audience {
            validation.set_audience(&[audience]);
        }
        if let Some(issuer) = &self.issuer {
            validation.set_issuer(&[issuer]);
        }
        // Read as JSON first, so that a claim the grant cannot use is refused by its name,
        // after the signature and the times are checked, rather than as a malformed token.
        let payload = jsonwebtoken::decode::<serde_json::Value>(token, key, &validation)
            .map_err(|err| unauthenticated(&reason(&err)))?
            .claims;
        let claims = Claims::deserialize(&payload)
            .map_err(|_| unauthenticated(&claims::wrong_claim(&payload)))?;
        grant(claims)
    }
}

/// Why `token` is not a JWT. A token that starts with the word `Bearer` was sent with the
/// word twice (`authorization: Bearer Bearer …`).
fn not_a_jwt(token: &str) -> &'static str {
    let has_word = token
        .get(..7)
        .is_some_and(|start| start.eq_ignore_ascii_case("bearer "));
    match has_word {
        true => {
            "the bearer token is not a well-formed JWT: it starts with the word Bearer; \
             send `authorization: Bearer <token>`, with the word once"
        }
        false => "the bearer token is not a well-formed JWT",
    }
}

/// Why a token was refused, in words a caller can act on.
fn reason(err: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    let reason = match err.kind() {
        ErrorKind::MissingRequiredClaim(claim) => return claims::missing(claim),
        ErrorKind::InvalidClaimFormat(claim) => return claims::not_a_time(claim),
        ErrorKind::ExpiredSignature => "the bearer token has expired",
        ErrorKind::ImmatureSignature => "the bearer token is not valid yet (nbf)",
        ErrorKind::InvalidSignature => "the bearer token has a bad signature",
        ErrorKind::InvalidIssuer => "the bearer token has the wrong issuer",
        ErrorKind::InvalidAudience => "the bearer token has the wrong audience",
        ErrorKind::InvalidAlgorithm => "the bearer token's algorithm is not accepted",
        _ => "the bearer token is malformed",
    };
    reason.to_string()
}

/// The grant of verified `claims`; conversation ids are parsed as the APIs parse them.
fn grant(claims: Claims) -> Result<Grant> {
    let mut roles = HashMap::new();
    let mut wildcard = None;
    for (id, role) in claims.conversations {
        if id == WILDCARD {
            wildcard = Some(role);
            continue;
        }
        let id = ConversationId::parse(id.as_bytes()).map_err(|_| {
            unauthenticated("the bearer token names a conversation id that is not valid")
        })?;
        let entry = roles.entry(id.key()).or_insert(role);
        *entry = (*entry).max(role);
    }
    Ok(Grant {
        subject: claims.sub,
        roles,
        wildcard,
    })
}

fn unauthenticated(reason: &str) -> Error {
    Error::Unauthenticated {
        reason: reason.to_string(),
    }
}

/// Signs `claims` with `secret` (HS256): what `tapedeck token` prints.
///
/// Fails with `BadJwtKey` if the secret is empty or too short
/// ([`Secret::check_jwt_secret`]), or signing fails.
pub fn mint(secret: &Secret, claims: &Claims) -> Result<String> {
    secret.check_jwt_secret()?;
    let key = EncodingKey::from_secret(secret.expose().as_bytes());
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &key).map_err(|err| {
        Error::Setup(crate::error::Setup::BadJwtKey {
            reason: format!("cannot sign the token: {err}"),
        })
    })
}
