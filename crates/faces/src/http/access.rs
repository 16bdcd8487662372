//! Who a request is: the same credentials as gRPC (an API key in `x-api-key`, a signed grant
//! in `Authorization: Bearer`), plus a `token` query parameter carrying a grant for clients
//! that cannot set headers (a browser's EventSource). Missing or bad credentials are 401, a
//! grant that does not cover the stream 403; neither repeats a credential.
use http::HeaderMap;

use super::failure::failed;
use super::reply::Reply;
use crate::access::{Guard, Operation, Principal};
use crate::error::Error;
use crate::id::ConversationId;

/// The principal of a request with `headers` and query parameter `token`.
pub(crate) fn principal(
    guard: &Guard,
    headers: &HeaderMap,
    token: Option<&str>,
) -> Result<Principal, Reply> {
    let text = |name: &str| {
        headers
            .get(name)
            .map(|v| {
                v.to_str()
                    .map_err(|_| format!("the {name} header is not ASCII text"))
            })
            .transpose()
    };
    let credentials = (|| {
        let api_key = text("x-api-key")?;
        let bearer = match text("authorization")? {
            None => token,
            Some(value) => match value.split_once(' ') {
                Some((scheme, grant)) if scheme.eq_ignore_ascii_case("bearer") => {
                    Some(grant.trim())
                }
                _ => return Err("authorization must be `Bearer <token>`".to_string()),
            },
        };
        Ok((api_key, bearer))
    })();
    let authenticated = credentials
        .map_err(|reason| Error::Unauthenticated { reason })
        .and_then(|(api_key, bearer)| guard.authenticate(api_key, bearer));
    authenticated.map_err(|err| {
        metrics::counter!(crate::metrics::AUTH_REFUSALS, "reason" => "unauthenticated")
            .increment(1);
        tracing::warn!(error = %err, "HTTP request refused");
        failed(err)
    })
}

/// Checks that `principal` may do `operation` on stream `id`: 403 if not. The refusal is
/// counted and logged by [`Principal::authorize`], as on gRPC: not again here.
pub(crate) fn authorize(
    principal: &Principal,
    operation: Operation,
    id: &ConversationId,
) -> Result<(), Reply> {
    principal.authorize(operation, id).map_err(failed)
}
