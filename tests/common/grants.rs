//! Signed grants for tests with access control on: HS256, signed with `secret`, for user
//! `user-1`, valid for ten minutes.
use tapedeck::access::{Claims, Role, Secret};

/// A grant of `conversations`, each with its role.
pub(crate) fn grant(secret: &str, conversations: &[(&str, Role)]) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let claims = Claims {
        sub: "user-1".into(),
        exp,
        nbf: None,
        iss: None,
        aud: None,
        conversations: (conversations.iter())
            .map(|(id, role)| (id.to_string(), *role))
            .collect(),
    };
    tapedeck::access::mint(&Secret::new(secret), &claims).unwrap()
}
