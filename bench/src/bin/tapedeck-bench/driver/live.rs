//! The live scenarios: producers record one recording after another (open loop at a fixed
//! rate, or closed loop), subscribers follow each from its start; acks, delivery latency, ack
//! latency, disk writes, CPU and memory are measured over the phase.
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use tokio::task::JoinSet;

use super::{
    Clock, Counters, Cpu, DRAIN_LIMIT, SUBSCRIBER_LIMIT, latency_of, progress_bar, record_all,
    run_tag,
};
use crate::procfs;
use crate::report::Outcome;
use crate::targets::{Producer, Subscriber, Target};
use crate::workload::{LiveWorkload, decode_token, encode_token};

/// Runs a live workload against `target`; `label` is `scenario/target` for progress output.
pub(crate) async fn run_live<T: Target>(
    target: Arc<T>,
    workload: &LiveWorkload,
    scenario: &str,
    target_name: &str,
) -> Outcome {
    let pid = target.data_pid();
    let written_before = procfs::write_bytes(pid);
    let cpu_before = Cpu::now(pid);
    let counters = Arc::new(Counters::default());
    let clock = Clock(Instant::now());
    let start = Instant::now();
    let deadline = start + workload.duration;
    let tag = run_tag();

    let bar = progress_bar(
        &format!("{scenario}/{target_name}"),
        workload.duration.as_secs(),
    );
    let ticker = {
        let (bar, counters) = (bar.clone(), counters.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let elapsed = start.elapsed().as_secs_f64();
                bar.set_position(elapsed as u64);
                let acked = counters.acked.load(Ordering::Relaxed);
                bar.set_message(format!(
                    "sent {} acked {} ({:.0}/s) errors {}{}",
                    counters.sent.load(Ordering::Relaxed),
                    acked,
                    acked as f64 / elapsed.max(0.001),
                    counters.errors.load(Ordering::Relaxed),
                    if Instant::now() > deadline {
                        " draining"
                    } else {
                        ""
                    }
                ));
            }
        })
    };

    let mut producers = JoinSet::new();
    for id in 0..workload.producers {
        producers.spawn(produce(
            target.clone(),
            id,
            workload.clone(),
            clock,
            deadline,
            counters.clone(),
            tag.clone(),
        ));
    }
    let drained =
        tokio::time::timeout_at((deadline + DRAIN_LIMIT).into(), collect(&mut producers)).await;
    if drained.is_err() {
        producers.abort_all();
        counters.error(&anyhow!(
            "producers still running {DRAIN_LIMIT:?} after the deadline; abandoned"
        ));
    }
    let elapsed = start.elapsed();
    let cpu = Cpu::now(pid).since(&cpu_before);
    ticker.abort();
    bar.finish_and_clear();

    let acked = counters.acked.load(Ordering::Relaxed);
    let written = procfs::write_bytes(pid)
        .zip(written_before)
        .map(|(after, before)| after.saturating_sub(before));
    let memory = pid.and_then(|pid| procfs::memory(Some(pid)));
    let first_error = counters.first_error();
    Outcome {
        scenario: scenario.into(),
        target: target_name.into(),
        durable_acks: target.durable(),
        sent_tokens: counters.sent.load(Ordering::Relaxed),
        acked_tokens: acked,
        elapsed_s: elapsed.as_secs_f64(),
        acked_tokens_per_s: acked as f64 / elapsed.as_secs_f64(),
        latency: latency_of(&counters.latency.delivery),
        ack_latency: latency_of(&counters.latency.ack),
        completion_latency: latency_of(&counters.latency.completion),
        received_tokens: counters.received.load(Ordering::Relaxed),
        expected_received: counters.expected.load(Ordering::Relaxed),
        sequence_errors: counters.sequence_errors.load(Ordering::Relaxed),
        load_s: None,
        replay_mb_per_s: None,
        replay_bytes: None,
        replay_server_cores: None,
        replay_bench_cores: None,
        disk_bytes_per_token: written
            .filter(|_| acked > 0)
            .map(|w| w as f64 / acked as f64),
        server_rss_mib: memory.map(|m| m.rss_kib as f64 / 1024.0),
        server_peak_rss_mib: memory.map(|m| m.peak_kib as f64 / 1024.0),
        server_cpu_us_per_token: cpu.server_us_per(acked),
        bench_cpu_us_per_token: cpu.bench_us_per(acked),
        other_processes_cores: cpu.others_cores(elapsed.as_secs_f64()),
        errors: counters.errors.load(Ordering::Relaxed),
        first_error,
    }
}

async fn collect(producers: &mut JoinSet<()>) {
    while producers.join_next().await.is_some() {}
}

/// One producer: records one recording after another until the deadline.
async fn produce<T: Target>(
    target: Arc<T>,
    id: usize,
    workload: LiveWorkload,
    clock: Clock,
    deadline: Instant,
    counters: Arc<Counters>,
    tag: String,
) {
    if let Some(rate) = workload.rate {
        // Spread the producers' ticks over one interval instead of all firing together.
        let phase = (id as f64 * 0.618_034).fract() / rate;
        tokio::time::sleep(Duration::from_secs_f64(phase)).await;
    }
    let mut n = 0;
    while Instant::now() < deadline {
        let name = format!("{tag}-p{id}-r{n}");
        n += 1;
        let recorded = record_one(&*target, id, &name, &workload, clock, deadline, &counters);
        if let Err(err) = recorded.await {
            counters.error(&err);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Records one recording with its subscribers attached from the start.
async fn record_one<T: Target>(
    target: &T,
    id: usize,
    name: &str,
    workload: &LiveWorkload,
    clock: Clock,
    deadline: Instant,
    counters: &Arc<Counters>,
) -> Result<()> {
    let mut acks = Vec::new();
    let mut producer = target.record(id, name).await?;
    let mut followers = JoinSet::new();
    for s in 0..workload.subscribers {
        let subscriber = target
            .subscribe(id + s, name)
            .await
            .context("subscribing")?;
        followers.spawn(follow(
            subscriber,
            clock,
            workload.token_bytes,
            counters.clone(),
        ));
    }
    let interval = workload
        .rate
        .map(|rate| Duration::from_secs_f64(1.0 / rate));
    let mut next = Instant::now();
    let mut sent = 0u64;
    for seq in 0..workload.tokens_per_recording {
        let sent_at = match interval {
            Some(interval) => {
                if next > Instant::now() {
                    tokio::time::sleep_until(next.into()).await;
                }
                // Open loop: latency counts from when the token was due, so a producer held up
                // by a slow ack is not excused from the delay (no coordinated omission).
                let due = next;
                next += interval;
                due
            }
            None => Instant::now(),
        };
        if Instant::now() >= deadline {
            break;
        }
        let token = encode_token(clock.ns(sent_at), seq as u32, workload.token_bytes);
        let sending = Instant::now();
        let acked = producer.send(token).await?;
        if acked > 0 {
            acks.push(sending.elapsed().as_micros() as u64);
        }
        sent += 1;
        counters.sent.fetch_add(1, Ordering::Relaxed);
        counters.acked.fetch_add(acked, Ordering::Relaxed);
    }
    let finishing = Instant::now();
    let acked = producer.finish().await?;
    record_all(&counters.latency.ack, &acks);
    record_all(
        &counters.latency.completion,
        &[finishing.elapsed().as_micros() as u64],
    );
    counters.acked.fetch_add(acked, Ordering::Relaxed);
    counters
        .expected
        .fetch_add(sent * workload.subscribers as u64, Ordering::Relaxed);
    let drained = tokio::time::timeout(SUBSCRIBER_LIMIT, async {
        while let Some(joined) = followers.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(err)) => counters.error(&err.context("subscriber")),
                Err(err) => counters.error(&anyhow!("subscriber task failed: {err}")),
            }
        }
    })
    .await;
    if drained.is_err() {
        bail!("subscribers of {name} did not see its end within {SUBSCRIBER_LIMIT:?}");
    }
    Ok(())
}

/// One live subscriber: reads to the end, timing every token against its send time.
async fn follow<S: Subscriber>(
    mut subscriber: S,
    clock: Clock,
    token_bytes: usize,
    counters: Arc<Counters>,
) -> Result<()> {
    let mut delivery = Vec::new();
    let mut carry: Vec<u8> = Vec::new();
    let mut expected_seq = 0u32;
    while let Some(bytes) = subscriber.next().await? {
        let now = clock.ns(Instant::now());
        carry.extend_from_slice(&bytes);
        let whole = carry.len() / token_bytes * token_bytes;
        for token in carry[..whole].chunks(token_bytes) {
            let (sent, seq) = decode_token(token).context("malformed token")?;
            if seq != expected_seq {
                counters.sequence_errors.fetch_add(1, Ordering::Relaxed);
            }
            expected_seq = seq.wrapping_add(1);
            delivery.push(now.saturating_sub(sent) / 1000);
        }
        counters
            .received
            .fetch_add((whole / token_bytes) as u64, Ordering::Relaxed);
        carry.drain(..whole);
    }
    if !carry.is_empty() {
        bail!("the recording ended inside a token");
    }
    record_all(&counters.latency.delivery, &delivery);
    Ok(())
}
