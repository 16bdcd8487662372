//! Resume cost: time from a Replay call with `resume_offset` near the end of a
//! 1,000,000-chunk recording to its first message, over gRPC on loopback. Seeking must not read
//! the recording from its start (it binary-searches chunk start offsets).
//!
//! Run: `cargo bench --bench resume`
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tapedeck::Config;
use tapedeck::id::ConversationId;
use tapedeck::pb::ReplayRequest;
use tapedeck::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use tapedeck::recorder::{Deck, Status};
use tokio::runtime::Runtime;

/// Chunks in the recording.
const CHUNKS: u64 = 1_000_000;
/// Each chunk's text: 8 bytes.
const TOKEN: &str = "token-8b";
/// Appends queued before waiting for the oldest commit, to build the recording quickly.
const IN_FLIGHT: usize = 8192;
/// How far before the end the replay resumes, in bytes.
const FROM_END_BYTES: u64 = 800;

fn resume_near_the_end(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.data_dir = dir.path().to_path_buf();
    let id = ConversationId::parse(b"a-million-chunks").unwrap();
    let store = tapedeck::server::open_store(&config).unwrap();
    let built = std::time::Instant::now();
    runtime.block_on(async {
        let recordings = Deck::new(
            store.clone(),
            tapedeck::recorder::LivePolicy {
                max_live: 1,
                ..Default::default()
            },
        );
        let mut writer = recordings.start(&id, None).await.unwrap();
        let mut in_flight = std::collections::VecDeque::new();
        for _ in 0..CHUNKS {
            in_flight.push_back(writer.append(TOKEN).await.unwrap());
            if in_flight.len() >= IN_FLIGHT {
                in_flight.pop_front().unwrap().await.unwrap().unwrap();
            }
        }
        for committed in in_flight {
            committed.await.unwrap().unwrap();
        }
        writer.finish(Status::Completed, None).await.unwrap();
    });
    eprintln!("built a {CHUNKS}-chunk recording in {:?}", built.elapsed());

    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = runtime.spawn(async move {
        tapedeck::server::run(listener, None, store, &config, async {
            let _ = stopped.await;
        })
        .await
    });
    let client = runtime
        .block_on(ResponseRecorderServiceClient::connect(format!(
            "http://{addr}"
        )))
        .unwrap();
    let total = CHUNKS * TOKEN.len() as u64;
    let offset = total - FROM_END_BYTES;

    let mut group = c.benchmark_group("resume");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("first_message_from_offset_near_end_of_1M_chunks", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let mut stream = client
                    .clone()
                    .replay(ReplayRequest {
                        conversation_id: id.original().to_vec(),
                        resume_offset: offset as i64,
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                let first = stream.message().await.unwrap().unwrap();
                assert_eq!(first.offset as u64, total);
                // Read to the end: a dropped stream is reset by the client, and tonic's client
                // gives up on a connection after 1024 such resets.
                while stream.message().await.unwrap().is_some() {}
            })
        })
    });
    group.finish();
    let _ = stop.send(());
    runtime.block_on(server).unwrap().unwrap();
}

criterion_group!(benches, resume_near_the_end);
criterion_main!(benches);
