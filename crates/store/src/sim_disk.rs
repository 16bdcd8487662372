//! A simulated disk under the store's seam ([`Files`]), for power-cut and failing-disk tests.
//!
//! Every file lives in memory twice over: the bytes its last sync made durable, and the writes
//! and resizes made since, in order. Every directory entry too: the names as the directory's
//! last sync left them, and as they are now. A power cut keeps what was synced and, file by
//! file, a random prefix of what was not, its last write possibly torn at a 512-byte sector, as
//! a real disk may; a file whose entry was never synced is gone, a rename not synced is undone.
//!
//! Faults, each drawn from the disk's seeded generator: a sync may fail with EIO (what it was
//! to make durable then never is, as Linux drops the dirty pages of a failed `fsync`), a write
//! may fail with ENOSPC (writing nothing). The disk can also cut its own power at its n-th
//! change, landing the cut between any two of the store's writes and syncs. A disk of a given
//! capacity refuses, with ENOSPC, a write to blocks it has no room left for; as on Linux, a
//! file grown by a resize alone is sparse, and takes no room until written.
//!
//! A disk told to skip a kind of sync answers it without making anything durable: the same, to
//! the store, as that sync missing from its code. Tests use it to show the power-cut checks
//! would catch a missing sync.
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redb::StorageBackend;

use crate::files::{FileHandle, Files, OpenMode};

/// A sector: a write torn by a power cut keeps a whole number of them.
const SECTOR: u64 = 512;
/// A block: the unit of room a write takes on a disk of limited capacity.
const BLOCK: u64 = 4096;

/// The syncs a lying disk skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkippedSync {
    /// `fdatasync` of the write-ahead log (`*.wal`): its frames are acknowledged unsynced.
    Log,
    /// Syncs of the database file (`*.redb`): a checkpoint is not durable before the log it
    /// replaces is cut.
    Database,
    /// Syncs of directories: files created, renamed or removed may not survive.
    Directory,
    /// `fdatasync` of a cluster's Raft log (`*.log`): its entries count towards a majority
    /// unsynced.
    RaftLog,
}

/// What goes wrong with the disk, drawn from its seeded generator.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Chance that a sync fails with EIO.
    pub sync_eio: f64,
    /// Chance that a write fails with ENOSPC.
    pub write_enospc: f64,
    /// A kind of sync the disk answers without doing.
    pub skip: Option<SkippedSync>,
    /// Cuts the power at this change (a write, resize, sync, rename or removal), counted from
    /// one; the image is then [`SimDisk::after_cut`].
    pub cut_at_change: Option<u64>,
    /// The bytes the disk holds: the blocks written to its named files take them.
    pub capacity: Option<u64>,
}

/// A change to a file not yet made durable.
#[derive(Debug, Clone)]
enum Change {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default, Clone)]
struct Inode {
    /// As the last sync left it: what a power cut keeps for sure.
    durable: Vec<u8>,
    /// As reads see it.
    current: Vec<u8>,
    /// The changes since the last sync, oldest first.
    pending: Vec<Change>,
    /// Which blocks hold written bytes (the others are a hole), and how many do.
    blocks: Vec<bool>,
    written_blocks: u64,
}

impl Inode {
    /// The blocks a write of `len` bytes at `offset` takes that the file has no room in yet.
    fn new_blocks(&self, offset: u64, len: u64) -> u64 {
        let written = |block: u64| self.blocks.get(block as usize).is_some_and(|b| *b);
        blocks_of(offset, len).filter(|b| !written(*b)).count() as u64
    }

    /// Counts the blocks of a write as written.
    fn take_blocks(&mut self, offset: u64, len: u64) {
        for block in blocks_of(offset, len) {
            if self.blocks.len() <= block as usize {
                self.blocks.resize(block as usize + 1, false);
            }
            if !std::mem::replace(&mut self.blocks[block as usize], true) {
                self.written_blocks += 1;
            }
        }
    }

    /// Gives back the blocks past `len`.
    fn cut_blocks(&mut self, len: u64) {
        let keep = len.div_ceil(BLOCK) as usize;
        if keep < self.blocks.len() {
            self.blocks.truncate(keep);
            self.written_blocks = self.blocks.iter().filter(|b| **b).count() as u64;
        }
    }
}

/// The blocks `len` bytes at `offset` fall in.
fn blocks_of(offset: u64, len: u64) -> std::ops::Range<u64> {
    if len == 0 {
        return 0..0;
    }
    offset / BLOCK..(offset + len - 1) / BLOCK + 1
}

#[derive(Debug)]
struct Disk {
    inodes: HashMap<u64, Inode>,
    /// Directory entries as they are now.
    names: HashMap<PathBuf, u64>,
    /// Directory entries as their directories' last syncs left them.
    durable_names: HashMap<PathBuf, u64>,
    next_inode: u64,
    rng: StdRng,
    faults: Faults,
    changes: u64,
    /// The image the power cut left, once it happened; every call fails from then on.
    after_cut: Option<SimDisk>,
}

/// A simulated disk; clones share it.
#[derive(Debug, Clone)]
pub struct SimDisk(Arc<Mutex<Disk>>);

impl SimDisk {
    /// An empty disk whose faults and power cuts are drawn from `seed`.
    pub fn new(seed: u64, faults: Faults) -> SimDisk {
        SimDisk(Arc::new(Mutex::new(Disk {
            inodes: HashMap::new(),
            names: HashMap::new(),
            durable_names: HashMap::new(),
            next_inode: 1,
            rng: StdRng::seed_from_u64(seed),
            faults,
            changes: 0,
            after_cut: None,
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cuts the power now, if it is not cut already: from now on every call fails with EIO.
    /// Returns the disk as it comes back: what was durable, and of each file a random prefix of
    /// what was not, on a disk whose generator is drawn from this one's, with no faults but
    /// the sync it skips, if it skips one.
    pub fn power_cut(&self) -> SimDisk {
        let mut disk = self.lock();
        disk.cut();
        disk.after_cut
            .clone()
            .unwrap_or_else(|| unreachable!("cut above"))
    }

    /// The disk as the power cut left it, once it happened.
    pub fn after_cut(&self) -> Option<SimDisk> {
        self.lock().after_cut.clone()
    }

    /// Cuts the power at the `n`th change from now (counted from one).
    pub fn cut_after(&self, n: u64) {
        let mut disk = self.lock();
        disk.faults.cut_at_change = Some(disk.changes + n);
    }

    /// How many changes (writes, resizes, syncs, renames, removals) the disk has taken.
    pub fn changes(&self) -> u64 {
        self.lock().changes
    }

    /// The names of the files on the disk now.
    pub fn file_names(&self) -> Vec<PathBuf> {
        let mut names: Vec<_> = self.lock().names.keys().cloned().collect();
        names.sort();
        names
    }

    fn file(&self, inode: u64) -> SimFile {
        SimFile {
            disk: self.clone(),
            inode,
        }
    }
}

impl Disk {
    fn cut(&mut self) {
        if self.after_cut.is_some() {
            return;
        }
        let mut inodes = HashMap::new();
        let mut names = HashMap::new();
        let mut durable: Vec<_> = self
            .durable_names
            .iter()
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        // In name order, so that the draws below follow the seed alone.
        durable.sort();
        for (path, inode) in durable {
            if let Entry::Vacant(slot) = inodes.entry(inode) {
                let kept = self.kept_after_cut(inode);
                slot.insert(Inode {
                    durable: kept.clone(),
                    current: kept,
                    ..Inode::default()
                });
            }
            names.insert(path, inode);
        }
        let seed = self.rng.random();
        self.after_cut = Some(SimDisk(Arc::new(Mutex::new(Disk {
            inodes,
            durable_names: names.clone(),
            names,
            next_inode: self.next_inode,
            rng: StdRng::seed_from_u64(seed),
            // The same disk: if it lies about a kind of sync, it goes on lying.
            faults: Faults {
                skip: self.faults.skip,
                ..Faults::default()
            },
            changes: 0,
            after_cut: None,
        }))));
    }

    /// What a power cut leaves of `inode`: its durable bytes, then a random number of its
    /// pending changes, the next one of them maybe torn at a sector.
    fn kept_after_cut(&mut self, inode: u64) -> Vec<u8> {
        let Some(file) = self.inodes.get(&inode) else {
            return Vec::new();
        };
        let mut kept = file.durable.clone();
        let pending = file.pending.clone();
        let landed = self.rng.random_range(0..=pending.len());
        for change in &pending[..landed] {
            apply(&mut kept, change);
        }
        if let Some(Change::Write { offset, data }) = pending.get(landed)
            && self.rng.random_bool(0.5)
        {
            // Torn: the sectors of the write up to a random one reached the platter.
            let end = offset + data.len() as u64;
            let first_boundary = (offset / SECTOR + 1) * SECTOR;
            let boundaries: Vec<u64> = (0..)
                .map(|n| first_boundary + n * SECTOR)
                .take_while(|&at| at < end)
                .collect();
            if !boundaries.is_empty() {
                let at = boundaries[self.rng.random_range(0..boundaries.len())];
                let torn = Change::Write {
                    offset: *offset,
                    data: data[..(at - offset) as usize].to_vec(),
                };
                apply(&mut kept, &torn);
            }
        }
        kept
    }

    /// Counts a change; cuts the power if it is the one the faults name. Fails once the power
    /// is cut.
    fn change(&mut self) -> io::Result<()> {
        self.alive()?;
        self.changes += 1;
        if self.faults.cut_at_change == Some(self.changes) {
            self.cut();
            return Err(eio());
        }
        Ok(())
    }

    fn alive(&self) -> io::Result<()> {
        if self.after_cut.is_some() {
            Err(eio())
        } else {
            Ok(())
        }
    }

    /// The bytes the named files' written blocks take.
    fn used(&self) -> u64 {
        let mut named: Vec<u64> = self.names.values().copied().collect();
        named.sort_unstable();
        named.dedup();
        let blocks = |inode: &u64| self.inodes.get(inode).map_or(0, |i| i.written_blocks);
        named.iter().map(blocks).sum::<u64>() * BLOCK
    }

    /// Fails with ENOSPC if a disk of limited capacity has no room for the blocks a write of
    /// `len` bytes at `offset` to `inode` would take.
    fn room_for(&mut self, inode: u64, offset: u64, len: u64) -> io::Result<()> {
        let Some(capacity) = self.faults.capacity else {
            return Ok(());
        };
        let new_blocks = self.inode(inode)?.new_blocks(offset, len);
        if self.used() + new_blocks * BLOCK > capacity {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "no space left on the simulated disk",
            ));
        }
        Ok(())
    }

    fn inode(&mut self, inode: u64) -> io::Result<&mut Inode> {
        self.inodes
            .get_mut(&inode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the file was removed"))
    }

    fn sync(&mut self, inode: u64, kind: Option<SkippedSync>) -> io::Result<()> {
        self.change()?;
        if kind.is_some() && kind == self.faults.skip {
            return Ok(());
        }
        let fails = self.faults.sync_eio > 0.0 && self.rng.random_bool(self.faults.sync_eio);
        let file = self.inode(inode)?;
        if fails {
            // As Linux after a failed fsync: the pages are clean again, so the bytes never land,
            // though reads still see them until the file is opened again after a cut.
            file.pending.clear();
            return Err(eio());
        }
        for change in std::mem::take(&mut file.pending) {
            apply(&mut file.durable, &change);
        }
        Ok(())
    }
}

fn apply(bytes: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Write { offset, data } => {
            let end = *offset as usize + data.len();
            if bytes.len() < end {
                resize(bytes, end);
            }
            bytes[*offset as usize..end].copy_from_slice(data);
        }
        Change::SetLen(len) => resize(bytes, *len as usize),
    }
}

/// Cuts `bytes` to `len`, or grows them with zeros, copied a page at a time: an unoptimised
/// build (the tests') fills much faster so than with `resize`.
fn resize(bytes: &mut Vec<u8>, len: usize) {
    static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
    if len <= bytes.len() {
        bytes.truncate(len);
    }
    while bytes.len() < len {
        let gap = (len - bytes.len()).min(ZEROS.len());
        bytes.extend_from_slice(&ZEROS[..gap]);
    }
}

/// EIO, as a failed sync or a disk without power answers (errno 5 on every Unix; libc is not
/// a dependency of the store for one number).
fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

fn kind_of(path: &Path) -> Option<SkippedSync> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("wal") => Some(SkippedSync::Log),
        Some("redb") => Some(SkippedSync::Database),
        Some("log") => Some(SkippedSync::RaftLog),
        _ => None,
    }
}

/// An open file of a [`SimDisk`].
#[derive(Debug)]
struct SimFile {
    disk: SimDisk,
    inode: u64,
}

impl SimFile {
    fn kind(&self) -> Option<SkippedSync> {
        let disk = self.disk.lock();
        disk.names
            .iter()
            .find(|(_, inode)| **inode == self.inode)
            .and_then(|(path, _)| kind_of(path))
    }

    fn len(&self) -> io::Result<u64> {
        let mut disk = self.disk.lock();
        disk.alive()?;
        Ok(disk.inode(self.inode)?.current.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let mut disk = self.disk.lock();
        disk.alive()?;
        let file = disk.inode(self.inode)?;
        let end = offset as usize + out.len();
        if end > file.current.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the file",
            ));
        }
        out.copy_from_slice(&file.current[offset as usize..end]);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut disk = self.disk.lock();
        disk.change()?;
        if disk.faults.write_enospc > 0.0 {
            let chance = disk.faults.write_enospc;
            if disk.rng.random_bool(chance) {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    "no space left on the simulated disk",
                ));
            }
        }
        disk.room_for(self.inode, offset, data.len() as u64)?;
        let file = disk.inode(self.inode)?;
        file.take_blocks(offset, data.len() as u64);
        let change = Change::Write {
            offset,
            data: data.to_vec(),
        };
        apply(&mut file.current, &change);
        file.pending.push(change);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut disk = self.disk.lock();
        disk.change()?;
        let file = disk.inode(self.inode)?;
        file.cut_blocks(len);
        let change = Change::SetLen(len);
        apply(&mut file.current, &change);
        file.pending.push(change);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let kind = self.kind();
        self.disk.lock().sync(self.inode, kind)
    }
}

impl FileHandle for SimFile {
    fn len(&self) -> io::Result<u64> {
        SimFile::len(self)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        SimFile::read(self, offset, out)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        SimFile::write(self, offset, data)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        SimFile::set_len(self, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync()
    }
}

impl StorageBackend for SimFile {
    fn len(&self) -> io::Result<u64> {
        SimFile::len(self)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        SimFile::read(self, offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        SimFile::set_len(self, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        SimFile::write(self, offset, data)
    }
}

impl SimDisk {
    fn open_file(&self, path: &Path, mode: OpenMode) -> io::Result<SimFile> {
        let mut disk = self.lock();
        disk.alive()?;
        let inode = match (disk.names.get(path), mode) {
            (Some(&inode), _) => inode,
            (None, OpenMode::Create) => {
                disk.change()?;
                let inode = disk.next_inode;
                disk.next_inode += 1;
                disk.inodes.insert(inode, Inode::default());
                disk.names.insert(path.to_path_buf(), inode);
                inode
            }
            (None, _) => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} is not on the simulated disk", path.display()),
                ));
            }
        };
        drop(disk);
        Ok(self.file(inode))
    }
}

impl Files for SimDisk {
    fn open_database(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageBackend>> {
        Ok(Box::new(self.open_file(path, mode)?))
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn FileHandle>> {
        Ok(Box::new(self.open_file(path, mode)?))
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        self.open_file(path, OpenMode::Read)?.len()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        disk.change()?;
        let inode = disk.names.remove(from).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is missing", from.display()),
            )
        })?;
        disk.names.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        disk.change()?;
        disk.names.remove(path).map(drop).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is missing", path.display()),
            )
        })
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        disk.change()?;
        if disk.faults.skip == Some(SkippedSync::Directory) {
            return Ok(());
        }
        let in_dir = |path: &Path| path.parent() == Some(dir);
        disk.durable_names.retain(|path, _| !in_dir(path));
        let now: Vec<_> = disk
            .names
            .iter()
            .filter(|(path, _)| in_dir(path))
            .map(|(path, inode)| (path.clone(), *inode))
            .collect();
        disk.durable_names.extend(now);
        Ok(())
    }

    fn available(&self, _dir: &Path) -> io::Result<u64> {
        let disk = self.lock();
        disk.alive()?;
        Ok(match disk.faults.capacity {
            Some(capacity) => capacity.saturating_sub(disk.used()),
            None => u64::MAX / 2,
        })
    }

    /// Directories are implicit on the simulated disk: a file's name is its whole path.
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        self.lock().alive()
    }
}
