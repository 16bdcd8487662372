//! The on-disk formats of the Raft log: entry frames `[len u32][crc32 u32][bincode-serde of the
//! entry]` (little endian) in one append-only file, and small files (the vote, the last purged
//! log id) replaced atomically. Every file is reached through the store's [`Files`] seam, so
//! the simulated disk can cut a node's power under its log too.
use std::io::{self, BufReader, Read};
use std::path::Path;

use tapedeck_store::{FileHandle, Files, OpenMode};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cluster::types::TypeConfig;

/// An entry of the log.
pub(crate) type Entry = openraft::Entry<TypeConfig>;

/// A log id of this cluster.
pub(crate) type LogId = openraft::LogId<u64>;

/// The bytes a frame's header takes: its length and its CRC.
pub(crate) const HEADER: u64 = 8;

/// Appends the frame of `entry` to `out`; returns the frame's length in bytes.
pub(crate) fn encode(entry: &Entry, out: &mut Vec<u8>) -> io::Result<u32> {
    let payload = bincode::serde::encode_to_vec(entry, bincode::config::standard())
        .map_err(io::Error::other)?;
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::other(format!("a log entry of {} bytes", payload.len())))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(len + HEADER as u32)
}

/// Reads and checks the frame of `len` bytes at `offset` of `file`.
pub(crate) fn read_frame(file: &dyn FileHandle, offset: u64, len: u32) -> io::Result<Entry> {
    let mut buf = vec![0; len as usize];
    file.read(offset, &mut buf)?;
    let (header, payload) = buf.split_at(HEADER as usize);
    // The slices are 4 bytes long by construction of `header`.
    let stored_len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if u64::from(stored_len) + HEADER != u64::from(len) || crc32fast::hash(payload) != crc {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the log frame at offset {offset} does not check"),
        ));
    }
    decode(payload)
}

fn decode(payload: &[u8]) -> io::Result<Entry> {
    bincode::serde::decode_from_slice(payload, bincode::config::standard())
        .map(|(entry, _)| entry)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// One frame found by [`scan`].
pub(crate) struct Found {
    /// The entry's log id.
    pub(crate) log_id: LogId,
    /// Where its frame starts in the file.
    pub(crate) offset: u64,
    /// Its frame's length, header included.
    pub(crate) len: u32,
}

/// Reads every frame of the entries file at `path`, calling `found` for each, and cuts off a
/// torn tail (a frame a crash left half written: short, failing its CRC at the end of the file,
/// or followed only by zeros). Returns the length of the valid part.
///
/// Fails, naming the file, if a frame before the tail is damaged.
pub(crate) fn scan(
    files: &dyn Files,
    path: &Path,
    mut found: impl FnMut(Found) -> io::Result<()>,
) -> io::Result<u64> {
    let file = files.open(path, OpenMode::Write)?;
    let size = file.len()?;
    let mut reader = BufReader::with_capacity(
        1 << 20,
        ReadFrom {
            file: &*file,
            offset: 0,
            end: size,
        },
    );
    let mut offset = 0u64;
    let mut header = [0u8; HEADER as usize];
    let mut payload = Vec::new();
    let damaged = loop {
        if offset == size {
            break None;
        }
        if size - offset < HEADER {
            break Some("a short frame header");
        }
        reader.read_exact(&mut header)?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if len == 0 {
            break Some("an empty frame");
        }
        if size - offset - HEADER < u64::from(len) {
            break Some("a short frame");
        }
        payload.resize(len as usize, 0);
        reader.read_exact(&mut payload)?;
        if crc32fast::hash(&payload) != crc {
            if offset + HEADER + u64::from(len) == size {
                break Some("a failing CRC");
            }
            return Err(corrupt(path, offset, "a failing CRC"));
        }
        let entry = decode(&payload).map_err(|_| corrupt(path, offset, "an undecodable entry"))?;
        found(Found {
            log_id: entry.log_id,
            offset,
            len: len + HEADER as u32,
        })?;
        offset += HEADER + u64::from(len);
    };
    if let Some(what) = damaged {
        // Past the last good frame: a tail a crash cut short, or what a crash left zero-filled
        // after extending the file. Anything else is damage we must not hide.
        if !tail_is_torn(&*file, offset, size)? {
            return Err(corrupt(path, offset, what));
        }
        tracing::warn!(
            file = %path.display(),
            offset,
            bytes = size - offset,
            "cutting off the Raft log's torn tail ({what})"
        );
        file.set_len(offset)?;
        file.sync_data()?;
    }
    Ok(offset)
}

/// Whether the bytes from `offset` to `size` are one frame cut short by a crash: either the
/// frame runs to the end of the file (its length field reaches past it or exactly to it), or
/// everything after its header's start is zeros.
fn tail_is_torn(file: &dyn FileHandle, offset: u64, size: u64) -> io::Result<bool> {
    let mut rest = vec![0u8; (size - offset).min(1 << 24) as usize];
    if (rest.len() as u64) < size - offset {
        return Ok(false);
    }
    file.read(offset, &mut rest)?;
    if rest.iter().all(|&b| b == 0) {
        return Ok(true);
    }
    if rest.len() < HEADER as usize {
        return Ok(true);
    }
    let len = u64::from(u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]));
    Ok(len != 0 && HEADER + len >= size - offset)
}

/// A file read in order from `offset` to `end`, for a [`BufReader`].
struct ReadFrom<'a> {
    file: &'a dyn FileHandle,
    offset: u64,
    end: u64,
}

impl Read for ReadFrom<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.end - self.offset).min(buf.len() as u64) as usize;
        self.file.read(self.offset, &mut buf[..n])?;
        self.offset += n as u64;
        Ok(n)
    }
}

fn corrupt(path: &Path, offset: u64, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the Raft log {} is damaged at offset {offset} ({what}) before its last frame",
            path.display()
        ),
    )
}

/// Reads the small file at `path` written by [`write_atomic`]; `None` if it does not exist.
///
/// Fails, naming the file, if it cannot be read or decoded.
pub(crate) fn read_small<T: DeserializeOwned>(
    files: &dyn Files,
    path: &Path,
) -> io::Result<Option<T>> {
    let file = match files.open(path, OpenMode::Read) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = vec![0; file.len()? as usize];
    file.read(0, &mut bytes)?;
    let damaged = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is damaged", path.display()),
        )
    };
    if bytes.len() < 4 {
        return Err(damaged());
    }
    let (crc, payload) = bytes.split_at(4);
    if crc32fast::hash(payload) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
        return Err(damaged());
    }
    bincode::serde::decode_from_slice(payload, bincode::config::standard())
        .map(|(value, _)| Some(value))
        .map_err(|_| damaged())
}

/// Replaces the file at `path` with `value` durably: writes a temporary file, syncs it, renames
/// it over `path`, syncs the directory. A crash leaves the old value or the new one.
pub(crate) fn write_atomic<T: Serialize>(
    files: &dyn Files,
    path: &Path,
    value: &T,
) -> io::Result<()> {
    let payload = bincode::serde::encode_to_vec(value, bincode::config::standard())
        .map_err(io::Error::other)?;
    let mut bytes = crc32fast::hash(&payload).to_le_bytes().to_vec();
    bytes.extend_from_slice(&payload);
    let tmp = path.with_extension("tmp");
    let file = create_empty(files, &tmp)?;
    file.write(0, &bytes)?;
    file.sync_data()?;
    files.rename(&tmp, path)?;
    sync_dir(files, path)
}

/// Opens the file at `path`, created or cut to nothing.
pub(crate) fn create_empty(files: &dyn Files, path: &Path) -> io::Result<Box<dyn FileHandle>> {
    let file = files.open(path, OpenMode::Create)?;
    file.set_len(0)?;
    Ok(file)
}

/// Syncs the directory holding `path`, making a rename or a creation in it durable.
pub(crate) fn sync_dir(files: &dyn Files, path: &Path) -> io::Result<()> {
    files.sync_dir(path.parent().unwrap_or(Path::new(".")))
}
