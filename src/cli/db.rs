//! `tapedeck db stats|check|compact --data-dir DIR`: the offline tools, on a stopped server's
//! data dir, with progress bars on a terminal.
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use tapedeck::store::offline;

/// An offline tool.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum DbCommand {
    /// Recordings by status, bytes stored, journal backlog, file size against live data.
    Stats {
        #[command(flatten)]
        dir: DataDir,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// redb's integrity check plus tapedeck's own invariants, without changing the file; exit
    /// code 1 if anything is wrong.
    Check {
        #[command(flatten)]
        dir: DataDir,
    },
    /// Give the file's free pages back to the file system (a damaged file is refused).
    Compact {
        #[command(flatten)]
        dir: DataDir,
    },
}

/// The data dir a tool works on.
#[derive(clap::Args, Debug)]
pub(crate) struct DataDir {
    /// The stopped server's data dir.
    #[arg(long, env = "TAPEDECK_DATA_DIR", default_value = "./tapedeck-data")]
    data_dir: PathBuf,
}

impl DataDir {
    fn database(&self) -> Result<PathBuf> {
        let path = self.data_dir.join("tapedeck.redb");
        if !path.is_file() {
            bail!("no tapedeck database in {}", self.data_dir.display());
        }
        Ok(path)
    }
}

/// Runs `command`; an error is one line on stderr.
pub(crate) fn run(command: DbCommand) -> ExitCode {
    match execute(command) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("tapedeck: error: {}", crate::one_line(&err));
            ExitCode::FAILURE
        }
    }
}

fn execute(command: DbCommand) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match command {
        DbCommand::Stats { dir, json } => {
            let bar = progress("reading recordings");
            let stats = offline::stats(&dir.database()?, |done, total| tick(&bar, done, total))?;
            bar.finish_and_clear();
            let ratio = stats.file_bytes as f64 / stats.live_bytes.max(1) as f64;
            if json {
                let value = serde_json::json!({
                    "recordings": stats.by_status,
                    "recorded_bytes": stats.recorded_bytes,
                    "chunks": stats.chunks,
                    "segments": stats.segments,
                    "journal_backlog": stats.journal_backlog,
                    "tombstones": stats.tombstones,
                    "sealed": stats.sealed,
                    "sealed_remote_only": stats.sealed_remote_only,
                    "seal_backlog": stats.seal_backlog,
                    "live_bytes": stats.live_bytes,
                    "file_bytes": stats.file_bytes,
                    "log_bytes": stats.log_bytes,
                });
                writeln!(out, "{value}")?;
            } else {
                let total: u64 = stats.by_status.values().sum();
                let statuses: Vec<String> = stats
                    .by_status
                    .iter()
                    .map(|(s, n)| format!("{s} {n}"))
                    .collect();
                writeln!(out, "recordings:      {total} ({})", statuses.join(", "))?;
                writeln!(
                    out,
                    "recorded bytes:  {} (ended recordings)",
                    stats.recorded_bytes
                )?;
                writeln!(out, "chunks:          {}", stats.chunks)?;
                writeln!(out, "segments:        {}", stats.segments)?;
                writeln!(out, "journal backlog: {} entries", stats.journal_backlog)?;
                writeln!(out, "tombstones:      {}", stats.tombstones)?;
                writeln!(
                    out,
                    "sealed:          {} ({} only in the object store); {} not sealed yet",
                    stats.sealed, stats.sealed_remote_only, stats.seal_backlog
                )?;
                writeln!(
                    out,
                    "file:            {} bytes for {} bytes of live data ({ratio:.2}x)",
                    stats.file_bytes, stats.live_bytes
                )?;
                if stats.log_bytes > 0 {
                    writeln!(
                        out,
                        "write-ahead log: {} bytes of commits not in the file yet (a start of the server applies them)",
                        stats.log_bytes
                    )?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        DbCommand::Check { dir } => {
            let bar = progress("checking");
            let problems = offline::check(&dir.database()?, |done, total| tick(&bar, done, total))?;
            bar.finish_and_clear();
            if problems.is_empty() {
                writeln!(out, "ok: no problems found")?;
                return Ok(ExitCode::SUCCESS);
            }
            for problem in &problems {
                writeln!(out, "{problem}")?;
            }
            out.flush()?;
            bail!("{} problem(s) found", problems.len())
        }
        DbCommand::Compact { dir } => {
            let bar = ProgressBar::new_spinner().with_message("compacting");
            bar.enable_steady_tick(std::time::Duration::from_millis(100));
            let (before, after) = offline::compact(&dir.database()?)?;
            bar.finish_and_clear();
            writeln!(out, "compacted: {before} -> {after} bytes")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A progress bar on stderr; indicatif draws nothing when stderr is not a terminal.
fn progress(message: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(0).with_message(message);
    if let Ok(style) = ProgressStyle::with_template("{msg} {bar:40} {pos}/{len}") {
        bar.set_style(style);
    }
    bar
}

fn tick(bar: &ProgressBar, done: u64, total: u64) {
    bar.set_length(total);
    bar.set_position(done);
}
