//! Store throughput on a real redb file: durable appends with 1, 100 and 1,000 concurrent
//! producers, each awaiting the ack of every ~8-byte token (so an ack is after the commit, with
//! its fsync, that holds the token), and range reads of a finished recording.
//!
//! Before the criterion groups, `cargo bench --bench store` prints a plain report per producer
//! count: durable tokens/s, bytes written to disk per token (`/proc/self/io` write_bytes), the
//! commit pipeline's CPU time per token, and the ratio against one producer, whose every token
//! costs one commit.
//!
//! Every run starts from an empty file. Appending is slower into a file that has grown large:
//! before the journal, with 1,000 producers never finishing their recordings, the rate fell
//! from ~57,000 to ~37,000 tokens/s over 30 s (1.3 M tokens), while recordings that end and are
//! replaced keep the file small and the rate steady.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group};
use tapedeck::id::ConversationId;
use tapedeck::recorder::{Deck, Status, TapeWriter};
use tapedeck::store::{Store, StoreOptions};
use tempfile::TempDir;
use tokio::runtime::Runtime;

/// One token: 8 bytes of UTF-8.
const TOKEN: &str = "token42 ";
/// Concurrent producers, one live recording each.
const PRODUCERS: [usize; 3] = [1, 100, 1_000];
/// How long each report run appends for.
const REPORT_RUN: Duration = Duration::from_secs(4);
/// Chunks in the recording the read bench reads.
const READ_CHUNKS: u64 = 100_000;
/// Bytes asked for per `read_chunks` call, as a replay's catch-up does.
const READ_BATCH_BYTES: usize = 64 * 1024;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A fresh store, with the recorder's live recordings over it (no live limit).
fn open_store() -> (TempDir, Deck) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = Store::open(&dir.path().join("bench.redb"), StoreOptions::default())
        .expect("a fresh database");
    (
        dir,
        Deck::new(
            store,
            tapedeck::recorder::LivePolicy {
                max_live: usize::MAX,
                ..Default::default()
            },
        ),
    )
}

async fn start_producers(store: &Deck, count: usize) -> Vec<TapeWriter> {
    let ids: Vec<ConversationId> = (0..count)
        .map(|i| ConversationId::parse(format!("producer-{i}").as_bytes()).expect("a valid id"))
        .collect();
    futures::future::try_join_all(ids.iter().map(|id| store.start(id, None)))
        .await
        .expect("started recordings")
}

async fn finish_producers(writers: Vec<TapeWriter>) {
    futures::future::try_join_all(
        writers
            .into_iter()
            .map(|writer| writer.finish(Status::Completed, None)),
    )
    .await
    .expect("finished recordings");
}

/// Appends `TOKEN`s from every writer concurrently, each awaiting its ack before the next,
/// until `tokens_for(i)` are done by producer `i` or `deadline` passes; returns the writers and
/// the number of tokens acked.
async fn append_concurrently(
    writers: Vec<TapeWriter>,
    tokens_for: impl Fn(usize) -> u64,
    deadline: Option<Instant>,
) -> (Vec<TapeWriter>, u64) {
    let acked = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = writers
        .into_iter()
        .enumerate()
        .map(|(i, mut writer)| {
            let tokens = tokens_for(i);
            let acked = acked.clone();
            tokio::spawn(async move {
                for _ in 0..tokens {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        break;
                    }
                    let committed = writer.append(TOKEN).await.expect("append queued");
                    committed
                        .await
                        .expect("writer answered")
                        .expect("token committed");
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                writer
            })
        })
        .collect();
    let mut writers = Vec::with_capacity(tasks.len());
    for task in tasks {
        writers.push(task.await.expect("producer task"));
    }
    (writers, acked.load(Ordering::Relaxed))
}

/// Bytes this process has caused to be written to storage so far.
fn disk_write_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|n| n.trim().parse().ok())
}

/// CPU time used so far by the store's commit pipeline threads (from their `schedstat`).
fn writer_cpu() -> Option<Duration> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let comm = std::fs::read_to_string(path.join("comm")).ok()?;
        if comm.trim() == "tapedeck-writer" {
            let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(Duration::from_nanos(total))
}

/// Timed runs outside criterion, for the numbers criterion does not give.
fn report() {
    let rt = runtime();
    let mut baseline = None;
    println!(
        "store append report ({TOKEN:?} = {} bytes a token):",
        TOKEN.len()
    );
    for producers in PRODUCERS {
        let (_dir, store) = open_store();
        let writers = rt.block_on(start_producers(&store, producers));
        let before = disk_write_bytes();
        let cpu_before = writer_cpu();
        let started = Instant::now();
        let deadline = started + REPORT_RUN;
        let (writers, tokens) =
            rt.block_on(append_concurrently(writers, |_| u64::MAX, Some(deadline)));
        let elapsed = started.elapsed();
        let written = disk_write_bytes().zip(before).map(|(after, b)| after - b);
        let cpu = writer_cpu().zip(cpu_before).map(|(after, b)| after - b);
        let rate = tokens as f64 / elapsed.as_secs_f64();
        let baseline = *baseline.get_or_insert(rate);
        let per_token = |total: Option<f64>| {
            total.map_or("n/a".to_string(), |t| format!("{:.1}", t / tokens as f64))
        };
        println!(
            "  producers={producers:>5}  tokens={tokens:>8}  {rate:>9.0} durable tokens/s  \
             {:>5.1}x one-commit-per-token  {} disk bytes/token  {} writer CPU us/token",
            rate / baseline,
            per_token(written.map(|w| w as f64)),
            per_token(cpu.map(|c| c.as_secs_f64() * 1e6)),
        );
        rt.block_on(async {
            finish_producers(writers).await;
            store.store().clone().close().await;
        });
    }

    let (_dir, store) = open_store();
    let (key, generation) = rt.block_on(fill_recording(&store));
    let started = Instant::now();
    let mut chunks = 0;
    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(2) {
        chunks += rt.block_on(read_all(&store, key, generation));
        rounds += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "store read report: {rounds} full reads of {READ_CHUNKS} chunks: {:.0} chunks/s, {:.1} MB/s",
        chunks as f64 / secs,
        (chunks * TOKEN.len() as u64) as f64 / secs / 1e6
    );
    rt.block_on(store.store().clone().close());
}

/// A finished recording of `READ_CHUNKS` tokens; returns its key and generation.
async fn fill_recording(store: &Deck) -> (u128, u64) {
    let id = ConversationId::parse(b"read-bench").expect("a valid id");
    let mut writer = store.start(&id, None).await.expect("a started recording");
    let mut last = None;
    for _ in 0..READ_CHUNKS {
        last = Some(writer.append(TOKEN).await.expect("append queued"));
    }
    if let Some(last) = last {
        last.await.expect("writer answered").expect("committed");
    }
    let tape = writer.tape().clone();
    writer
        .finish(Status::Completed, None)
        .await
        .expect("finished");
    (tape.key(), tape.generation())
}

/// Reads the whole recording in `READ_BATCH_BYTES` ranges; returns the chunks read.
async fn read_all(store: &Deck, key: u128, generation: u64) -> u64 {
    let mut from = 0;
    loop {
        let chunks = store
            .store()
            .read_chunks(key, generation, from, READ_BATCH_BYTES)
            .await
            .expect("a range read");
        match chunks.last() {
            Some(last) => from = last.index + 1,
            None => return from,
        }
    }
}

fn append(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("store/append");
    // Every sample gets the same number of tokens, enough to keep every producer busy.
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(1));
    for producers in PRODUCERS {
        group.bench_function(BenchmarkId::new("producers", producers), |b| {
            b.iter_custom(|tokens| {
                // A fresh file per sample: samples measure the same thing, not a growing file.
                let (_dir, store) = open_store();
                let writers = rt.block_on(start_producers(&store, producers));
                let share = |i: usize| {
                    let (n, p) = (tokens, producers as u64);
                    n / p + u64::from((i as u64) < n % p)
                };
                let started = Instant::now();
                let (writers, _) = rt.block_on(append_concurrently(writers, share, None));
                let elapsed = started.elapsed();
                rt.block_on(async {
                    finish_producers(writers).await;
                    store.store().clone().close().await;
                });
                elapsed
            })
        });
    }
    group.finish();
}

fn read(c: &mut Criterion) {
    let rt = runtime();
    let (_dir, store) = open_store();
    let (key, generation) = rt.block_on(fill_recording(&store));
    let mut group = c.benchmark_group("store/read");
    group.throughput(Throughput::Elements(READ_CHUNKS));
    group.bench_function("read_chunks_64KiB", |b| {
        b.iter(|| rt.block_on(read_all(&store, key, generation)))
    });
    group.finish();
    rt.block_on(store.store().clone().close());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8));
    targets = append, read
}

fn main() {
    // Only under `cargo bench`: `cargo test --benches` runs each benchmark once, quickly.
    if std::env::args().any(|arg| arg == "--bench") {
        report();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
