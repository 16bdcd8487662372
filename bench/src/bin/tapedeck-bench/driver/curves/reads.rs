//! Timed reads of a server's completed recordings, one call at a time from one client:
//! `Recordings.Get` and `Replay` (to its first message) of random ones, and `Recordings.List`
//! pages, the first or one found halfway through.
use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use tapedeck::pb::ReplayRequest;
use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tapedeck::pb::tapedeck::recordings_client::RecordingsClient;
use tapedeck::pb::tapedeck::{GetRecordingRequest, ListRecordingsRequest};
use tonic::transport::{Channel, Endpoint};

use crate::driver::crash;
use crate::report;

/// Timed `Get`s and `Replay`s at each size.
const POINT_SAMPLES: usize = 1_000;
/// Timed `List`s of each page at each size.
const PAGE_SAMPLES: usize = 500;
/// Untimed calls of each kind before the timed ones, so the first size is not charged for a
/// fresh connection and cold caches.
const WARMUP: usize = 100;
/// Rows of a timed page: the API's default.
const PAGE_SIZE: u32 = 100;
/// Rows of the pages walked to find the middle one.
const WALK_PAGE_SIZE: u32 = 1_000;

/// One client of a server that holds `count` completed recordings named `prefix-N`.
pub(super) struct Reads {
    recordings: RecordingsClient<Channel>,
    recorder: ResponseRecorderServiceClient<Channel>,
    prefix: &'static str,
    count: usize,
}

impl Reads {
    /// Connects to the server at `addr`.
    ///
    /// Fails when it does not accept the connection.
    pub(super) async fn connect(
        addr: SocketAddr,
        prefix: &'static str,
        count: usize,
    ) -> Result<Reads> {
        let channel = Endpoint::from_shared(format!("http://{addr}"))?
            .tcp_nodelay(true)
            .connect()
            .await
            .with_context(|| format!("connecting to tapedeck at {addr}"))?;
        Ok(Reads {
            recordings: RecordingsClient::new(channel.clone()),
            recorder: ResponseRecorderServiceClient::new(channel),
            prefix,
            count,
        })
    }

    /// `Get` of random recordings, one at a time, in µs.
    ///
    /// Fails when a call does.
    pub(super) async fn get(&self) -> Result<Histogram<u64>> {
        let mut client = self.recordings.clone();
        let mut pick = Pick::new(self.count, 1);
        let mut latency = report::histogram();
        for i in 0..WARMUP + POINT_SAMPLES {
            let conversation_id = crash::name(self.prefix, pick.next()).into_bytes();
            let started = Instant::now();
            client
                .get(GetRecordingRequest { conversation_id })
                .await
                .context("Get")?;
            if i >= WARMUP {
                latency.saturating_record(started.elapsed().as_micros() as u64);
            }
        }
        Ok(latency)
    }

    /// The token of the page that starts halfway through the recordings, found by walking
    /// pages from the first.
    pub(super) async fn middle_token(&self) -> Result<String> {
        let mut client = self.recordings.clone();
        let (mut seen, mut token) = (0, String::new());
        while seen < self.count / 2 {
            let page = client
                .list(ListRecordingsRequest {
                    page_size: WALK_PAGE_SIZE.min((self.count / 2 - seen) as u32),
                    page_token: token.clone(),
                    ..Default::default()
                })
                .await
                .context("List")?
                .into_inner();
            seen += page.recordings.len();
            token = page.next_page_token;
            if token.is_empty() {
                bail!("List ended after {seen} of {} recordings", self.count);
            }
        }
        Ok(token)
    }

    /// `List` of the page at `token`, again and again, in µs.
    pub(super) async fn list(&self, token: String) -> Result<Histogram<u64>> {
        let mut client = self.recordings.clone();
        let mut latency = report::histogram();
        for i in 0..WARMUP + PAGE_SAMPLES {
            let started = Instant::now();
            let page = client
                .list(ListRecordingsRequest {
                    page_size: PAGE_SIZE,
                    page_token: token.clone(),
                    ..Default::default()
                })
                .await
                .context("List")?
                .into_inner();
            if i >= WARMUP {
                latency.saturating_record(started.elapsed().as_micros() as u64);
            }
            if page.recordings.is_empty() {
                bail!("List gave an empty page");
            }
        }
        Ok(latency)
    }

    /// `Replay` of random recordings until their first message, one at a time, in µs.
    pub(super) async fn first_byte(&self) -> Result<Histogram<u64>> {
        let mut client = self.recorder.clone();
        let mut pick = Pick::new(self.count, 2);
        let mut latency = report::histogram();
        for i in 0..WARMUP + POINT_SAMPLES {
            let conversation_id = crash::name(self.prefix, pick.next()).into_bytes();
            let started = Instant::now();
            let mut stream = client
                .replay(ReplayRequest {
                    conversation_id,
                    ..Default::default()
                })
                .await
                .context("Replay")?
                .into_inner();
            if stream.message().await?.is_none() {
                bail!("Replay of a stored recording ended without a message");
            }
            if i >= WARMUP {
                latency.saturating_record(started.elapsed().as_micros() as u64);
            }
        }
        Ok(latency)
    }
}

/// Random indices below a bound (SplitMix64): the same sequence for the same seed, so every
/// size is sampled the same way.
struct Pick {
    state: u64,
    bound: u64,
}

impl Pick {
    fn new(bound: usize, seed: u64) -> Pick {
        Pick {
            state: seed,
            bound: bound.max(1) as u64,
        }
    }

    fn next(&mut self) -> usize {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % self.bound) as usize
    }
}
