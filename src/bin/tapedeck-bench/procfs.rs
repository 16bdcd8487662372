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
pub fn write_bytes(pid: Option<u32>) -> Option<u64> {
    let text = std::fs::read_to_string(path(pid, "io")).ok()?;
    field(&text, "write_bytes:")
}

/// Resident memory now and at its peak, in KiB.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub rss_kib: u64,
    pub peak_kib: u64,
}

pub fn memory(pid: Option<u32>) -> Option<Memory> {
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
        let memory = memory(None).unwrap();
        assert!(memory.rss_kib > 0 && memory.peak_kib >= memory.rss_kib);
    }
}
