//! A quick look at the disk before the run: how long an append + `fdatasync` takes, which
//! bounds every durable target's commit rate and latency.
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::report::{self, Latency};

/// Appends synced by the probe.
const PROBE_SYNCS: usize = 200;
/// Bytes per append: about what one commit of a few tokens adds.
const PROBE_BYTES: usize = 512;

/// Latency of one append + `fdatasync` in a fresh file under `dir`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DiskProbe {
    pub fdatasync: Latency,
    /// Syncs per second one writer gets, back to back.
    pub syncs_per_s: f64,
}

pub(crate) fn probe(dir: &Path) -> Result<Option<DiskProbe>> {
    let dir = crate::targets::temp_dir(dir, "disk-probe-")?;
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("probe"))?;
    let block = vec![b'x'; PROBE_BYTES];
    let mut histogram = report::histogram();
    let start = Instant::now();
    for _ in 0..PROBE_SYNCS {
        let t = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        histogram.saturating_record(t.elapsed().as_micros() as u64);
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(Latency::of(&histogram).map(|fdatasync| DiskProbe {
        fdatasync,
        syncs_per_s: PROBE_SYNCS as f64 / seconds,
    }))
}
