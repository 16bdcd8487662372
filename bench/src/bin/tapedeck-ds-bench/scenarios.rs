//! The measures, each against one server's stream base URL: durable appends with many writers
//! (on as many streams, or on one), appends at a fixed rate, SSE append→receive latency under a
//! fixed rate, and catch-up read throughput.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use hdrhistogram::Histogram;

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

pub(crate) async fn create(client: &reqwest::Client, url: &str) -> Result<()> {
    let response = client
        .put(url)
        .header("content-type", "text/plain")
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("PUT {url}: {}", response.status());
    }
    Ok(())
}

/// Creates `count` streams named `{prefix}-0`, `{prefix}-1`, …; returns their URLs.
pub(crate) async fn create_streams(
    client: &reqwest::Client,
    prefix: &str,
    count: usize,
) -> Result<Vec<String>> {
    let mut urls = Vec::with_capacity(count);
    for n in 0..count {
        let url = format!("{prefix}-{n}");
        create(client, &url).await?;
        urls.push(url);
    }
    Ok(urls)
}

pub(crate) async fn append(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Result<()> {
    let response = client
        .post(url)
        .header("content-type", "text/plain")
        .body(body)
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("POST {url}: {}", response.status());
    }
    Ok(())
}

pub(crate) fn ms(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    histogram.value_at_quantile(quantile) as f64 / 1000.0
}

/// `writers` writers append `body_bytes`-byte messages as fast as acks come back, spread over
/// `streams` streams (writer `w` on stream `w % streams`), for `warmup + measure`; appends
/// acknowledged during `measure` count.
pub(crate) async fn appends(
    base: &str,
    run: &str,
    writers: usize,
    streams: usize,
    body_bytes: usize,
    warmup: Duration,
    measure: Duration,
) -> Result<AppendResult> {
    let client = client();
    let urls = create_streams(&client, &format!("{base}/{run}-append"), streams).await?;
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
                append(&client, &url, vec![b'x'; body_bytes]).await?;
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
    let urls = create_streams(&client, &format!("{base}/{run}-sse"), streams).await?;
    let record_from = warmup;
    let mut readers = Vec::with_capacity(streams);
    for url in &urls {
        let response = client
            .get(format!("{url}?offset=now&live=sse"))
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
                    for stamp in stamps(&event) {
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
                append(&client, &url, stamp.into_bytes()).await?;
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
    run: &str,
    streams: usize,
    rate: u32,
    warmup: Duration,
    measure: Duration,
) -> Result<AppendResult> {
    let client = client();
    let urls = create_streams(&client, &format!("{base}/{run}-rate"), streams).await?;
    let epoch = Instant::now();
    let (_, acks) = write_stamped(
        &client,
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

/// The send times in one SSE `data` event: its `data:` lines hold whole 20-digit stamps.
pub(crate) fn stamps(event: &[u8]) -> Vec<u64> {
    let text = String::from_utf8_lossy(event);
    if !text
        .lines()
        .any(|l| l.trim() == "event: data" || l.trim() == "event:data")
    {
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

/// Writes one stream of `total_bytes` in `append_bytes` appends, then has `readers` readers
/// each read it from the start `passes` times with catch-up GETs; returns MB/s read.
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
    create(&client, &url).await?;
    for _ in 0..total_bytes / append_bytes {
        append(&client, &url, vec![b'r'; append_bytes]).await?;
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
        assert_eq!(stamps(event), vec![12, 34]);
        assert!(stamps(b"event: control\ndata:{\"a\":1}\n\n").is_empty());
    }
}
