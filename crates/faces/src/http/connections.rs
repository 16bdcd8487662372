//! The HTTP face's connections: at most `--http-max-connections` at once (one more is answered
//! 503 and closed), and no request may take longer than `--http-request-timeout` to arrive
//! (its head here, its body in the handler), so that silent clients cannot pile up.
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service;

use super::head::{self, Claim};
use super::prefixed::Prefixed;
use super::reader_socket::{self, ReaderSocket};

/// How the face bounds its connections and requests.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Longest a request's head, and then its body, may take to arrive; a connection with no
    /// request or response under way is closed after it too. Default 30 seconds.
    pub request_timeout: Duration,
    /// Most connections served at once. Default 4096.
    pub max_connections: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(30),
            max_connections: 4096,
        }
    }
}

/// A failed `accept` (out of descriptors, say) is tried again after this long.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// A warning that keeps biting is logged at most once this often, with a count.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What a connection over the limit reads before it is closed.
const TURNED_AWAY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: text/plain; charset=utf-8\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 66\r\n\
\r\n\
too many connections to this server (--http-max-connections); retry\n";

/// Serves `router` on every connection `listener` accepts, within `bounds`, until `shutdown`
/// resolves; then lets each connection finish its request and waits for them.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    bounds: Bounds,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(bounds.max_connections));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.request_timeout);
    let warnings = Arc::new(Warnings::default());
    let connections = TaskTracker::new();
    let stop = CancellationToken::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    warnings.accept.bite(|n| tracing::warn!(error = %err, failures = n, "HTTP face cannot accept connections"));
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            warnings.full.bite(|n| {
                tracing::warn!(
                    max_connections = bounds.max_connections,
                    refused = n,
                    "HTTP face at its connection limit (--http-max-connections); refusing connections"
                )
            });
            turn_away(&stream);
            continue;
        };
        // Tokens are small writes: without TCP_NODELAY, Nagle's algorithm holds them back.
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            stream,
            permit,
            router: router.clone(),
            builder: builder.clone(),
            timeout: bounds.request_timeout,
            stop: stop.clone(),
            warnings: warnings.clone(),
            tracker: connections.clone(),
        };
        connections.spawn(connection.serve());
    }
    drop(listener);
    stop.cancel();
    connections.close();
    connections.wait().await;
}

/// One accepted connection, and what serving it takes.
struct Connection {
    stream: TcpStream,
    /// Its place within `--http-max-connections`, until it closes.
    permit: OwnedSemaphorePermit,
    router: Router,
    builder: auto::Builder<TokioExecutor>,
    timeout: Duration,
    stop: CancellationToken,
    warnings: Arc<Warnings>,
    /// The connections a shutdown waits for.
    tracker: TaskTracker,
}

/// The most of a connection's first bytes read to see who serves it (`head`); a head that
/// does not fit goes to hyper.
const FIRST_READ: usize = 8 * 1024;

impl Connection {
    /// Reads the first bytes and hands the connection to whoever serves its first request: an
    /// SSE read its own socket (`reader_socket`), anything else hyper.
    async fn serve(self) {
        let mut first = bytes::BytesMut::with_capacity(FIRST_READ);
        let read = tokio::time::timeout(self.timeout, read_some(&self.stream, &mut first)).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => return, // closed before a request, or failed
            Ok(Ok(_)) => {}
            Err(_) => {
                self.warnings.slow.bite(|n| slow_warning(self.timeout, n));
                return;
            }
        }
        match head::claim(&first) {
            Claim::Sse(request) => {
                let socket = ReaderSocket {
                    stream: self.stream,
                    timeout: self.timeout,
                };
                let slow = &self.warnings.slow_readers;
                let answer = reader_socket::answer(socket, *request, self.router, slow);
                // Its body is sent by a task of its own, holding only what that takes:
                // readers are many, and mostly wait.
                if let Some(answered) = Box::pin(answer).await {
                    let send = answered.send(self.warnings, self.permit);
                    self.tracker.spawn(send);
                }
            }
            Claim::Refused(why) => refuse(self.stream, why).await,
            Claim::Pass => {
                let _permit = self.permit;
                let prefixed = Prefixed::new(first.freeze(), self.stream);
                serve_with_hyper(
                    prefixed,
                    self.router,
                    self.builder,
                    self.timeout,
                    self.stop,
                    self.warnings,
                )
                .await
            }
        }
    }
}

/// Reads what `stream` has once it has something (a readiness may come before the bytes).
async fn read_some(stream: &TcpStream, buf: &mut bytes::BytesMut) -> std::io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read_buf(buf) {
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
            read => return read,
        }
    }
}

/// Answers a refused head with 400 and `why`, and closes the connection.
async fn refuse(mut stream: TcpStream, why: &str) {
    let body = format!("{why}\n");
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Serves `stream` with hyper until it closes: closed if its first request's head has not
/// arrived within the timeout (hyper bounds an HTTP/1.1 connection's later heads), finished
/// gracefully once it has been idle that long (no request or response under way, on HTTP/1.1
/// and HTTP/2 alike) or once `stop` fires.
async fn serve_with_hyper(
    stream: Prefixed,
    router: Router,
    builder: auto::Builder<TokioExecutor>,
    timeout: Duration,
    stop: CancellationToken,
    warnings: Arc<Warnings>,
) {
    let activity = Arc::new(Activity::new());
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let active = activity.begin();
            let mut router = router.clone();
            let response = router.call(request.map(axum::body::Body::new));
            async move {
                let response = response.await?;
                // Busy until the response's body is done (an SSE stream's hour included).
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    axum::body::Body::new(Counted {
                        body,
                        _active: active,
                    })
                }))
            }
        })
    };
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(connection);
    // One timer for the connection's life, looked at only when it fires (see `Activity`).
    let idle = tokio::time::sleep(timeout);
    tokio::pin!(idle);
    let mut stopping = false;
    let result = loop {
        tokio::select! {
            result = connection.as_mut() => break result,
            () = idle.as_mut(), if !stopping => {
                let now = tokio::time::Instant::now();
                match activity.idle_for(now) {
                    // Busy: looked at again a timeout later.
                    None => idle.as_mut().reset(now + timeout),
                    Some(idle_for) if idle_for < timeout => {
                        idle.as_mut().reset(now + (timeout - idle_for))
                    }
                    Some(_) if !activity.served_any() => {
                        warnings.slow.bite(|n| slow_warning(timeout, n));
                        return;
                    }
                    Some(_) => {
                        stopping = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    };
    if let Err(err) = result
        && is_header_timeout(&*err)
    {
        warnings.slow.bite(|n| slow_warning(timeout, n));
    }
}

/// What one connection is doing: requests under way (until their responses' bodies are
/// done), and since when it has had none.
///
/// Nothing is woken when a request begins or ends: a request pays two atomic counts and a
/// clock read, and the connection's one idle timer, when it fires, works out from here whether
/// the connection has been idle for the whole timeout.
struct Activity {
    under_way: AtomicUsize,
    served: AtomicBool,
    /// The connection's start, which `idle_since` counts from.
    born: tokio::time::Instant,
    /// When the last request under way ended (the connection's start before any), in
    /// nanoseconds since `born`.
    idle_since: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            under_way: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            born: tokio::time::Instant::now(),
            idle_since: AtomicU64::new(0),
        }
    }

    fn begin(self: &Arc<Self>) -> Active {
        self.served.store(true, Ordering::Relaxed);
        self.under_way.fetch_add(1, Ordering::AcqRel);
        Active(self.clone())
    }

    /// How long the connection has been idle at `now`; `None` while a request is under way.
    fn idle_for(&self, now: tokio::time::Instant) -> Option<Duration> {
        if self.under_way.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = Duration::from_nanos(self.idle_since.load(Ordering::Acquire));
        Some(now.saturating_duration_since(self.born + since))
    }

    fn served_any(&self) -> bool {
        self.served.load(Ordering::Relaxed)
    }
}

/// One request under way on a connection, until dropped.
struct Active(Arc<Activity>);

impl Drop for Active {
    fn drop(&mut self) {
        let activity = &self.0;
        // Noted before the count falls, so that an idle connection's time is never stale.
        let since = tokio::time::Instant::now().saturating_duration_since(activity.born);
        activity
            .idle_since
            .fetch_max(since.as_nanos() as u64, Ordering::AcqRel);
        activity.under_way.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request under way until it is done or dropped.
struct Counted {
    body: axum::body::Body,
    _active: Active,
}

impl http_body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

fn slow_warning(timeout: Duration, count: u64) {
    tracing::warn!(
        timeout = %humantime::format_duration(timeout),
        closed = count,
        "HTTP request head did not arrive in time (--http-request-timeout); connection closed"
    );
}

/// Writes the 503 a connection over the limit gets, if its socket takes it at once, and
/// closes it: a full server spends nothing more on it.
fn turn_away(stream: &TcpStream) {
    let _ = stream.try_write(TURNED_AWAY);
}

/// Whether an error that ended a connection is hyper's header read timeout.
fn is_header_timeout(err: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    err.downcast_ref::<hyper::Error>()
        .is_some_and(hyper::Error::is_timeout)
}

/// Rate-limited warnings of the face's bounds.
#[derive(Default)]
pub(crate) struct Warnings {
    accept: Warning,
    full: Warning,
    slow: Warning,
    pub(super) slow_readers: Warning,
}

/// One warning, logged at most once per [`WARN_EVERY`] with how many times it bit.
#[derive(Default)]
pub(crate) struct Warning {
    /// When it was last logged, and how often it has bitten since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Warning {
    /// Counts one more bite; calls `log` with the count when it is time to log.
    pub(crate) fn bite(&self, log: impl FnOnce(u64)) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 += 1;
        if state.0.is_none_or(|last| last.elapsed() >= WARN_EVERY) {
            let count = std::mem::take(&mut state.1);
            state.0 = Some(Instant::now());
            drop(state);
            log(count);
        }
    }
}
