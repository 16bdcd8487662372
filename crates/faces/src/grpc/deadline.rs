//! A caller's deadline (`grpc-timeout`) that passes before the response began answers
//! DEADLINE_EXCEEDED, as the gRPC spec says, rather than tonic's own CANCELLED.
//!
//! tonic enforces the header too, one layer further out, and answers CANCELLED ("Timeout
//! expired"). A client whose own timer lost that race (grpcio, for one) then reported a passed
//! deadline as a cancellation. This layer's timer starts before tonic's, for the same duration,
//! and tonic polls the service before its own timer, so this answer always comes first.
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;

/// The layer to put around the gRPC routes.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeadlineLayer;

impl<S> tower_layer::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// The services, under the caller's deadline.
#[derive(Clone, Debug)]
pub struct Deadline<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower_service::Service<http::Request<Body>> for Deadline<S>
where
    S: tower_service::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let timeout = request
            .headers()
            .get("grpc-timeout")
            .and_then(|value| value.to_str().ok())
            .and_then(parse_grpc_timeout);
        let response = self.inner.call(request);
        let Some(timeout) = timeout else {
            return Box::pin(response);
        };
        // The timer starts here, in `call`, so that it is never later than tonic's.
        let sleep = tokio::time::sleep(timeout);
        Box::pin(async move {
            tokio::select! {
                biased;
                response = response => response,
                () = sleep => Ok(tonic::Status::deadline_exceeded(
                    "the call's deadline (its grpc-timeout) passed before it was answered",
                )
                .into_http()),
            }
        })
    }
}

/// The duration a `grpc-timeout` value names: 1 to 8 digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at_checked(value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values_are_read_by_their_unit() {
        assert_eq!(
            parse_grpc_timeout("2999m"),
            Some(Duration::from_millis(2999))
        );
        assert_eq!(parse_grpc_timeout("3S"), Some(Duration::from_secs(3)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(
            parse_grpc_timeout("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(parse_grpc_timeout("5n"), Some(Duration::from_nanos(5)));
    }

    #[test]
    fn malformed_grpc_timeout_values_are_no_deadline() {
        for value in ["", "m", "123456789m", "12x", "-1S", "1.5S", "1 S", "é"] {
            assert_eq!(parse_grpc_timeout(value), None, "{value:?}");
        }
    }
}
