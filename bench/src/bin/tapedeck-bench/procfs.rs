//! What `/proc` says about the process that owns a target's data: bytes it caused to be written
//! to storage (`/proc/<pid>/io` `write_bytes`) and its memory (`/proc/<pid>/status`).

/// `pid`, or this process for `None`.
fn path(pid: Option<u32>, file: &str) -> String {
    match pid {
        Some(pid) => format!("/proc/{pid}/{file}"),
        None => format!("/proc/self/{file}"),
    }
}

/// Bytes the process has caused to be sent to the storage layer so far (counted when a page
/// is dirtied, so rewriting one page after each fsync counts each time).
pub(crate) fn write_bytes(pid: Option<u32>) -> Option<u64> {
    let text = std::fs::read_to_string(path(pid, "io")).ok()?;
    field(&text, "write_bytes:")
}

/// CPU time (user + system) the process has used so far, in seconds.
pub(crate) fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let text = std::fs::read_to_string(path(pid, "stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / CLOCK_TICKS_PER_SECOND)
}

/// CPU time every process on the machine has used so far (all but idle and I/O wait), in
/// seconds summed over cores.
pub(crate) fn machine_busy_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice, already in user/nice]
    let busy: u64 = ticks.iter().take(8).sum::<u64>() - ticks.get(3)? - ticks.get(4)?;
    Some(busy as f64 / CLOCK_TICKS_PER_SECOND)
}

/// `sysconf(_SC_CLK_TCK)` on Linux, a kernel ABI constant.
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// Resident memory now and at its peak, in KiB.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Memory {
    pub rss_kib: u64,
    pub peak_kib: u64,
}

pub(crate) fn memory(pid: Option<u32>) -> Option<Memory> {
    let text = std::fs::read_to_string(path(pid, "status")).ok()?;
    Some(Memory {
        rss_kib: field(&text, "VmRSS:")?,
        peak_kib: field(&text, "VmHWM:")?,
    })
}

fn field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        assert!(write_bytes(None).is_some());
        assert!(cpu_seconds(None).is_some());
        assert!(machine_busy_seconds().is_some());
        let memory = memory(None).unwrap();
        assert!(memory.rss_kib > 0 && memory.peak_kib >= memory.rss_kib);
    }
}
