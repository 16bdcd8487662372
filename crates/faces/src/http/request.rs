//! Reading a request's protocol headers into typed values; a malformed one is a 400 that says
//! which header and why.
use http::{HeaderMap, StatusCode};

use super::offset::Offset;
use super::reply::*;
use crate::recorder::ProducerStamp;
use crate::recorder::streams::MAX_PRODUCER_NUMBER;

fn bad(message: String) -> Reply {
    Reply::refuse(StatusCode::BAD_REQUEST, message)
}

/// Header `name` as text; `None` when absent.
pub(crate) fn text<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, Reply> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(|v| Some(v.trim()))
            .map_err(|_| bad(format!("header {name} is not visible ASCII"))),
    }
}

/// `Stream-Closed`: present only when exactly `true`, in any case; any other value is as if
/// it were absent.
pub(crate) fn closing(headers: &HeaderMap) -> bool {
    headers
        .get(STREAM_CLOSED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The request's `Content-Type`, if any.
pub(crate) fn content_type(headers: &HeaderMap) -> Result<Option<String>, Reply> {
    Ok(text(headers, "content-type")?
        .filter(|v| !v.is_empty())
        .map(str::to_string))
}

/// A decimal integer without sign, leading zeros, point or exponent.
pub(crate) fn strict_u64(value: &str) -> Option<u64> {
    is_canonical_digits(value)
        .then(|| value.parse().ok())
        .flatten()
}

/// `Stream-TTL`, in seconds; digits too many for 64 bits read as the largest number (the
/// recorder refuses it over `--max-retention`, as any TTL over it).
pub(crate) fn ttl(headers: &HeaderMap) -> Result<Option<u64>, Reply> {
    let Some(value) = text(headers, STREAM_TTL)? else {
        return Ok(None);
    };
    match strict_u64(value) {
        Some(ttl) => Ok(Some(ttl)),
        None if is_canonical_digits(value) => Ok(Some(u64::MAX)),
        None => Err(bad(format!(
            "Stream-TTL must be a whole number of seconds, like 3600; got {value:?}"
        ))),
    }
}

/// `Stream-Expires-At`, in ms since the epoch (the recorder bounds it by `--max-retention`).
pub(crate) fn expires_at(headers: &HeaderMap) -> Result<Option<u64>, Reply> {
    let Some(value) = text(headers, STREAM_EXPIRES_AT)? else {
        return Ok(None);
    };
    let at = humantime::parse_rfc3339_weak(value)
        .ok()
        .filter(|_| value.contains('T') || value.contains('t'))
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .ok_or_else(|| {
            bad(format!(
                "Stream-Expires-At must be an RFC 3339 time, like 2030-01-01T00:00:00Z; got {value:?}"
            ))
        })?;
    Ok(Some(u64::try_from(at.as_millis()).unwrap_or(u64::MAX)))
}

/// Whether `value` is a decimal integer written as [`strict_u64`] asks, whatever its size.
fn is_canonical_digits(value: &str) -> bool {
    !value.is_empty()
        && value.bytes().all(|b| b.is_ascii_digit())
        && (value == "0" || !value.starts_with('0'))
}

/// An offset header (`Stream-Fork-Offset`).
pub(crate) fn offset(headers: &HeaderMap, name: &str) -> Result<Option<u64>, Reply> {
    match text(headers, name)? {
        None => Ok(None),
        Some(value) => Offset::parse(value).map(|o| Some(o.0)).ok_or_else(|| {
            bad(format!(
                "{name} {value:?} is not an offset this server gave"
            ))
        }),
    }
}

/// The idempotent producer headers: all three or none.
pub(crate) fn producer(headers: &HeaderMap) -> Result<Option<ProducerStamp>, Reply> {
    let id = text(headers, PRODUCER_ID)?;
    let epoch = text(headers, PRODUCER_EPOCH)?;
    let seq = text(headers, PRODUCER_SEQ)?;
    let (id, epoch, seq) = match (id, epoch, seq) {
        (None, None, None) => return Ok(None),
        (Some(id), Some(epoch), Some(seq)) => (id, epoch, seq),
        _ => {
            return Err(bad(
                "Producer-Id, Producer-Epoch and Producer-Seq must be sent together".into(),
            ));
        }
    };
    if id.is_empty() {
        return Err(bad("Producer-Id must not be empty".into()));
    }
    let number = |name: &str, value: &str| {
        strict_u64(value)
            .filter(|n| *n <= MAX_PRODUCER_NUMBER)
            .ok_or_else(|| {
                bad(format!(
                    "{name} must be an integer from 0 to 2^53-1; got {value:?}"
                ))
            })
    };
    Ok(Some(ProducerStamp {
        id: id.to_string(),
        epoch: number("Producer-Epoch", epoch)?,
        seq: number("Producer-Seq", seq)?,
    }))
}
