//! Crash torture of the real binary: producers on both APIs and live readers run against it,
//! it is SIGKILLed at a random moment, restarted on the same data dir, and every recording is
//! checked: each acknowledged byte (and each byte a reader saw) is replayed, the replay is a
//! prefix of what was sent, an accepted cancel stays `cancelled`, and every replay ends
//! promptly. Recordings live at the kill come back detached: most of their producers resume
//! them after the restart, from what they know is committed (their last ack, what a reader
//! saw, or nothing), resending everything after it and finishing; those must replay exactly
//! what was meant, no byte lost and none twice. The others end `interrupted` once the grace
//! period ([`GRACE`]) runs out.
//!
//! The server keeps finished recordings for [`RETENTION`], so its sweeper collects old ones
//! between and across crashes; a recording may be missing only once that can have happened.
//!
//! `cargo test` runs [`CI_CYCLES`] cycles. `TAPEDECK_TORTURE_CYCLES=500` runs more, and
//! `TAPEDECK_TORTURE_SEED` replays a given run.
use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use tapedeck::pb::{
    CancelRecordRequest, CheckRecordingsRequest, RecordRequest, RecordStatus,
    StreamResponseTokenRequest,
};
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

/// Cycles run by `cargo test`.
const CI_CYCLES: u64 = 12;
/// Most producers in one cycle; each records one conversation after another until the kill.
const MAX_PRODUCERS: u64 = 12;
/// How long one replay may take to reach its end after a restart.
const REPLAY_DEADLINE: Duration = Duration::from_secs(5);
/// Older recordings re-checked after each restart, besides the previous cycle's.
const OLDER_SAMPLE: usize = 8;
/// Retention the server runs with, so that the sweeper collects while crashes happen and the
/// file stays small however many cycles run (redb's repair after a crash reads all of it).
const RETENTION: Duration = Duration::from_secs(40);
/// A recording is certainly still there this long after its cycle began.
const SURELY_KEPT: Duration = RETENTION.saturating_sub(Duration::from_secs(5));
/// How long a recording left live by a kill waits for its producer after the restart: the
/// resumes come well within it, and the replays of the others end soon after.
const GRACE: Duration = Duration::from_secs(2);
/// The share of recordings live at a kill whose producers resume them, in percent.
const RESUME_PERCENT: u64 = 70;
/// The server's flags: [`RETENTION`], a sweep every second, [`GRACE`], and a checkpoint every
/// 256 KiB of write-ahead log, so that kills land before, during and after checkpoints.
const SERVER_ARGS: &[&str] = &[
    "--retention",
    "40s",
    "--gc-interval",
    "1s",
    "--producer-grace",
    "2s",
    "--checkpoint-size",
    "256KiB",
];

/// xorshift64*: small, seedable, good enough to pick kill moments and token sizes.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    Current,
    Legacy,
}

/// What the test knows about one recording when the server dies.
#[derive(Debug)]
struct Tracked {
    id: Vec<u8>,
    api: Api,
    /// When its cycle began: it may be collected once [`SURELY_KEPT`] has passed since.
    born: Instant,
    /// Everything handed to the request stream, in order.
    sent: String,
    /// The same, token by token: a resume resends the tokens after its offset as they were.
    tokens: Vec<String>,
    /// Its producer resumed it after a restart and completed it.
    resumed: bool,
    /// Bytes the server acknowledged as committed.
    acked: u64,
    /// The longest text a live replay of it received before the kill.
    seen: String,
    complete_sent: bool,
    /// The server said it is completed (SUCCESS, or the legacy stream closed after `complete`).
    completed: bool,
    /// A cancel of it was accepted.
    cancelled: bool,
}

impl Tracked {
    fn new(id: Vec<u8>, api: Api, born: Instant) -> Self {
        Self {
            id,
            api,
            born,
            sent: String::new(),
            tokens: Vec::new(),
            resumed: false,
            acked: 0,
            seen: String::new(),
            complete_sent: false,
            completed: false,
            cancelled: false,
        }
    }
}

impl Tracked {
    fn push(&mut self, token: &str) {
        self.sent.push_str(token);
        self.tokens.push(token.to_string());
    }

    /// What a producer resuming from `offset` resends: the rest of the token the offset falls
    /// in, then every later token, as first sent.
    fn resend_from(&self, offset: usize) -> Vec<String> {
        let mut pieces = Vec::new();
        let mut start = 0;
        for token in &self.tokens {
            let end = start + token.len();
            if end > offset {
                pieces.push(token[offset.max(start) - start..].to_string());
            }
            start = end;
        }
        pieces
    }

    /// Whether it may still be live, for all the test knows.
    fn maybe_live(&self) -> bool {
        !self.completed && !self.cancelled
    }
}

type Ledger = Arc<Mutex<Vec<Tracked>>>;

/// Counts acknowledgements, so the kill can wait for a random number of them.
#[derive(Default)]
struct Progress {
    events: AtomicU64,
    changed: Notify,
}

impl Progress {
    fn bump(&self) {
        self.events.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Waits until `target` events happened (or `limit` passed: the kill then comes anyway).
    async fn reach(&self, target: u64, limit: Duration) {
        let _ = tokio::time::timeout(limit, async {
            loop {
                let notified = self.changed.notified();
                if self.events.load(Ordering::SeqCst) >= target {
                    return;
                }
                notified.await;
            }
        })
        .await;
    }
}

fn token_text(rng: &mut Rng, n: u64) -> String {
    match rng.below(10) {
        0 => format!("«{n}»é"),
        1 => "日本語🎉".repeat(1 + rng.below(30) as usize),
        2 => "x".repeat(1 + rng.below(8000) as usize),
        _ => format!("t{n} "),
    }
}

/// Changes entry `index`; a no-op once the cycle has taken the ledger away.
fn update(ledger: &Ledger, index: usize, change: impl FnOnce(&mut Tracked)) {
    if let Some(tracked) = ledger.lock().unwrap().get_mut(index) {
        change(tracked);
    }
}

fn track(ledger: &Ledger, tracked: Tracked) -> usize {
    let mut ledger = ledger.lock().unwrap();
    ledger.push(tracked);
    ledger.len() - 1
}

/// Records on the current API: one conversation after another, each completed after a random
/// number of tokens. SUCCESS acknowledges the whole recording.
async fn current_producer(
    client: RecorderClient,
    born: Instant,
    name: String,
    mut rng: Rng,
    ledger: Ledger,
    progress: Arc<Progress>,
) {
    for round in 0.. {
        let id = format!("{name}-r{round}").into_bytes();
        let index = track(&ledger, Tracked::new(id.clone(), Api::Current, born));
        let (tx, rx) = mpsc::channel(16);
        let mut call = client.clone();
        let answer = tokio::spawn(async move { call.record(ReceiverStream::new(rx)).await });
        let first = RecordRequest {
            conversation_id: id,
            ..Default::default()
        };
        if tx.send(first).await.is_err() {
            return;
        }
        let tokens = 1 + rng.below(60);
        for n in 0..tokens {
            let text = token_text(&mut rng, n);
            update(&ledger, index, |t| t.push(&text));
            let message = RecordRequest {
                content: text,
                ..Default::default()
            };
            if tx.send(message).await.is_err() {
                break;
            }
        }
        update(&ledger, index, |t| t.complete_sent = true);
        let complete = RecordRequest {
            complete: true,
            ..Default::default()
        };
        let _ = tx.send(complete).await;
        match answer.await.unwrap() {
            Ok(response) if response.get_ref().status == RecordStatus::Success as i32 => {
                update(&ledger, index, |t| {
                    t.completed = true;
                    t.acked = t.sent.len() as u64;
                });
                progress.bump();
            }
            Ok(response) if response.get_ref().status == RecordStatus::Cancelled as i32 => {}
            // Anything else means the server went away.
            _ => return,
        }
    }
}

/// Records on the legacy API, pipelining tokens; each ack carries the committed length.
async fn legacy_producer(
    client: ResumerClient,
    born: Instant,
    name: String,
    mut rng: Rng,
    ledger: Ledger,
    progress: Arc<Progress>,
) {
    for round in 0.. {
        let id = format!("{name}-r{round}").into_bytes();
        let index = track(&ledger, Tracked::new(id.clone(), Api::Legacy, born));
        let tokens = 1 + rng.below(60);
        let mut requests = Vec::new();
        for n in 0..tokens {
            let text = token_text(&mut rng, n);
            requests.push(StreamResponseTokenRequest {
                conversation_id: if n == 0 { id.clone() } else { Vec::new() },
                token: text,
                complete: n + 1 == tokens,
                ..Default::default()
            });
        }
        let Ok(LegacyProducer { tx, mut acks }) = LegacyProducer::try_open(&client, None, 8).await
        else {
            return;
        };
        let sender = {
            let ledger = ledger.clone();
            tokio::spawn(async move {
                for request in requests {
                    let complete = request.complete;
                    let text = request.token.clone();
                    update(&ledger, index, |t| t.push(&text));
                    if tx.send(request).await.is_err() {
                        return;
                    }
                    if complete {
                        update(&ledger, index, |t| t.complete_sent = true);
                    }
                }
                // Keeps the request stream open until the server closes the call.
                tx.closed().await;
            })
        };
        let mut cancelled = false;
        let ended = loop {
            match acks.message().await {
                Ok(Some(ack)) if ack.cancel_requested => cancelled = true,
                Ok(Some(ack)) if ack.success => {
                    update(&ledger, index, |t| {
                        t.acked = t.acked.max(ack.current_offset as u64)
                    });
                    progress.bump();
                }
                // Refused: a token that arrived after a cancel. Not acknowledged.
                Ok(Some(_)) => {}
                Ok(None) => break true,
                Err(_) => break false,
            }
        };
        sender.abort();
        if !ended {
            return;
        }
        if !cancelled {
            update(&ledger, index, |t| {
                assert!(t.complete_sent, "stream closed before `complete`");
                t.completed = true;
            });
        }
    }
}

/// Follows recordings live as they start, keeping what it saw.
async fn reader(client: RecorderClient, ledger: Ledger, index: usize) {
    let id = ledger.lock().unwrap()[index].id.clone();
    let Ok(mut stream) = replay_when_live(&client, &id, 0).await else {
        return;
    };
    while let Ok(Some(message)) = stream.message().await {
        update(&ledger, index, |t| t.seen.push_str(&message.content));
    }
}

/// Cancels a random live recording now and then; remembers the accepted ones.
async fn canceller(client: RecorderClient, mut rng: Rng, ledger: Ledger, progress: Arc<Progress>) {
    loop {
        let target = progress.events.load(Ordering::SeqCst) + 5 + rng.below(40);
        progress.reach(target, Duration::from_secs(5)).await;
        let candidate = {
            let ledger = ledger.lock().unwrap();
            let open: Vec<usize> = (0..ledger.len())
                .filter(|&i| !ledger[i].completed && !ledger[i].cancelled)
                .collect();
            if open.is_empty() {
                continue;
            }
            open[rng.below(open.len() as u64) as usize]
        };
        let id = ledger.lock().unwrap()[candidate].id.clone();
        match client
            .clone()
            .cancel(CancelRecordRequest {
                conversation_id: id,
            })
            .await
        {
            Ok(answer) if answer.get_ref().accepted => {
                update(&ledger, candidate, |t| t.cancelled = true);
            }
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// Totals over the whole run.
#[derive(Default, Debug)]
struct Totals {
    recordings: u64,
    /// Recordings with acknowledged bytes whose replay was checked against them.
    checked: u64,
    acked_bytes: u64,
    seen_bytes: u64,
    replayed_bytes: u64,
    lost_bytes: u64,
    hung_replays: u64,
    not_started: u64,
    collected: u64,
    interrupted: u64,
    completed: u64,
    cancelled: u64,
    rechecks: u64,
    /// Recordings live at a kill that their producers resumed and completed after the restart.
    resumed: u64,
    /// Resumes refused because the recording had ended meanwhile (its answer lost in the kill).
    resumes_refused: u64,
    /// Bytes a resumed recording replayed beyond what its producer meant (resent twice).
    duplicated_bytes: u64,
}

/// Replays one recording after a restart and checks it against what the test knows.
async fn verify(client: &RecorderClient, tracked: &Tracked, totals: &mut Totals) {
    let opened = tokio::time::timeout(REPLAY_DEADLINE, replay_from(client, &tracked.id, 0)).await;
    let stream = match opened {
        Err(_) => {
            totals.hung_replays += 1;
            return;
        }
        Ok(Err(status)) => panic!("replay of {:?} failed: {status}", tracked.id),
        Ok(Ok(stream)) => stream,
    };
    let read = tokio::time::timeout(REPLAY_DEADLINE, async {
        let mut stream = stream;
        let mut text = String::new();
        while let Some(message) = stream.message().await? {
            text.push_str(&message.content);
        }
        let trailers = stream.trailers().await?.unwrap_or_default();
        let trailer = |name| {
            trailers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        };
        let ended = trailer("tapedeck-status");
        Ok::<_, tonic::Status>((text, ended, trailer("tapedeck-reason")))
    })
    .await;
    let (text, status, absent) = match read {
        Err(_) => {
            totals.hung_replays += 1;
            return;
        }
        Ok(result) => result.unwrap_or_else(|e| panic!("replay of {:?}: {e}", tracked.id)),
    };
    // Nothing there: an empty stream whose trailer says why.
    if absent.is_some() {
        assert!(text.is_empty(), "{absent:?} with content");
        if tracked.born.elapsed() > SURELY_KEPT {
            totals.collected += 1;
            return;
        }
        // Only a recording whose start never committed may be missing.
        assert!(
            tracked.acked == 0 && tracked.seen.is_empty() && !tracked.cancelled,
            "recording lost: {tracked:?}"
        );
        totals.not_started += 1;
        return;
    }
    let id = String::from_utf8_lossy(&tracked.id);
    if status.as_deref() == Some("superseded") && tracked.born.elapsed() > SURELY_KEPT {
        // Collected while it was being replayed.
        totals.collected += 1;
        return;
    }
    totals.replayed_bytes += text.len() as u64;
    totals.checked += u64::from(tracked.acked > 0);
    totals.lost_bytes += tracked.acked.saturating_sub(text.len() as u64);
    if tracked.resumed {
        totals.duplicated_bytes += (text.len() as u64).saturating_sub(tracked.sent.len() as u64);
    }
    assert!(
        text.len() as u64 >= tracked.acked,
        "{id}: acked {} bytes, replayed {}",
        tracked.acked,
        text.len()
    );
    assert!(
        text.starts_with(&tracked.seen),
        "{id}: a reader saw {} bytes that are not replayed",
        tracked.seen.len()
    );
    assert!(
        tracked.sent.starts_with(&text),
        "{id}: replay is not a prefix of what was sent ({} of {} bytes)",
        text.len(),
        tracked.sent.len()
    );
    let status = status.unwrap_or_default();
    if tracked.resumed {
        assert_eq!(status, "completed", "{id}: resumed");
        assert_eq!(
            text, tracked.sent,
            "{id}: resumed, but not exactly what was meant"
        );
        totals.completed += 1;
    } else if tracked.cancelled {
        assert_eq!(status, "cancelled", "{id}: {tracked:?}");
        totals.cancelled += 1;
    } else if tracked.completed {
        assert_eq!(status, "completed", "{id}");
        assert_eq!(text, tracked.sent, "{id}: completed but not whole");
        totals.completed += 1;
    } else if tracked.complete_sent && status == "completed" {
        // Completed just before the kill; the answer was lost with the process.
        assert_eq!(text, tracked.sent, "{id}: completed but not whole");
        totals.completed += 1;
    } else if status == "cancelled" {
        // A cancel committed just before the kill, its answer lost.
        totals.cancelled += 1;
    } else {
        assert_eq!(status, "interrupted", "{id}: was live at the kill");
        totals.interrupted += 1;
    }
}

async fn assert_none_live(client: &RecorderClient, ledger: &[Tracked]) {
    for ids in ledger.chunks(1000) {
        let live = client
            .clone()
            .check_recordings(CheckRecordingsRequest {
                conversation_ids: ids.iter().map(|t| t.id.clone()).collect(),
            })
            .await
            .unwrap()
            .into_inner()
            .conversation_ids;
        assert!(live.is_empty(), "still live after restart: {live:?}");
    }
}

/// How a resume after a restart went.
enum Resumed {
    /// Completed: the recording now holds everything sent, `extra` included.
    Completed { extra: Vec<String> },
    /// Refused: the recording had ended before the kill, its answer lost.
    AlreadyEnded,
}

/// Resumes `tracked` from `offset` (at most what is committed) on its own API, resending the
/// tokens after `offset` and a few more, then completing it.
async fn resume(server: &BinaryServer, tracked: &Tracked, offset: u64, rng: &mut Rng) -> Resumed {
    let mut pieces = tracked.resend_from(offset as usize);
    let extra: Vec<String> = (0..1 + rng.below(4))
        .map(|n| token_text(rng, 1000 + n))
        .collect();
    pieces.extend(extra.iter().cloned());
    let refused = |status: &tonic::Status| {
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
        assert!(status.message().contains("already ended"), "{status:?}");
        Resumed::AlreadyEnded
    };
    match tracked.api {
        Api::Current => {
            let (tx, rx) = mpsc::channel(pieces.len() + 2);
            tx.try_send(RecordRequest {
                conversation_id: tracked.id.clone(),
                resume_from_offset: Some(offset as i64),
                ..Default::default()
            })
            .unwrap();
            for piece in pieces {
                let content = RecordRequest {
                    content: piece,
                    ..Default::default()
                };
                tx.try_send(content).unwrap();
            }
            let complete = RecordRequest {
                complete: true,
                ..Default::default()
            };
            tx.try_send(complete).unwrap();
            drop(tx);
            let answer = server
                .recorder()
                .await
                .record(ReceiverStream::new(rx))
                .await;
            match answer {
                Ok(answer) => {
                    let answer = answer.into_inner();
                    assert_eq!(answer.status, RecordStatus::Success as i32, "{answer:?}");
                    Resumed::Completed { extra }
                }
                Err(status) => refused(&status),
            }
        }
        Api::Legacy => {
            let count = pieces.len();
            let (tx, rx) = mpsc::channel(count);
            for (i, piece) in pieces.into_iter().enumerate() {
                let first = i == 0;
                tx.try_send(StreamResponseTokenRequest {
                    conversation_id: if first {
                        tracked.id.clone()
                    } else {
                        Vec::new()
                    },
                    token: piece,
                    complete: i + 1 == count,
                    resume_from_offset: first.then_some(offset as i64),
                    ..Default::default()
                })
                .unwrap();
            }
            let mut acks = server
                .resumer()
                .await
                .stream_response_tokens(ReceiverStream::new(rx))
                .await
                .unwrap()
                .into_inner();
            let mut last = offset as i64;
            for _ in 0..count {
                match acks.message().await {
                    Ok(Some(ack)) => {
                        assert!(ack.success, "{ack:?}");
                        assert!(ack.current_offset >= last, "acks go backwards: {ack:?}");
                        last = ack.current_offset;
                    }
                    Ok(None) => panic!("the resumed stream closed early"),
                    Err(status) => return refused(&status),
                }
            }
            assert!(matches!(acks.message().await, Ok(None)));
            drop(tx);
            Resumed::Completed { extra }
        }
    }
}

/// Right after a restart: the producers of [`RESUME_PERCENT`] of the recordings that may have
/// been live at the kill resume them, all at once, from what they know is committed.
async fn resume_some(
    server: &BinaryServer,
    ledger: &mut [Tracked],
    rng: &mut Rng,
    totals: &mut Totals,
) {
    let mut resumes = Vec::new();
    for (index, tracked) in ledger.iter().enumerate() {
        if !tracked.maybe_live() || !rng.chance(RESUME_PERCENT) {
            continue;
        }
        // What the producer knows is committed: its last ack, what a reader saw, or nothing.
        let offset = match rng.below(3) {
            0 => tracked.acked,
            1 => tracked.seen.len() as u64,
            _ => 0,
        };
        let mut rng = Rng(rng.next() | 1);
        resumes.push(async move { (index, resume(server, tracked, offset, &mut rng).await) });
    }
    let outcomes = tokio::time::timeout(GRACE * 10, futures::future::join_all(resumes))
        .await
        .expect("resumes did not finish in time");
    for (index, outcome) in outcomes {
        let tracked = &mut ledger[index];
        match outcome {
            Resumed::Completed { extra } => {
                for token in &extra {
                    tracked.push(token);
                }
                tracked.resumed = true;
                tracked.completed = true;
                tracked.acked = tracked.sent.len() as u64;
                totals.resumed += 1;
            }
            Resumed::AlreadyEnded => totals.resumes_refused += 1,
        }
    }
}

/// One cycle: load, kill at a random moment, and the ledger of what happened.
async fn run_cycle(server: BinaryServer, cycle: u64, rng: &mut Rng) -> Vec<Tracked> {
    let born = Instant::now();
    let ledger: Ledger = Arc::default();
    let progress = Arc::new(Progress::default());
    let current = server.recorder().await;
    let legacy = server.resumer().await;
    let mut tasks = tokio::task::JoinSet::new();
    let producers = 2 + rng.below(MAX_PRODUCERS - 1);
    for p in 0..producers {
        let name = format!("c{cycle}-p{p}");
        let seed = Rng(rng.next() | 1);
        if rng.chance(50) {
            let client = current.clone();
            tasks.spawn(current_producer(
                client,
                born,
                name,
                seed,
                ledger.clone(),
                progress.clone(),
            ));
        } else {
            let client = legacy.clone();
            tasks.spawn(legacy_producer(
                client,
                born,
                name,
                seed,
                ledger.clone(),
                progress.clone(),
            ));
        }
    }
    let canceller = rng.chance(40).then(|| {
        let seed = Rng(rng.next() | 1);
        tokio::spawn(canceller(
            current.clone(),
            seed,
            ledger.clone(),
            progress.clone(),
        ))
    });
    // Readers follow recordings as the producers start them.
    let readers = {
        let (ledger, client, mut rng) = (ledger.clone(), current.clone(), rng.clone());
        let progress = progress.clone();
        tokio::spawn(async move {
            let mut followed = 0;
            let mut readers = tokio::task::JoinSet::new();
            loop {
                let known = ledger.lock().unwrap().len();
                for index in followed..known {
                    if rng.chance(50) {
                        readers.spawn(reader(client.clone(), ledger.clone(), index));
                    }
                }
                followed = known;
                let target = progress.events.load(Ordering::SeqCst) + 1;
                tokio::select! {
                    () = progress.reach(target, Duration::from_millis(50)) => {}
                    Some(_) = readers.join_next() => {}
                }
            }
        })
    };
    // The kill comes after a random number of acknowledgements: sometimes at once.
    let target = match rng.below(5) {
        0 => rng.below(5),
        1 => rng.below(50),
        2 | 3 => rng.below(500),
        _ => rng.below(3000),
    };
    progress.reach(target, Duration::from_secs(3)).await;
    server.kill();
    readers.abort();
    if let Some(canceller) = canceller {
        canceller.abort();
        let _ = canceller.await;
    }
    let stopped = tokio::time::timeout(Duration::from_secs(30), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    assert!(
        stopped.is_ok(),
        "clients did not notice the kill within 30s"
    );
    let _ = readers.await;
    // Readers still being torn down can no longer write into the ledger once it is taken.
    std::mem::take(&mut *ledger.lock().unwrap())
}

fn cycles() -> u64 {
    std::env::var("TAPEDECK_TORTURE_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CYCLES)
}

fn seed() -> u64 {
    std::env::var("TAPEDECK_TORTURE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
        | 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_bytes_survive_random_sigkills() {
    let (cycles, seed) = (cycles(), seed());
    println!("crash torture: {cycles} cycles, TAPEDECK_TORTURE_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut totals = Totals::default();
    let mut history: Vec<Tracked> = Vec::new();
    let mut server = BinaryServer::spawn(dir.path(), SERVER_ARGS);
    for cycle in 0..cycles {
        let mut ledger = run_cycle(server, cycle, &mut rng).await;
        server = BinaryServer::spawn(dir.path(), SERVER_ARGS);
        resume_some(&server, &mut ledger, &mut rng, &mut totals).await;
        let client = server.recorder().await;
        for tracked in &ledger {
            totals.recordings += 1;
            totals.acked_bytes += tracked.acked;
            totals.seen_bytes += tracked.seen.len() as u64;
            verify(&client, tracked, &mut totals).await;
        }
        assert_none_live(&client, &ledger).await;
        // Earlier recordings are untouched by later crashes.
        let mut again = Totals::default();
        for _ in 0..OLDER_SAMPLE.min(history.len()) {
            let older = &history[rng.below(history.len() as u64) as usize];
            verify(&client, older, &mut again).await;
            totals.rechecks += 1;
        }
        totals.lost_bytes += again.lost_bytes;
        totals.hung_replays += again.hung_replays;
        totals.collected += again.collected;
        assert_eq!(totals.hung_replays, 0, "replays hung: {totals:?}");
        history.extend(ledger);
        if cycles > CI_CYCLES && (cycle + 1) % 50 == 0 {
            println!(
                "  {} cycles in {:.0?}: {totals:?}",
                cycle + 1,
                started.elapsed()
            );
        }
    }
    // A last full pass over everything ever recorded.
    let client = server.recorder().await;
    let mut last = Totals::default();
    for tracked in &history {
        verify(&client, tracked, &mut last).await;
    }
    assert_none_live(&client, &history).await;
    println!(
        "crash torture done in {:.1?}: {cycles} SIGKILL cycles, {} recordings ({} current API, \
         {} legacy), {} acknowledged bytes checked, {} bytes seen by live readers checked, {} \
         bytes replayed, {} bytes lost, {} replays hung; resumed after a restart: {} (with {} \
         bytes duplicated; {} resumes refused as already ended); after restart {} completed, \
         {} interrupted, {} cancelled, {} never started; {} older recordings re-checked ({} \
         collected by then); final pass over all: {} lost, {} hung, {} collected",
        started.elapsed(),
        totals.recordings,
        history.iter().filter(|t| t.api == Api::Current).count(),
        history.iter().filter(|t| t.api == Api::Legacy).count(),
        totals.acked_bytes,
        totals.seen_bytes,
        totals.replayed_bytes,
        totals.lost_bytes,
        totals.hung_replays,
        totals.resumed,
        totals.duplicated_bytes,
        totals.resumes_refused,
        totals.completed,
        totals.interrupted,
        totals.cancelled,
        totals.not_started,
        totals.rechecks,
        totals.collected,
        last.lost_bytes,
        last.hung_replays,
        last.collected,
    );
    assert_eq!(totals.lost_bytes + last.lost_bytes, 0);
    assert_eq!(totals.duplicated_bytes, 0);
    assert_eq!(totals.hung_replays + last.hung_replays, 0);
    assert!(
        totals.acked_bytes > 0,
        "nothing was acknowledged: {totals:?}"
    );
    // At least one recording with acknowledged bytes checked after each restart.
    assert!(
        totals.checked >= cycles,
        "{} acknowledged recordings checked over {cycles} restarts: {totals:?}",
        totals.checked
    );
    assert!(server.terminate().await.success());
}
