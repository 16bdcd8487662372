//! Fan-out: many SSE readers on each of a few streams written at a steady rate, as when
//! thousands of browsers follow one popular response. Measures append→receive latency at every
//! reader, the server's resident memory per idle reader, its CPU while the streams are
//! written, and every reader that failed or missed a message. Readers have a connection each
//! (HTTP/1.1), or share HTTP/2 connections.
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use hdrhistogram::Histogram;

use crate::procfs;
use crate::scenarios::{Api, client, create_streams, find, follow, ms, stamps, write_stamped};

/// Readers connecting at once.
const CONNECTING: usize = 256;
/// How long the readers sit idle before the server's memory is read.
const IDLE: Duration = Duration::from_secs(2);
/// Readers per client source address. A client bound to an address picks its ports from that
/// address's ~28,000 ephemeral ones, and the ports of an earlier run may still be in
/// TIME_WAIT, so each client takes a loopback address no earlier client of this process had.
const READERS_PER_ADDRESS: usize = 10_000;
/// Loopback source addresses handed out so far (127.1.0.0, 127.1.0.1, …).
static ADDRESSES_USED: AtomicU32 = AtomicU32::new(0);

/// What one fan-out run measured.
pub(crate) struct FanOutResult {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    /// Messages appended during the run.
    pub(crate) sent: u64,
    /// Messages every reader should have received (sent × readers per stream).
    pub(crate) expected: u64,
    pub(crate) received: u64,
    /// Readers that could not connect, or whose stream failed.
    pub(crate) reader_errors: u64,
    /// The server's resident memory grown per idle reader, in KiB.
    pub(crate) rss_per_reader_kib: f64,
    /// The server's CPU while the streams were written, in cores.
    pub(crate) server_cores: f64,
}

/// `streams` streams, each followed by `per_stream` SSE readers from `now` and written at
/// `rate` messages a second, for `warmup + measure`; `pid` is the server's process. With
/// `per_connection` over 1, that many readers share each HTTP/2 connection.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fan_out(
    base: &str,
    api: Api,
    run: &str,
    streams: usize,
    per_stream: usize,
    per_connection: usize,
    rate: f64,
    warmup: Duration,
    measure: Duration,
    pid: u32,
) -> Result<FanOutResult> {
    let client = client();
    let urls = create_streams(&client, api, &format!("{base}/{run}-fan"), streams).await?;
    let rss_before = procfs::memory(Some(pid)).context("the server's memory")?;
    let epoch = Instant::now();
    // Told once, to every reader at the same time: 100,000 readers each polling a flag would
    // keep the bench's own runtime busy.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let received = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    // Stamps sent from this time on (ns since `epoch`) are measured; set once writing starts.
    let record_from = Arc::new(AtomicU64::new(u64::MAX));
    let histogram = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));

    let wanted: Vec<&String> = urls
        .iter()
        .flat_map(|url| std::iter::repeat_n(url, per_stream))
        .collect();
    let readers = wanted.len();
    let (clients, readers_per_client) = match per_connection {
        1 => (readers_clients(readers)?, READERS_PER_ADDRESS),
        n => (http2_clients(readers.div_ceil(n))?, n),
    };
    let responses: Vec<_> = futures::stream::iter(wanted.into_iter().enumerate())
        .map(|(n, url)| {
            let client = clients[n / readers_per_client].clone();
            async move {
                let response = match follow(&client, api, url).send().await {
                    Ok(response) if response.status().is_success() => response,
                    Ok(response) => return Err(format!("answered {}", response.status())),
                    Err(err) => return Err(format!("{err:?}")),
                };
                Ok(response)
            }
        })
        .buffer_unordered(CONNECTING)
        .collect()
        .await;
    let mut tasks = Vec::with_capacity(readers);
    let mut first_refusal = None;
    for response in responses {
        let response = match response {
            Ok(response) => response,
            Err(why) => {
                errors.fetch_add(1, Ordering::Relaxed);
                first_refusal.get_or_insert(why);
                continue;
            }
        };
        let (mut stopped, received, errors) = (stopped.clone(), received.clone(), errors.clone());
        let (histogram, record_from) = (histogram.clone(), record_from.clone());
        tasks.push(tokio::spawn(async move {
            let mut body = response.bytes_stream();
            let mut buffer = Vec::new();
            loop {
                let chunk = tokio::select! {
                    biased;
                    _ = stopped.changed() => return,
                    next = body.next() => match next {
                        Some(Ok(chunk)) => chunk,
                        Some(Err(_)) | None => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    },
                };
                let now = epoch.elapsed();
                buffer.extend_from_slice(&chunk);
                while let Some(end) = find(&buffer, b"\n\n") {
                    let event: Vec<u8> = buffer.drain(..end + 2).collect();
                    for stamp in stamps(api, &event) {
                        received.fetch_add(1, Ordering::Relaxed);
                        let sent = Duration::from_nanos(stamp);
                        if stamp >= record_from.load(Ordering::Relaxed) {
                            let micros = now.saturating_sub(sent).as_micros() as u64;
                            let mut histogram = histogram.lock().unwrap_or_else(|e| e.into_inner());
                            let _ = histogram.record(micros.max(1));
                        }
                    }
                }
            }
        }));
    }
    if let Some(why) = first_refusal {
        eprintln!(
            "   {} of {readers} readers were not served; the first: {why}",
            readers - tasks.len()
        );
    }
    tokio::time::sleep(IDLE).await;
    let rss_idle = procfs::memory(Some(pid)).context("the server's memory")?;
    // Per reader the server holds: one that was refused holds nothing.
    let rss_per_reader_kib =
        rss_idle.rss_kib.saturating_sub(rss_before.rss_kib) as f64 / tasks.len().max(1) as f64;

    // The writers' clock starts now: stamps are times since `epoch`.
    let started = epoch.elapsed();
    let until = started + warmup + measure;
    record_from.store((started + warmup).as_nanos() as u64, Ordering::Relaxed);
    let cpu_before = procfs::cpu_seconds(Some(pid)).context("the server's CPU")?;
    let (sent, _acks) = write_stamped(&client, api, urls, rate, epoch, until, until).await?;
    let cpu_after = procfs::cpu_seconds(Some(pid)).context("the server's CPU")?;
    let server_cores = (cpu_after - cpu_before) / (warmup + measure).as_secs_f64();
    // The last messages' time to arrive.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = stop.send(true);
    for task in tasks {
        let _ = task.await;
    }
    let histogram = histogram.lock().unwrap_or_else(|e| e.into_inner());
    Ok(FanOutResult {
        p50_ms: ms(&histogram, 0.5),
        p99_ms: ms(&histogram, 0.99),
        max_ms: histogram.max() as f64 / 1000.0,
        sent,
        expected: sent * per_stream as u64,
        received: received.load(Ordering::Relaxed),
        reader_errors: errors.load(Ordering::Relaxed),
        rss_per_reader_kib,
        server_cores,
    })
}

/// One HTTP client per [`READERS_PER_ADDRESS`] readers, each connecting from a loopback
/// address of its own.
fn readers_clients(readers: usize) -> Result<Vec<reqwest::Client>> {
    (0..readers.div_ceil(READERS_PER_ADDRESS).max(1))
        .map(|_| {
            let [_, _, high, low] = ADDRESSES_USED.fetch_add(1, Ordering::Relaxed).to_be_bytes();
            let address = Ipv4Addr::new(127, 1, high, low);
            Ok(reqwest::Client::builder()
                .pool_max_idle_per_host(usize::MAX)
                .tcp_nodelay(true)
                .local_address(IpAddr::V4(address))
                .build()?)
        })
        .collect()
}

/// `connections` HTTP/2 clients (cleartext, prior knowledge), each of which opens one
/// connection and multiplexes its readers' requests on it.
fn http2_clients(connections: usize) -> Result<Vec<reqwest::Client>> {
    (0..connections)
        .map(|_| {
            Ok(reqwest::Client::builder()
                .http2_prior_knowledge()
                .tcp_nodelay(true)
                .build()?)
        })
        .collect()
}
