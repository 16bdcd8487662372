//! The live-recordings curve: the server's memory against recordings held open. At each size a
//! fresh server gets that many `Record` streams, each of which sends one token and stays open;
//! once `List` shows every one live with its token and the server's CPU is idle, its RSS is
//! read, against what it held before the streams.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use tapedeck::pb::tapedeck::recordings_client::RecordingsClient;
use tapedeck::pb::tapedeck::{ListRecordingsRequest, RecordingStatus};
use tonic::transport::Endpoint;

use super::chart::{self, Chart, Series};
use super::growth::{Expectation, Growth, Verdict, verdict};
use crate::driver::crash;
use crate::procfs;
use crate::targets::{Api, Environment, Producer, Tapedeck, Target, temp_dir};
use crate::workload::{STANDARD_TOKEN_BYTES, encode_token};

/// Streams opened on one HTTP/2 connection. tonic's server sets no limit, but an h2 client
/// opens at most 100 before the server's settings arrive; spreading the streams keeps every
/// connection within that, as many clients would be.
const STREAMS_PER_CONNECTION: usize = 100;
/// How long the streams may take to show up live.
const OPEN_LIMIT: Duration = Duration::from_secs(300);
/// The server counts as idle once it used less than this share of a core over [`IDLE_WINDOW`].
const IDLE_CORES: f64 = 0.02;
const IDLE_WINDOW: Duration = Duration::from_secs(1);
/// Longest wait for the server to become idle before its memory is read anyway.
const IDLE_LIMIT: Duration = Duration::from_secs(60);

const RSS: Expectation = Expectation {
    growth: Growth::Linear,
    why: "each live recording holds its tape (the tail live readers are served from), a \
          producer session task and an HTTP/2 stream's state and buffers in the server",
};

/// One size of the curve.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Point {
    pub live: usize,
    /// From the first `Record` to every recording listed live with its token.
    pub open_s: f64,
    /// The idle server's RSS before the streams, and with them.
    pub baseline_rss_mib: f64,
    pub rss_mib: f64,
    /// `(rss - baseline) / live`.
    pub kib_per_recording: f64,
}

/// The measured curve.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Curve {
    pub points: Vec<Point>,
    pub verdicts: Vec<Verdict>,
}

/// Measures a fresh server at each of `sizes`.
pub(crate) async fn run(env: &Environment, sizes: &[usize]) -> Result<Curve> {
    let mut points = Vec::new();
    for &live in sizes {
        let point = measure(env, live).await?;
        eprintln!(
            "   live curve: {live} live recordings: {:.1} MiB RSS ({:.1} KiB each)",
            point.rss_mib, point.kib_per_recording
        );
        points.push(point);
    }
    let rss: Vec<_> = points.iter().map(|p| (p.live as f64, p.rss_mib)).collect();
    let verdicts = vec![verdict("server RSS", "MiB", "live recordings", &rss, &RSS)];
    Ok(Curve { points, verdicts })
}

async fn measure(env: &Environment, live: usize) -> Result<Point> {
    let root = temp_dir(&env.work_dir, "tapedeck-curve-live-")?;
    let (server, addr) = crash::spawn(env, &root.path().join("data")).await?;
    let pid = server.pid();
    let baseline_rss_mib = idle_rss(pid).await?;
    let served = Environment {
        tapedeck_addr: Some(addr),
        tapedeck_pid: Some(pid),
        ..env.clone()
    };
    let connections = live.div_ceil(STREAMS_PER_CONNECTION);
    let target = Tapedeck::start(&served, Api::Record, connections, None, false).await?;
    let started = Instant::now();
    let mut producers = Vec::with_capacity(live);
    for i in 0..live {
        // Lane i % connections: consecutive streams go to different connections.
        let mut producer = target.record(i, &format!("live-{i}")).await?;
        producer
            .send(encode_token(0, 0, STANDARD_TOKEN_BYTES))
            .await?;
        producers.push(producer);
    }
    wait_listed(addr, live).await?;
    let open_s = started.elapsed().as_secs_f64();
    let rss_mib = idle_rss(pid).await?;
    // The server goes first, so the open streams end with it rather than each one being
    // interrupted and ended by a server that is still running.
    drop(server);
    drop(producers);
    Ok(Point {
        live,
        open_s,
        baseline_rss_mib,
        rss_mib,
        kib_per_recording: (rss_mib - baseline_rss_mib) * 1024.0 / live.max(1) as f64,
    })
}

/// Waits until `List` shows `live` recordings live, each with its token.
async fn wait_listed(addr: SocketAddr, live: usize) -> Result<()> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await
        .with_context(|| format!("connecting to tapedeck at {addr}"))?;
    let mut client = RecordingsClient::new(channel);
    let deadline = Instant::now() + OPEN_LIMIT;
    loop {
        let (mut listed, mut with_token, mut token) = (0, 0, String::new());
        loop {
            let page = client
                .list(ListRecordingsRequest {
                    status: RecordingStatus::Recording as i32,
                    page_size: 1_000,
                    page_token: token,
                })
                .await
                .context("List")?
                .into_inner();
            listed += page.recordings.len();
            with_token += page.recordings.iter().filter(|r| r.chunk_count > 0).count();
            token = page.next_page_token;
            if token.is_empty() {
                break;
            }
        }
        if listed >= live && with_token >= live {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{listed} of {live} recordings live ({with_token} with their token) after {OPEN_LIMIT:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The RSS of process `pid` once it is idle (or after [`IDLE_LIMIT`]), in MiB.
async fn idle_rss(pid: u32) -> Result<f64> {
    let deadline = Instant::now() + IDLE_LIMIT;
    let mut before = procfs::cpu_seconds(Some(pid)).context("reading the server's CPU time")?;
    loop {
        tokio::time::sleep(IDLE_WINDOW).await;
        let now = procfs::cpu_seconds(Some(pid)).context("reading the server's CPU time")?;
        if now - before < IDLE_CORES * IDLE_WINDOW.as_secs_f64() || Instant::now() > deadline {
            break;
        }
        before = now;
    }
    let memory = procfs::memory(Some(pid)).context("reading the server's memory")?;
    Ok(memory.rss_kib as f64 / 1024.0)
}

/// The curve's table.
pub(crate) fn table(curve: &Curve) -> String {
    let mut out = String::from(
        "\n### curve: server memory against live recordings (each one Record stream, one token, \
         open)\n\n| live recordings | opened and listed in s | RSS before MiB | RSS MiB | \
         KiB per live recording |\n|---:|---:|---:|---:|---:|\n",
    );
    for p in &curve.points {
        out.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
            p.live, p.open_s, p.baseline_rss_mib, p.rss_mib, p.kib_per_recording
        ));
    }
    for v in &curve.verdicts {
        out.push_str(&format!("\n- {}", v.line));
    }
    out.push('\n');
    out
}

/// Draws `live-rss.svg` in `dir`.
pub(crate) fn draw(curve: &Curve, dir: &Path) -> Result<Vec<PathBuf>> {
    let per = curve.points.last().map_or(String::new(), |p| {
        format!(
            "; {:.1} KiB a live recording at {}",
            p.kib_per_recording, p.live
        )
    });
    let chart = Chart {
        title: "tapedeck: server memory against live recordings",
        x_label: "live recordings, one open Record stream each (log scale)",
        y_label: "server RSS when idle (MiB)",
        series: vec![Series {
            label: format!("RSS{per}"),
            points: curve
                .points
                .iter()
                .map(|p| (p.live as f64, p.rss_mib))
                .collect(),
            dashed: false,
            color: 0,
        }],
        notes: curve.verdicts.iter().map(|v| v.line.clone()).collect(),
    };
    let path = dir.join("live-rss.svg");
    chart::draw(&chart, &path)?;
    Ok(vec![path])
}
