//! The stored-recordings curve: what a reader waits for as completed recordings pile up. One
//! data dir is loaded in steps with small recordings (4 tokens of 32 B) up to each size; at
//! each, one client times `Recordings.Get` of a random recording, `Recordings.List`'s first
//! page and a page from the middle (by its page token), and `Replay` of a random recording to
//! its first message, one call at a time; then the server is crashed with a checkpoint's worth
//! of log and its restart timed, as on the restart curve.
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::chart::{self, Chart, Series};
use super::growth::{Expectation, Growth, Verdict, verdict};
use super::reads::Reads;
use crate::driver::crash::{self, Check, Load, Start};
use crate::report::Latency;
use crate::targets::{Environment, temp_dir};
use crate::workload::{ReplayWorkload, STANDARD_CONNECTIONS, STANDARD_TOKEN_BYTES};

/// Tokens in each loaded recording.
const TOKENS_PER_RECORDING: usize = 4;
/// Recordings loaded at once: each is a short call that waits for its commit, so it takes
/// many in flight to fill a group commit.
const LOAD_CONCURRENCY: usize = 512;
/// Names of the loaded recordings: `stored-N`.
const PREFIX: &str = "stored";

const LOOKUP: Expectation = Expectation {
    growth: Growth::Flat,
    why: "a redb B-tree seek, one level deeper per ~100× rows, under a gRPC round trip that \
          costs more: O(log n), flat in practice",
};
const PAGE: Expectation = Expectation {
    growth: Growth::Flat,
    why: "a seek in the start-order index (O(log n)) and then the page's rows, wherever the page \
          is: the token names where to seek, nothing is skipped row by row",
};
const FIRST_BYTE: Expectation = Expectation {
    growth: Growth::Flat,
    why: "two B-tree seeks (the recording's row, its first chunk) before the first message: \
          O(log n), flat in practice",
};
const RESTART: Expectation = Expectation {
    growth: Growth::Flat,
    why: "start-up reads the recordings the crash left live from the live index, not every \
          row, on top of the bounded log replay",
};

/// One size of the curve.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Point {
    pub recordings: usize,
    /// Loading this step, in recordings per second.
    pub load_per_s: f64,
    pub get: Option<Latency>,
    pub list_first: Option<Latency>,
    pub list_middle: Option<Latency>,
    pub replay_first_byte: Option<Latency>,
    pub restart: Start,
}

/// One call's latencies at a point.
type Call = fn(&Point) -> &Option<Latency>;

/// The measured curve.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Curve {
    pub points: Vec<Point>,
    pub verdicts: Vec<Verdict>,
}

/// Loads one data dir up to each of `sizes` (ascending) and measures it there.
pub(crate) async fn run(env: &Environment, sizes: &[usize]) -> Result<Curve> {
    let root = temp_dir(&env.work_dir, "tapedeck-curve-stored-")?;
    let data = root.path().join("data");
    let workload = ReplayWorkload {
        recordings: 0,
        tokens_per_recording: TOKENS_PER_RECORDING,
        token_bytes: STANDARD_TOKEN_BYTES,
        load_concurrency: LOAD_CONCURRENCY,
        replay_concurrency: 1,
        connections: STANDARD_CONNECTIONS,
    };
    let mut points = Vec::new();
    let mut loaded = 0;
    for &size in sizes {
        let (server, addr) = crash::spawn(env, &data).await?;
        let loading = Load {
            prefix: PREFIX,
            names: loaded..size.max(loaded),
            label: "stored curve load",
        };
        let load_s = crash::load(env, addr, server.pid(), &workload, &loading).await?;
        let load_per_s = loading.names.len() as f64 / load_s.max(1e-9);
        loaded = loaded.max(size);
        eprintln!("   stored curve: {loaded} recordings ({load_per_s:.0}/s loading), timing reads");
        let reads = Reads::connect(addr, PREFIX, loaded).await?;
        let get = reads.get().await?;
        let list_first = reads.list(String::new()).await?;
        let list_middle = reads.list(reads.middle_token().await?).await?;
        let replay_first_byte = reads.first_byte().await?;
        drop(server);
        crash::crash_with_a_log(env, &data, &workload).await?;
        let check = Check {
            name: crash::name(PREFIX, loaded - 1),
            bytes: (TOKENS_PER_RECORDING * STANDARD_TOKEN_BYTES) as u64,
        };
        let restart = crash::timed_start(env, &data, &check).await?;
        points.push(Point {
            recordings: loaded,
            load_per_s,
            get: Latency::of(&get),
            list_first: Latency::of(&list_first),
            list_middle: Latency::of(&list_middle),
            replay_first_byte: Latency::of(&replay_first_byte),
            restart,
        });
    }
    // The medians carry the verdicts: one call at a time on a shared machine, the p99 of a
    // few hundred calls is the machine's noise as often as the server's cost.
    let p50 = |pick: Call| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter_map(|p| pick(p).as_ref().map(|l| (p.recordings as f64, l.p50_ms)))
            .collect()
    };
    let restart: Vec<_> = points
        .iter()
        .map(|p| (p.recordings as f64, p.restart.serving_s))
        .collect();
    let size = "recordings";
    let verdicts = vec![
        verdict("Get p50", "ms", size, &p50(|p| &p.get), &LOOKUP),
        verdict(
            "List first page p50",
            "ms",
            size,
            &p50(|p| &p.list_first),
            &PAGE,
        ),
        verdict(
            "List middle page p50",
            "ms",
            size,
            &p50(|p| &p.list_middle),
            &PAGE,
        ),
        verdict(
            "Replay first byte p50",
            "ms",
            size,
            &p50(|p| &p.replay_first_byte),
            &FIRST_BYTE,
        ),
        verdict("crash restart time", "s", size, &restart, &RESTART),
    ];
    Ok(Curve { points, verdicts })
}

/// The curve's table.
pub(crate) fn table(curve: &Curve) -> String {
    let mut out = format!(
        "\n### curve: reads against stored recordings ({TOKENS_PER_RECORDING} × \
         {STANDARD_TOKEN_BYTES} B each; p50 / p99 ms, one call at a time)\n\n\
         | recordings | load rec/s | Get | List first page | List middle page | Replay first byte \
         | crash restart s |\n|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let cell = |l: &Option<Latency>| {
        l.as_ref().map_or("-".to_string(), |l| {
            format!("{:.2} / {:.2}", l.p50_ms, l.p99_ms)
        })
    };
    for p in &curve.points {
        out.push_str(&format!(
            "| {} | {:.0} | {} | {} | {} | {} | {:.3} |\n",
            p.recordings,
            p.load_per_s,
            cell(&p.get),
            cell(&p.list_first),
            cell(&p.list_middle),
            cell(&p.replay_first_byte),
            p.restart.serving_s
        ));
    }
    for v in &curve.verdicts {
        out.push_str(&format!("\n- {}", v.line));
    }
    out.push('\n');
    out
}

/// Draws `stored-reads.svg` (p50 dashed, p99 solid, per call) and `stored-restart.svg` in `dir`.
pub(crate) fn draw(curve: &Curve, dir: &Path) -> Result<Vec<PathBuf>> {
    let calls: [(&str, Call); 4] = [
        ("Get", |p| &p.get),
        ("List first page", |p| &p.list_first),
        ("List middle page", |p| &p.list_middle),
        ("Replay first byte", |p| &p.replay_first_byte),
    ];
    let mut series = Vec::new();
    for (color, (call, pick)) in calls.iter().enumerate() {
        for (quantile, dashed) in [("p99", false), ("p50", true)] {
            let points = curve
                .points
                .iter()
                .filter_map(|p| {
                    pick(p).as_ref().map(|l| {
                        let ms = if dashed { l.p50_ms } else { l.p99_ms };
                        (p.recordings as f64, ms)
                    })
                })
                .collect();
            series.push(Series {
                label: format!("{call} {quantile}"),
                points,
                dashed,
                color,
            });
        }
    }
    let reads = Chart {
        title: "tapedeck: read latency against stored recordings",
        x_label: "completed recordings stored (log scale)",
        y_label: "latency (ms)",
        series,
        notes: curve.verdicts[..4].iter().map(|v| v.line.clone()).collect(),
    };
    let restart = Chart {
        title: "tapedeck: crash restart time against stored recordings",
        x_label: "completed recordings stored (log scale)",
        y_label: "SIGKILL to serving (s)",
        series: vec![Series {
            label: "serving after SIGKILL, a checkpoint's log to replay".into(),
            points: curve
                .points
                .iter()
                .map(|p| (p.recordings as f64, p.restart.serving_s))
                .collect(),
            dashed: false,
            color: 0,
        }],
        notes: vec![curve.verdicts[4].line.clone()],
    };
    let paths = vec![dir.join("stored-reads.svg"), dir.join("stored-restart.svg")];
    chart::draw(&reads, &paths[0])?;
    chart::draw(&restart, &paths[1])?;
    Ok(paths)
}
