//! A redb storage backend that reads a database file and keeps every write in memory: the
//! offline tools let redb check, repair and roll a file forward through it without changing a
//! byte of the file. Locks go to the file itself, so a running server's lock is still
//! respected.
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::io;
use std::ops::Bound;
use std::sync::Mutex;

use redb::{BackendError, StorageBackend};

/// Granularity of the copies kept in memory; redb writes whole pages of this size or more.
const BLOCK: u64 = 4096;

/// The file, read through, with what was written over it held in memory.
#[derive(Debug)]
pub(crate) struct Overlay {
    file: Box<dyn StorageBackend>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The length redb sees.
    len: u64,
    /// Bytes of the file below this still show through; a shrink hides the rest for good (a
    /// later growth reads as zeros, as on a real file).
    visible: u64,
    /// Blocks written, by block number.
    blocks: BTreeMap<u64, Box<[u8]>>,
}

impl Overlay {
    /// An overlay over `file` (as [`Files::open_database`](crate::files::Files::open_database)
    /// opened it), which must be open for reading and writing: redb's exclusive lock needs a
    /// writable descriptor. Nothing is ever written to it.
    ///
    /// Fails when the file's length cannot be read.
    pub(crate) fn new(file: Box<dyn StorageBackend>) -> io::Result<Self> {
        let len = file.len()?;
        Ok(Self {
            file,
            state: Mutex::new(State {
                len,
                visible: len,
                blocks: BTreeMap::new(),
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves whole blocks behind: still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads `out.len()` bytes of the file at `offset`, zeros past its visible part.
    fn read_file(&self, visible: u64, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let from_file = visible.saturating_sub(offset).min(out.len() as u64) as usize;
        if from_file > 0 {
            self.file.read(offset, &mut out[..from_file])?;
        }
        out[from_file..].fill(0);
        Ok(())
    }
}

impl StorageBackend for Overlay {
    fn len(&self) -> io::Result<u64> {
        Ok(self.state().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let state = self.state();
        let end = offset
            .checked_add(out.len() as u64)
            .filter(|end| *end <= state.len)
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let mut at = offset;
        while at < end {
            let block = at / BLOCK;
            let within = (at % BLOCK) as usize;
            let take = (BLOCK as usize - within).min((end - at) as usize);
            let dest = &mut out[(at - offset) as usize..][..take];
            match state.blocks.get(&block) {
                Some(bytes) => dest.copy_from_slice(&bytes[within..within + take]),
                None => self.read_file(state.visible, at, dest)?,
            }
            at += take as u64;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.state();
        if len < state.len {
            state.visible = state.visible.min(len);
            let first_gone = len.div_ceil(BLOCK);
            state.blocks.split_off(&first_gone);
            // The tail of the block that now ends the storage reads as zeros if it grows back.
            if !len.is_multiple_of(BLOCK)
                && let Some(bytes) = state.blocks.get_mut(&(len / BLOCK))
            {
                bytes[(len % BLOCK) as usize..].fill(0);
            }
        }
        state.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut state = self.state();
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|end| *end <= state.len)
            .ok_or_else(|| io::Error::other("write past the end of the storage"))?;
        let mut at = offset;
        while at < end {
            let block = at / BLOCK;
            let within = (at % BLOCK) as usize;
            let take = (BLOCK as usize - within).min((end - at) as usize);
            let (len, visible) = (state.len, state.visible);
            let bytes = match state.blocks.entry(block) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => {
                    let mut bytes = vec![0; BLOCK as usize].into_boxed_slice();
                    let start = block * BLOCK;
                    let readable = len.min(start + BLOCK) - start;
                    self.read_file(visible, start, &mut bytes[..readable as usize])?;
                    entry.insert(bytes)
                }
            };
            bytes[within..within + take].copy_from_slice(&data[(at - offset) as usize..][..take]);
            at += take as u64;
        }
        Ok(())
    }

    fn close(&self) -> io::Result<()> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_stay_in_memory_and_read_back_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let original: Vec<u8> = (0..3 * BLOCK + 100).map(|i| i as u8).collect();
        std::fs::write(&path, &original).unwrap();
        let file = crate::files::Files::open_database(
            &crate::files::RealFiles,
            &path,
            crate::files::OpenMode::Write,
        )
        .unwrap();
        let overlay = Overlay::new(file).unwrap();
        overlay.write(BLOCK - 2, &[0xaa; 4]).unwrap();
        let mut out = vec![0; 8];
        overlay.read(BLOCK - 4, &mut out).unwrap();
        assert_eq!(out, [252, 253, 0xaa, 0xaa, 0xaa, 0xaa, 2, 3]);
        // Shrunk and grown again: the cut part reads as zeros.
        overlay.set_len(BLOCK + 1).unwrap();
        overlay.set_len(4 * BLOCK).unwrap();
        let mut tail = vec![1; 10];
        overlay.read(BLOCK, &mut tail).unwrap();
        assert_eq!(tail, [0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let mut far = vec![1; 4];
        overlay.read(3 * BLOCK + 10, &mut far).unwrap();
        assert_eq!(far, [0; 4]);
        assert!(overlay.read(4 * BLOCK - 1, &mut [0; 2]).is_err());
        assert_eq!(
            std::fs::read(&path).unwrap(),
            original,
            "the file was written"
        );
    }
}
