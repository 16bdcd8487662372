//! The write-ahead log in front of redb: each commit's changes are appended to one sequential
//! file and made durable with a single `fdatasync` of the new bytes, while redb commits them
//! without syncing. Every so often a checkpoint makes redb durable (with quick-repair, so that
//! reopening it after a crash is quick) and empties the log. Recovery is then rolling redb's
//! last checkpoint forward through the log (`roll_forward`), never a repair of the whole file.
//!
//! A frame is `[payload length: u32][crc32 of lsn and payload: u32][lsn: u64][payload]`, little
//! endian. Log sequence numbers (LSNs) count commits and go on across checkpoints; a checkpoint
//! stores the last one it holds in redb's `meta` table.
//!
//! The file is recycled: after a checkpoint, frames are written from its start again, over the
//! old ones, so that a sync writes data blocks only (the file's size and blocks do not change),
//! which is much quicker than syncing a growing file. The log is therefore the frames from the
//! file's start whose LSNs follow the checkpoint's one by one; it ends at the first frame that
//! is cut short, does not check, or is older (left from an earlier round).
//!
//! The file's first round is zeroed ahead of the frames, a stretch at a time, while the writer
//! has nothing else to do (`zero_ahead`): a frame that grows the file makes its sync write
//! the file's inode as well as its data, a frame written over zeros or old frames only its data.
//! Zeros read as the log's end.
//!
//! Invariant: the log holds exactly the commits made since the last checkpoint, in order. A
//! commit whose log write fails, or that redb refuses after its frame was written, is cut off
//! the file (if even that fails, the next commit is a checkpoint, and the file is emptied).
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::files::{FileHandle, Files, OpenMode, Reader};

mod change_tables;
mod logged;
mod redo;
mod roll_forward;

pub(crate) use logged::LazyLogged;
pub(crate) use redo::{Redo, TableId};
pub(crate) use roll_forward::{apply_changes, checkpoint_commit, roll_forward};

/// Bytes of a frame before its payload.
const HEADER_BYTES: usize = 16;
/// Bytes zeroed ahead of the log's end at a time (see [`Wal::zero_ahead`]): the next stretch
/// is zeroed once the log comes within half of this of what is written already. Zeroing and
/// syncing this much takes 1.4 ms here (64 KiB takes 0.7: smaller stretches cost more in all),
/// and saves the 1,700 syncs of 150-byte frames that would fill it an inode write each.
const ZERO_AHEAD_BYTES: u64 = 256 * 1024;
/// Bytes zeroed by one write: a page, on its boundaries.
const ZERO_PAGE_BYTES: u64 = 4096;
/// The `meta` key of the last LSN a checkpoint made durable in redb.
pub(crate) const CHECKPOINT_LSN_KEY: &str = "wal_checkpoint_lsn";

/// Where the log of the database at `db_path` lives: beside it, as `<name>.wal`.
pub(crate) fn path_of(db_path: &Path) -> PathBuf {
    db_path.with_extension("wal")
}

/// The open log file, appended to by the commit pipeline only.
pub(crate) struct Wal {
    file: Box<dyn FileHandle>,
    path: PathBuf,
    /// Length of the current round's frames; the next frame is written here.
    len: u64,
    /// LSN of the last frame written (or of the checkpoint, when the log is empty).
    last_lsn: u64,
    /// A failed write may have left bytes that could not be cut off: checkpoint before the
    /// next append, which empties the log.
    dirty_tail: bool,
    /// Bytes from the file's start known to be written (old frames, or zeros): a frame within
    /// them neither grows the file nor fills a hole in it, so its sync writes its data alone.
    written: u64,
    /// Zeroing ahead failed (a full disk, say): not tried again before the next checkpoint.
    zeroing_failed: bool,
    /// Reused to build frames.
    frame: Vec<u8>,
}

impl Wal {
    /// Opens (creating) the log at `path` on `files`, empty, after a checkpoint at `last_lsn`:
    /// what it held must have been rolled forward into redb and checkpointed first. Its old
    /// frames are written over.
    pub(crate) fn open_empty(
        files: &dyn Files,
        path: &Path,
        last_lsn: u64,
    ) -> std::io::Result<Wal> {
        let file = files.open(path, OpenMode::Create)?;
        let written = file.len()?;
        let wal = Wal {
            file,
            path: path.to_path_buf(),
            len: 0,
            last_lsn,
            dirty_tail: false,
            written,
            zeroing_failed: false,
            frame: Vec::new(),
        };
        // The file's directory entry must survive a crash before a frame in it counts.
        sync_parent(files, path)?;
        Ok(wal)
    }

    /// Bytes of frames in the log.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// LSN of the last commit written (or checkpointed).
    pub(crate) fn last_lsn(&self) -> u64 {
        self.last_lsn
    }

    /// Whether the next commit must be a checkpoint, the log's tail being in doubt.
    pub(crate) fn needs_checkpoint(&self) -> bool {
        self.dirty_tail
    }

    /// Appends one commit's `payload` as the next frame and makes it durable. Returns the
    /// length before it, to [`truncate`](Self::truncate) back to if the commit fails after.
    ///
    /// Fails as the write or the sync does; the frame is then cut off again.
    pub(crate) fn append(&mut self, payload: &[u8]) -> std::io::Result<u64> {
        let before = self.len;
        let lsn = self.last_lsn + 1;
        encode_frame(&mut self.frame, lsn, payload);
        let durable = self
            .file
            .write(before, &self.frame)
            .and_then(|()| self.file.sync_data());
        match durable {
            Ok(()) => {
                self.len = before + self.frame.len() as u64;
                self.written = self.written.max(self.len);
                self.last_lsn = lsn;
                Ok(before)
            }
            Err(err) => {
                self.cut(before);
                Err(err)
            }
        }
    }

    /// Cuts the last frame off again (its commit failed in redb): the log goes back to
    /// `before`, as [`append`](Self::append) returned it.
    pub(crate) fn truncate(&mut self, before: u64) {
        if before < self.len {
            self.cut(before);
            self.len = before;
            self.last_lsn -= 1;
        }
    }

    /// Empties the log after a checkpoint at `lsn`: the next frame goes at the file's start.
    /// The old frames stay until written over; they are older than the checkpoint, so rolling
    /// forward stops at them. After a failed cut, the file is truncated instead (the frame that
    /// could not be cut off may carry the next LSN).
    ///
    /// Fails as truncating and syncing the file does; the next commit checkpoints again.
    pub(crate) fn reset(&mut self, lsn: u64) -> std::io::Result<()> {
        self.last_lsn = lsn;
        self.len = 0;
        self.zeroing_failed = false;
        if self.dirty_tail {
            self.written = 0;
            self.file.set_len(0).and_then(|()| self.file.sync_all())?;
            self.dirty_tail = false;
        }
        Ok(())
    }

    /// Zeroes the next stretch of the file after the log's end, and syncs it, once the log has
    /// come within half a stretch ([`ZERO_AHEAD_BYTES`]) of what is written already; never
    /// past `limit` (the checkpoint size: the log is emptied there). The commit pipeline calls
    /// this when it has nothing else to do. It only makes later syncs quicker: a frame that
    /// grows the file makes its sync write the file's inode as well (on this machine's disk,
    /// with 150-byte frames, 3 writes and 0.18 ms a sync where 2 and 0.14 ms do).
    /// Once the log has had a round as long as `limit`, later rounds write over its old frames
    /// and need no zeroing.
    ///
    /// Fails as the write or the sync does, and is not tried again before the next checkpoint.
    /// The log is unchanged either way: zeros after its last frame read as its end.
    pub(crate) fn zero_ahead(&mut self, limit: u64) -> std::io::Result<()> {
        let start = self.written.max(self.len);
        let end = (start + ZERO_AHEAD_BYTES).min(limit);
        if self.zeroing_failed || start >= self.len + ZERO_AHEAD_BYTES / 2 || end <= start {
            return Ok(());
        }
        // A page at a time: one larger write makes the page cache hold the stretch in large
        // folios, and every frame written into one afterwards is then counted as writing all
        // of it (`/proc/PID/io`), though the disk writes only the frame's block.
        let page = [0u8; ZERO_PAGE_BYTES as usize];
        let mut at = start;
        let zeroed = loop {
            if at == end {
                break self.file.sync_data();
            }
            let next = ((at / ZERO_PAGE_BYTES + 1) * ZERO_PAGE_BYTES).min(end);
            if let Err(err) = self.file.write(at, &page[..(next - at) as usize]) {
                break Err(err);
            }
            at = next;
        };
        match zeroed {
            Ok(()) => self.written = end,
            Err(_) => self.zeroing_failed = true,
        }
        zeroed
    }

    /// Cuts the file back to `len` and syncs it; on failure, marks the tail as in doubt.
    fn cut(&mut self, len: u64) {
        self.written = self.written.min(len);
        let cut = self.file.set_len(len).and_then(|()| self.file.sync_data());
        if let Err(err) = cut {
            tracing::error!(path = %self.path.display(), error = %err, "could not cut a failed commit off the write-ahead log; the next commit is a checkpoint");
            self.dirty_tail = true;
        }
    }
}

/// Builds the frame of `payload` at `lsn` into `frame`.
fn encode_frame(frame: &mut Vec<u8>, lsn: u64, payload: &[u8]) {
    let length = u32::try_from(payload.len()).expect("a commit's changes fit in 4 GiB");
    frame.clear();
    frame.reserve(HEADER_BYTES + payload.len());
    frame.extend_from_slice(&length.to_le_bytes());
    frame.extend_from_slice(&checksum(lsn, payload).to_le_bytes());
    frame.extend_from_slice(&lsn.to_le_bytes());
    frame.extend_from_slice(payload);
}

fn checksum(lsn: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&lsn.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// Reads the next frame from `log` into `payload` and returns its LSN; `None` at the end of
/// the log, or at a frame that is incomplete or does not check (a write a crash cut short):
/// what follows it was never acknowledged.
///
/// Fails as reading does.
pub(crate) fn read_frame(
    log: &mut impl Read,
    payload: &mut Vec<u8>,
) -> std::io::Result<Option<u64>> {
    let mut header = [0u8; HEADER_BYTES];
    if !read_full(log, &mut header)? {
        return Ok(None);
    }
    let length = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let lsn = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    payload.clear();
    let read = log.take(length as u64).read_to_end(payload)?;
    if read < length || checksum(lsn, payload) != crc {
        return Ok(None);
    }
    Ok(Some(lsn))
}

/// Bytes of the log at `path` on `files` that hold commits after checkpoint `after`: what a
/// crashed server left for the next start to roll forward (0 after a clean stop, whatever the
/// file's length).
///
/// Fails as reading does.
pub(crate) fn pending_bytes(files: &dyn Files, path: &Path, after: u64) -> std::io::Result<u64> {
    let file = match files.open(path, OpenMode::Read) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err),
    };
    let mut log = std::io::BufReader::with_capacity(1 << 20, Reader::new(&*file)?);
    let mut payload = Vec::new();
    let (mut last, mut bytes) = (after, 0);
    while let Some(lsn) = read_frame(&mut log, &mut payload)? {
        if lsn != last + 1 {
            break;
        }
        last = lsn;
        bytes += (HEADER_BYTES + payload.len()) as u64;
    }
    Ok(bytes)
}

/// Fills `buf`; `false` if the log ends first.
fn read_full(log: &mut impl Read, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match log.read(&mut buf[filled..]) {
            Ok(0) => return Ok(false),
            Ok(n) => filled += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(true)
}

/// Syncs the directory holding `path`, so that a file created in it survives a crash.
fn sync_parent(files: &dyn Files, path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => files.sync_dir(dir),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every frame of `log` up to its end, and how many bytes they take.
    fn frames(log: &[u8]) -> (Vec<(u64, Vec<u8>)>, usize) {
        let mut reader = std::io::Cursor::new(log);
        let mut found = Vec::new();
        let mut payload = Vec::new();
        let mut valid = 0;
        while let Some(lsn) = read_frame(&mut reader, &mut payload).unwrap() {
            found.push((lsn, payload.clone()));
            valid = reader.position() as usize;
        }
        (found, valid)
    }

    fn frame(lsn: u64, payload: &[u8]) -> (u64, Vec<u8>) {
        (lsn, payload.to_vec())
    }

    #[test]
    fn frames_stop_at_a_torn_or_damaged_tail() {
        let mut log = Vec::new();
        let mut encoded = Vec::new();
        for (lsn, payload) in [(1, &b"one"[..]), (2, b""), (3, b"three")] {
            encode_frame(&mut encoded, lsn, payload);
            log.extend_from_slice(&encoded);
        }
        let all = vec![frame(1, b"one"), frame(2, b""), frame(3, b"three")];
        assert_eq!(frames(&log), (all.clone(), log.len()));

        // Cut inside the last frame's payload, then inside its header.
        let first_two = 2 * HEADER_BYTES + 3;
        for cut in [log.len() - 2, first_two + 10] {
            assert_eq!(
                frames(&log[..cut]),
                (all[..2].to_vec(), first_two),
                "cut at {cut}"
            );
        }
        // A flipped bit in the second frame's LSN ends the log before it.
        let mut damaged = log.clone();
        damaged[HEADER_BYTES + 3 + 9] ^= 1;
        assert_eq!(frames(&damaged), (all[..1].to_vec(), HEADER_BYTES + 3));
    }

    #[test]
    fn append_truncate_and_reset_keep_the_file_to_its_valid_frames() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.wal");
        let mut wal = Wal::open_empty(&crate::files::RealFiles, &path, 7).unwrap();
        assert_eq!(wal.append(b"a").unwrap(), 0);
        let before = wal.append(b"bb").unwrap();
        assert_eq!(wal.last_lsn(), 9);
        wal.truncate(before);
        assert_eq!(wal.last_lsn(), 8);
        wal.append(b"cc").unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            frames(&bytes),
            (vec![frame(8, b"a"), frame(9, b"cc")], bytes.len())
        );
        assert_eq!(bytes.len() as u64, wal.len());

        // Recycled: the next round writes over the old frames, which a reader finds older.
        wal.reset(9).unwrap();
        wal.append(b"d").unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(frames(&bytes).0, vec![frame(10, b"d"), frame(9, b"cc")]);
    }

    #[test]
    fn frames_go_into_the_zeroed_stretch_and_the_zeros_read_as_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.wal");
        let file_len = || std::fs::metadata(&path).unwrap().len();
        let mut wal = Wal::open_empty(&crate::files::RealFiles, &path, 0).unwrap();
        let payload = [7u8; 150];
        let frame_bytes = (HEADER_BYTES + payload.len()) as u64;
        wal.append(&payload).unwrap();
        wal.zero_ahead(u64::MAX).unwrap();
        assert_eq!(file_len(), frame_bytes + ZERO_AHEAD_BYTES);

        // Frames fill the stretch without growing the file, and the log ends at the zeros.
        let mut appended = vec![frame(1, &payload)];
        while wal.len() + frame_bytes <= ZERO_AHEAD_BYTES / 2 {
            wal.append(&payload).unwrap();
            appended.push(frame(wal.last_lsn(), &payload));
            wal.zero_ahead(u64::MAX).unwrap();
        }
        assert_eq!(
            file_len(),
            frame_bytes + ZERO_AHEAD_BYTES,
            "not zeroed again yet"
        );
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(frames(&bytes), (appended, wal.len() as usize));

        // Within half a stretch of the end, the next one is zeroed; never past the limit.
        while wal.len() + ZERO_AHEAD_BYTES / 2 <= frame_bytes + ZERO_AHEAD_BYTES {
            wal.append(&payload).unwrap();
        }
        let limit = file_len() + 1000;
        wal.zero_ahead(limit).unwrap();
        assert_eq!(file_len(), limit);
        wal.append(&payload).unwrap();
        wal.zero_ahead(limit).unwrap();
        assert_eq!(file_len(), limit);
    }
}
