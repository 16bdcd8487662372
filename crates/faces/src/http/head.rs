//! The first request head on a connection, read by `httparse`, to decide who serves it: an SSE
//! read (`GET …?live=sse` over HTTP/1.1, head complete in the first read, nothing after it)
//! is served on its own socket (`reader_socket`); every other request goes to hyper with the
//! bytes read so far, so nothing about it changes.
//!
//! A claimed head that smuggles (both Content-Length and Transfer-Encoding, or Content-Length
//! twice) or carries a body is refused with 400: a live read has no body, and a proxy in front
//! must not read a second request where this server reads one.
use axum::body::Body;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version};

/// Most headers a claimed head may carry; a longer one goes to hyper, which has its own bound.
const MAX_HEADERS: usize = 64;

/// Who serves the first request of a connection.
#[derive(Debug)]
pub(super) enum Claim {
    /// An SSE read served on its own socket.
    Sse(Box<Request<Body>>),
    /// An SSE read refused with 400 and this reason, and the connection closed.
    Refused(&'static str),
    /// hyper, from the first byte (everything else, and any head not complete in the bytes
    /// read).
    Pass,
}

/// Who serves the request whose head starts `bytes` (everything the first read returned).
pub(super) fn claim(bytes: &[u8]) -> Claim {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    // Anything but one complete head and nothing after it (a body, a pipelined request, a
    // partial head, HTTP/2's preface, a parse error) is hyper's to read and to answer.
    let Ok(httparse::Status::Complete(len)) = parsed.parse(bytes) else {
        return Claim::Pass;
    };
    if len != bytes.len() || parsed.method != Some("GET") || parsed.version != Some(1) {
        return Claim::Pass;
    }
    // The target as the routes will read it (a malformed one is hyper's to refuse).
    let Some(uri) = parsed
        .path
        .filter(|path| path.starts_with('/'))
        .and_then(|path| Uri::try_from(path).ok())
    else {
        return Claim::Pass;
    };
    if !asks_for_sse(&uri) {
        return Claim::Pass;
    }
    let mut lengths = 0;
    let mut transfer_encoded = false;
    let mut map = HeaderMap::with_capacity(parsed.headers.len());
    for header in parsed.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(header.name.as_bytes()) else {
            return Claim::Refused("a header name is malformed");
        };
        let Ok(value) = HeaderValue::from_bytes(header.value) else {
            return Claim::Refused("a header value is malformed");
        };
        if name == http::header::CONTENT_LENGTH {
            lengths += 1;
            if value.as_bytes().trim_ascii() != b"0" {
                return Claim::Refused("a live read (live=sse) has no body");
            }
        } else if name == http::header::TRANSFER_ENCODING {
            transfer_encoded = true;
        } else if name == http::header::UPGRADE {
            // A protocol switch (h2c) is hyper's.
            return Claim::Pass;
        }
        map.append(name, value);
    }
    if transfer_encoded && lengths > 0 {
        return Claim::Refused("both Content-Length and Transfer-Encoding are set");
    }
    if lengths > 1 {
        return Claim::Refused("Content-Length is set more than once");
    }
    if transfer_encoded {
        return Claim::Refused("a live read (live=sse) has no body");
    }
    let mut request = Request::new(Body::empty());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = map;
    Claim::Sse(Box::new(request))
}

/// Whether the request target's query says `live=sse`.
fn asks_for_sse(uri: &Uri) -> bool {
    let Some(query) = uri.query() else {
        return false;
    };
    form_urlencoded::parse(query.as_bytes()).any(|(name, value)| name == "live" && value == "sse")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn claimed(head: &str) -> Claim {
        claim(head.as_bytes())
    }

    #[test]
    fn an_sse_read_is_claimed_with_its_headers() {
        let Claim::Sse(request) = claimed(
            "GET /v1/stream/a?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: 0\r\n\r\n",
        ) else {
            panic!("not claimed");
        };
        assert_eq!(request.uri().path(), "/v1/stream/a");
        assert_eq!(request.uri().query(), Some("offset=-1&live=sse"));
        assert_eq!(request.headers()["authorization"], "Bearer k");
        assert_eq!(request.headers()["host"], "x");
    }

    #[test]
    fn everything_else_goes_to_hyper() {
        for head in [
            "GET /v1/stream/a?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /v1/stream/a?live=long-poll HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /v1/stream/a?live=sse HTTP/1.0\r\nHost: x\r\n\r\n",
            "POST /v1/stream/a?live=sse HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
            "HEAD /v1/stream/a?live=sse HTTP/1.1\r\nHost: x\r\n\r\n",
            // Not complete in the first read, or something after it.
            "GET /v1/stream/a?live=sse HTTP/1.1\r\nHost: x\r\n",
            "GET /v1/stream/a?live=sse HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n\r\n",
            "GET /v1/stream/a?live=sse HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "GET * HTTP/1.1\r\n\r\n",
            "garbage\r\n\r\n",
            "",
        ] {
            assert!(matches!(claimed(head), Claim::Pass), "{head:?}");
        }
    }

    #[test]
    fn smuggling_forms_and_bodies_are_refused() {
        for (head, why) in [
            (
                "GET /s?live=sse HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
                "both Content-Length and Transfer-Encoding are set",
            ),
            (
                "GET /s?live=sse HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
                "Content-Length is set more than once",
            ),
            (
                "GET /s?live=sse HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                "a live read (live=sse) has no body",
            ),
            (
                "GET /s?live=sse HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
                "a live read (live=sse) has no body",
            ),
        ] {
            match claimed(head) {
                Claim::Refused(reason) => assert_eq!(reason, why, "{head:?}"),
                other => panic!("{head:?} was not refused: {other:?}"),
            }
        }
    }

    /// A well-formed SSE head, to be mutated.
    const SEED: &[u8] =
        b"GET /v1/stream/a?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Any bytes at all: no panic, and what is claimed is a GET over HTTP/1.1 that asks
        /// for SSE.
        #[test]
        fn any_bytes_are_claimed_passed_or_refused_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            check(&bytes);
        }

        /// A real head with bytes flipped, cut or inserted: the same, nearer the paths taken.
        #[test]
        fn a_mutated_head_is_claimed_passed_or_refused_without_a_panic(
            edits in proptest::collection::vec((0..SEED.len(), any::<u8>(), 0..3u8), 1..6)
        ) {
            let mut bytes = SEED.to_vec();
            for (at, byte, kind) in edits {
                let at = at.min(bytes.len());
                match kind {
                    0 if at < bytes.len() => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    _ => bytes.truncate(at.max(1)),
                }
            }
            check(&bytes);
        }
    }

    fn check(bytes: &[u8]) {
        if let Claim::Sse(request) = claim(bytes) {
            assert_eq!(request.method(), Method::GET);
            assert!(asks_for_sse(request.uri()));
            assert!(request.headers().get_all("content-length").iter().count() <= 1);
            assert!(request.headers().get("transfer-encoding").is_none());
        }
    }
}
