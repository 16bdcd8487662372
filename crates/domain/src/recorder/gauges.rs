//! The gauges' sampler: sets the metrics that describe the recorder now (live recordings,
//! producers, live replays) and its store (disk full, file size) every second. The metric
//! names live in [`crate::metrics`].
use std::path::PathBuf;
use std::time::Duration;

use metrics::gauge;
use tokio_util::sync::CancellationToken;

use super::{Holder, Recorder};
use crate::metrics::{DISK_FULL, FILE_BYTES, LIVE_RECORDINGS, LIVE_REPLAYS, PRODUCERS};

/// How often the gauges are sampled.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Sets the gauges from the recorder and the database file every second, until `stop`.
pub async fn sample(recorder: Recorder, database: PathBuf, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(SAMPLE_INTERVAL);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => return,
        }
        let tapes = recorder.deck().live_tapes();
        let attached = tapes
            .iter()
            .filter(|t| matches!(t.holder(), Holder { attached: true, .. }))
            .count();
        gauge!(LIVE_RECORDINGS).set(tapes.len() as f64);
        gauge!(PRODUCERS, "state" => "attached").set(attached as f64);
        gauge!(PRODUCERS, "state" => "detached").set((tapes.len() - attached) as f64);
        gauge!(LIVE_REPLAYS).set(tapes.iter().map(|t| t.readers()).sum::<u64>() as f64);
        let store = recorder.deck().store();
        gauge!(DISK_FULL).set(if store.is_full() { 1.0 } else { 0.0 });
        if let Ok(meta) = std::fs::metadata(&database) {
            gauge!(FILE_BYTES).set(meta.len() as f64);
        }
    }
}
