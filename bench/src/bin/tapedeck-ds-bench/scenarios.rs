//! The measures, each against one server's stream base URL and the [`Api`] it speaks: durable
//! appends with many writers (on as many streams, or on one), appends at a fixed rate, SSE
//! append→receive latency under a fixed rate, and catch-up read throughput.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde::Deserialize;

/// The basin that holds every stream of an S2 server: S2 names a stream within a basin, which
/// each request names in its `s2-basin` header. Made when the server starts.
pub(crate) const S2_BASIN: &str = "tapedeck-bench";

/// How a server's streams are made, appended to and followed. A stream is named by its URL in
/// both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// The Durable Streams protocol: PUT on the stream's URL makes it, a POST appends its body
    /// as one message, and a GET with `?offset=now&live=sse` follows it from its tail.
    DurableStreams,
    /// S2's REST API (`…/v1/streams/{stream}`, in the basin [`S2_BASIN`]): PUT makes the
    /// stream, a POST to `…/records` of a JSON batch of one record (its body in S2's `raw`
    /// format, the message as UTF-8) appends it, acknowledged once durable, and a GET of
    /// `…/records` that accepts `text/event-stream`, with no start, follows it from its tail.
    S2,
}

/// Appends with `writers` concurrent writers, each on its own stream, back to back.
pub(crate) struct AppendResult {
    pub(crate) appends_per_s: f64,
    pub(crate) ack_p50_ms: f64,
    pub(crate) ack_p99_ms: f64,
}

/// SSE append→receive latency.
pub(crate) struct LatencyResult {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) sent: u64,
    pub(crate) received: u64,
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        .tcp_nodelay(true)
        .build()
        .expect("an HTTP client")
}

pub(crate) async fn create(client: &reqwest::Client, api: Api, url: &str) -> Result<()> {
    let request = match api {
        Api::DurableStreams => client.put(url).header("content-type", "text/plain"),
        Api::S2 => client.put(url).header("s2-basin", S2_BASIN),
    };
    let response = request.send().await?;
    if !response.status().is_success() {
        bail!("PUT {url}: {}", response.status());
    }
    Ok(())
}

/// Creates `count` streams named `{prefix}-0`, `{prefix}-1`, …; returns their URLs.
pub(crate) async fn create_streams(
    client: &reqwest::Client,
    api: Api,
    prefix: &str,
    count: usize,
) -> Result<Vec<String>> {
    let mut urls = Vec::with_capacity(count);
    for n in 0..count {
        let url = format!("{prefix}-{n}");
        create(client, api, &url).await?;
        urls.push(url);
    }
    Ok(urls)
}

/// Appends `body` to the stream at `url` as one message, and waits for its acknowledgement.
pub(crate) async fn append(
    client: &reqwest::Client,
    api: Api,
    url: &str,
    body: Vec<u8>,
) -> Result<()> {
    let request = match api {
        Api::DurableStreams => client
            .post(url)
            .header("content-type", "text/plain")
            .body(body),
        Api::S2 => {
            let body = String::from_utf8(body).context("an S2 record body in UTF-8")?;
            let batch = serde_json::json!({ "records": [{ "body": body }] });
            client
                .post(format!("{url}/records"))
                .header("s2-basin", S2_BASIN)
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&batch)?)
        }
    };
    let response = request.send().await?;
    if !response.status().is_success() {
        bail!("POST {url}: {}", response.status());
    }
    Ok(())
}

/// A request that follows the stream at `url` over SSE from its tail: its response's headers
/// come once the server has placed the reader, so what is appended after them reaches it.
pub(crate) fn follow(client: &reqwest::Client, api: Api, url: &str) -> reqwest::RequestBuilder {
    match api {
        Api::DurableStreams => client.get(format!("{url}?offset=now&live=sse")),
        Api::S2 => client
            .get(format!("{url}/records"))
            .header("s2-basin", S2_BASIN)
            .header("accept", "text/event-stream"),
    }
}

pub(crate) fn ms(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    histogram.value_at_quantile(quantile) as f64 / 1000.0
}

/// `writers` writers append `body_bytes`-byte messages as fast as acks come back, spread over
/// `streams` streams (writer `w` on stream `w % streams`), for `warmup + measure`; appends
/// acknowledged during `measure` count.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn appends(
    base: &str,
    api: Api,
    run: &str,
    writers: usize,
    streams: usize,
    body_bytes: usize,
    warmup: Duration,
    measure: Duration,
) -> Result<AppendResult> {
    let client = client();
    let urls = create_streams(&client, api, &format!("{base}/{run}-append"), streams).await?;
    let start = Instant::now();
    let (from, until) = (start + warmup, start + warmup + measure);
    let mut tasks = Vec::with_capacity(writers);
    for w in 0..writers {
        let url = urls[w % streams].clone();
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new(3).expect("histogram");
            let mut counted = 0u64;
            loop {
                let sent = Instant::now();
                if sent >= until {
                    break;
                }
                append(&client, api, &url, vec![b'x'; body_bytes]).await?;
                let done = Instant::now();
                if sent >= from && done <= until {
                    counted += 1;
                    histogram.record(done.duration_since(sent).as_micros() as u64)?;
                }
            }
            Ok::<_, anyhow::Error>((counted, histogram))
        }));
    }
    let mut total = 0;
    let mut histogram = Histogram::<u64>::new(3)?;
    for task in tasks {
        let (counted, h) = task.await??;
        total += counted;
        histogram.add(h)?;
    }
    Ok(AppendResult {
        appends_per_s: total as f64 / measure.as_secs_f64(),
        ack_p50_ms: ms(&histogram, 0.5),
        ack_p99_ms: ms(&histogram, 0.99),
    })
}

/// Digits of a send time in a message body.
pub(crate) const STAMP: usize = 20;

/// `streams` streams, each followed by one SSE reader from `now` and written at `rate` messages
/// a second; each message carries its send time, so every reader measures append→receive.
pub(crate) async fn sse_latency(
    base: &str,
    api: Api,
    run: &str,
    streams: usize,
    rate: u32,
    warmup: Duration,
    measure: Duration,
) -> Result<LatencyResult> {
    let client = client();
    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let urls = create_streams(&client, api, &format!("{base}/{run}-sse"), streams).await?;
    let record_from = warmup;
    let mut readers = Vec::with_capacity(streams);
    for url in &urls {
        let response = follow(&client, api, url)
            .send()
            .await
            .with_context(|| format!("SSE {url}"))?;
        if !response.status().is_success() {
            bail!("SSE {url}: {}", response.status());
        }
        let stop = stop.clone();
        let received = received.clone();
        readers.push(tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new(3).expect("histogram");
            let mut body = response.bytes_stream();
            let mut buffer = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let next = tokio::time::timeout(Duration::from_millis(200), body.next()).await;
                let chunk = match next {
                    Ok(Some(chunk)) => chunk?,
                    Ok(None) => break,
                    Err(_) => continue,
                };
                let now = epoch.elapsed();
                buffer.extend_from_slice(&chunk);
                while let Some(end) = find(&buffer, b"\n\n") {
                    let event: Vec<u8> = buffer.drain(..end + 2).collect();
                    for stamp in stamps(api, &event) {
                        received.fetch_add(1, Ordering::Relaxed);
                        let sent = Duration::from_nanos(stamp);
                        if sent >= record_from {
                            let micros = now.saturating_sub(sent).as_micros() as u64;
                            histogram.record(micros.max(1))?;
                        }
                    }
                }
            }
            Ok::<_, anyhow::Error>(histogram)
        }));
    }
    let (sent, _acks) = write_stamped(
        &client,
        api,
        urls,
        f64::from(rate),
        epoch,
        warmup,
        warmup + measure,
    )
    .await?;
    // The last messages' time to arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut histogram = Histogram::<u64>::new(3)?;
    for reader in readers {
        histogram.add(reader.await??)?;
    }
    Ok(LatencyResult {
        p50_ms: ms(&histogram, 0.5),
        p99_ms: ms(&histogram, 0.99),
        max_ms: histogram.max() as f64 / 1000.0,
        sent,
        received: received.load(Ordering::Relaxed),
    })
}

/// Appends to each of `urls` at `rate` messages a second (less than one is slower than one a
/// second) until `until` after `epoch`, each
/// message its send time (ns since `epoch`, [`STAMP`] digits). Returns how many were sent, and
/// the times to their acknowledgements (µs) of those sent from `from` on.
pub(crate) async fn write_stamped(
    client: &reqwest::Client,
    api: Api,
    urls: Vec<String>,
    rate: f64,
    epoch: Instant,
    from: Duration,
    until: Duration,
) -> Result<(u64, Histogram<u64>)> {
    let streams = urls.len();
    let sent = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::with_capacity(streams);
    for (s, url) in urls.into_iter().enumerate() {
        let (client, sent) = (client.clone(), sent.clone());
        writers.push(tokio::spawn(async move {
            let mut acks = Histogram::<u64>::new(3).expect("histogram");
            let period = Duration::from_secs_f64(1.0 / rate);
            // Spread the writers over one period so their appends do not arrive in bursts.
            let offset = period * s as u32 / streams as u32;
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + offset, period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            loop {
                ticker.tick().await;
                let at = epoch.elapsed();
                if at >= until {
                    break;
                }
                let stamp = format!("{:0STAMP$}", at.as_nanos());
                append(&client, api, &url, stamp.into_bytes()).await?;
                sent.fetch_add(1, Ordering::Relaxed);
                if at >= from {
                    let micros = epoch.elapsed().saturating_sub(at).as_micros() as u64;
                    acks.record(micros.max(1))?;
                }
            }
            Ok::<_, anyhow::Error>(acks)
        }));
    }
    let mut acks = Histogram::<u64>::new(3)?;
    for writer in writers {
        acks.add(writer.await??)?;
    }
    Ok((sent.load(Ordering::Relaxed), acks))
}

/// `streams` streams, each appended to at `rate` messages a second, with no reader: the
/// acknowledgements' latency under a fixed load. Counts what is sent during `measure`.
pub(crate) async fn fixed_rate(
    base: &str,
    api: Api,
    run: &str,
    streams: usize,
    rate: u32,
    warmup: Duration,
    measure: Duration,
) -> Result<AppendResult> {
    let client = client();
    let urls = create_streams(&client, api, &format!("{base}/{run}-rate"), streams).await?;
    let epoch = Instant::now();
    let (_, acks) = write_stamped(
        &client,
        api,
        urls,
        f64::from(rate),
        epoch,
        warmup,
        warmup + measure,
    )
    .await?;
    Ok(AppendResult {
        appends_per_s: acks.len() as f64 / measure.as_secs_f64(),
        ack_p50_ms: ms(&acks, 0.5),
        ack_p99_ms: ms(&acks, 0.99),
    })
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The send times in one SSE event of `api`'s follow.
pub(crate) fn stamps(api: Api, event: &[u8]) -> Vec<u64> {
    match api {
        Api::DurableStreams => durable_streams_stamps(event),
        Api::S2 => s2_stamps(event),
    }
}

/// Whether the SSE event `text` is of type `name` (with or without the space after the colon).
fn is_event(text: &str, name: &str) -> bool {
    text.lines().any(|line| {
        line.trim()
            .strip_prefix("event:")
            .is_some_and(|kind| kind.trim() == name)
    })
}

/// The send times in one Durable Streams SSE `data` event: its `data:` lines hold whole 20-digit
/// stamps.
fn durable_streams_stamps(event: &[u8]) -> Vec<u64> {
    let text = String::from_utf8_lossy(event);
    if !is_event(&text, "data") {
        return Vec::new();
    }
    let digits: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .collect();
    digits
        .as_bytes()
        .chunks(STAMP)
        .filter(|c| c.len() == STAMP)
        .filter_map(|c| std::str::from_utf8(c).ok()?.parse().ok())
        .collect()
}

/// The records of an S2 `batch` event's JSON data (other fields ignored).
#[derive(Deserialize)]
struct S2Batch {
    records: Vec<S2Record>,
}

#[derive(Deserialize)]
struct S2Record {
    /// In the `raw` format: the appended text.
    #[serde(default)]
    body: String,
}

/// The send times in one S2 SSE event: a `batch` event's data is a JSON batch of records, each
/// body one stamp; `ping` events (heartbeats) hold none.
fn s2_stamps(event: &[u8]) -> Vec<u64> {
    let text = String::from_utf8_lossy(event);
    if !is_event(&text, "batch") {
        return Vec::new();
    }
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    // A batch that does not parse yields no stamps: the measures count what arrived.
    let Ok(batch) = serde_json::from_str::<S2Batch>(&data.join("\n")) else {
        return Vec::new();
    };
    batch
        .records
        .iter()
        .filter_map(|r| r.body.parse().ok())
        .collect()
}

/// Writes one stream of `total_bytes` in `append_bytes` appends, then has `readers` readers
/// each read it from the start `passes` times with catch-up GETs; returns MB/s read. Durable
/// Streams servers only: S2's reads are paginated (at most 1,000 records or 1 MiB a response),
/// so reading a stream from the start is not the same request there.
pub(crate) async fn catch_up(
    base: &str,
    run: &str,
    total_bytes: usize,
    append_bytes: usize,
    readers: usize,
    passes: usize,
) -> Result<f64> {
    let client = client();
    let url = format!("{base}/{run}-catchup");
    create(&client, Api::DurableStreams, &url).await?;
    for _ in 0..total_bytes / append_bytes {
        append(&client, Api::DurableStreams, &url, vec![b'r'; append_bytes]).await?;
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..readers {
        let client = client.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut bytes = 0usize;
            for _ in 0..passes {
                let mut offset = "-1".to_string();
                loop {
                    let response = client.get(format!("{url}?offset={offset}")).send().await?;
                    if !response.status().is_success() {
                        bail!("GET {url}: {}", response.status());
                    }
                    let next = response
                        .headers()
                        .get("stream-next-offset")
                        .context("no Stream-Next-Offset")?
                        .to_str()?
                        .to_string();
                    let up_to_date = response.headers().contains_key("stream-up-to-date");
                    bytes += response.bytes().await?.len();
                    offset = next;
                    if up_to_date {
                        break;
                    }
                }
            }
            Ok::<_, anyhow::Error>(bytes)
        }));
    }
    let mut bytes = 0;
    for task in tasks {
        bytes += task.await??;
    }
    if bytes < total_bytes * readers * passes {
        bail!(
            "read {bytes} bytes, expected {}",
            total_bytes * readers * passes
        );
    }
    Ok(bytes as f64 / 1e6 / started.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_read_from_data_events_only() {
        let event = b"event: data\ndata:0000000000000000001200000000000000000034\n\n";
        assert_eq!(stamps(Api::DurableStreams, event), vec![12, 34]);
        let control = b"event: control\ndata:{\"a\":1}\n\n";
        assert!(stamps(Api::DurableStreams, control).is_empty());
    }

    #[test]
    fn s2_stamps_are_read_from_batch_events_only() {
        let event = b"event: batch\nid: 1,2,40\ndata: {\"records\":[\
            {\"seq_num\":0,\"timestamp\":5,\"body\":\"00000000000000000012\"},\
            {\"seq_num\":1,\"timestamp\":6,\"body\":\"00000000000000000034\"}],\
            \"tail\":{\"seq_num\":2,\"timestamp\":6}}\n\n";
        assert_eq!(stamps(Api::S2, event), vec![12, 34]);
        let ping =
            b"event: ping\ndata: {\"timestamp\":1,\"tail\":{\"seq_num\":2,\"timestamp\":6}}\n\n";
        assert!(stamps(Api::S2, ping).is_empty());
    }
}
