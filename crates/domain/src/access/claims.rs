//! Why a signed grant's claims cannot be used, naming the claim and what it must hold: read
//! from the verified payload, so that a token is never repeated, only the claim's name (and a
//! role, when it is a plain word).
use serde::Deserialize;
use serde_json::Value;

use super::role::Role;

/// A required claim (`exp` or `sub`) the grant lacks.
pub(super) fn missing(claim: &str) -> String {
    let holds = match claim {
        "exp" => "its expiry, in whole seconds since the epoch",
        "sub" => "who the grant is for",
        "iss" => "who issued it, which this server requires (--jwt-issuer)",
        "aud" => "who it is for, which this server requires (--jwt-audience)",
        _ => "required by this server",
    };
    format!("the bearer token lacks the `{claim}` claim ({holds}); a grant needs `exp` and `sub`")
}

/// A time claim (`exp`, `nbf`) that is not a number.
pub(super) fn not_a_time(claim: &str) -> String {
    format!("the bearer token's `{claim}` claim is not a whole number of seconds since the epoch")
}

/// The first claim of `payload` (verified, but not readable as a grant) that is wrong, and
/// what it must hold.
pub(super) fn wrong_claim(payload: &Value) -> String {
    let claim = |name: &str| payload.get(name).unwrap_or(&Value::Null);
    let wrong = |name: &str, holds: &str| format!("the bearer token's `{name}` claim {holds}");
    if String::deserialize(claim("sub")).is_err() {
        return wrong("sub", "must be a string: who the grant is for");
    }
    for time in ["exp", "nbf"] {
        if Option::<u64>::deserialize(claim(time)).is_err() {
            return not_a_time(time);
        }
    }
    for text in ["iss", "aud"] {
        if Option::<String>::deserialize(claim(text)).is_err() {
            return wrong(text, "must be a string");
        }
    }
    let roles = match payload.get("conversations") {
        None => return "the bearer token's claims cannot be read as a grant".into(),
        Some(Value::Object(roles)) => roles,
        Some(_) => {
            return wrong(
                "conversations",
                "must be an object of conversation id → role (`reader` or `writer`)",
            );
        }
    };
    let role = roles
        .values()
        .find(|role| Role::deserialize(*role).is_err())
        .map(|role| match role.as_str() {
            // A short plain word is shown; anything else might be text to keep out of a log.
            Some(word) if word.len() <= 32 && word.chars().all(|c| c.is_ascii_alphanumeric()) => {
                format!("the role `{word}`")
            }
            _ => "a role".to_string(),
        });
    match role {
        Some(role) => wrong(
            "conversations",
            &format!("gives {role}; a role is `reader` or `writer`"),
        ),
        None => "the bearer token's claims cannot be read as a grant".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_unknown_role_is_named_with_the_roles_there_are() {
        let payload = json!({"sub": "u", "exp": 1, "conversations": {"c1": "owner"}});
        let reason = wrong_claim(&payload);
        assert!(reason.contains("`conversations`"), "{reason}");
        assert!(reason.contains("`owner`"), "{reason}");
        assert!(reason.contains("`reader` or `writer`"), "{reason}");
    }

    #[test]
    fn a_role_that_is_not_a_plain_word_is_not_repeated() {
        let payload = json!({"sub": "u", "exp": 1, "conversations": {"c1": "x\u{1b}[2Jy"}});
        let reason = wrong_claim(&payload);
        assert!(!reason.contains('\u{1b}'), "{reason}");
        assert!(reason.contains("`reader` or `writer`"), "{reason}");
    }

    #[test]
    fn each_wrong_claim_is_named() {
        for (payload, claim) in [
            (json!({"sub": 7, "exp": 1}), "`sub`"),
            (json!({"sub": "u", "exp": "soon"}), "`exp`"),
            (json!({"sub": "u", "exp": 1, "nbf": "now"}), "`nbf`"),
            (json!({"sub": "u", "exp": 1, "aud": ["a", "b"]}), "`aud`"),
            (
                json!({"sub": "u", "exp": 1, "conversations": ["c1"]}),
                "`conversations`",
            ),
        ] {
            let reason = wrong_claim(&payload);
            assert!(reason.contains(claim), "{payload}: {reason}");
        }
    }
}
