//! A full disk, on a simulated disk of a fixed capacity: once an append has filled it and
//! something else has taken every byte given back, the store still collects expired
//! recordings, with the half of its reserve it kept for that.
use std::path::{Path, PathBuf};

use super::*;
use crate::files::{Files, OpenMode};
use crate::sim_disk::{Faults, SimDisk};

/// The simulated disk's size: the database, its log, the 4 MiB reserve and the filler.
const CAPACITY: u64 = 48 * 1024 * 1024;
/// Recordings that expire, and the 64 KiB chunks of each.
const EXPIRING: usize = 4;
const CHUNKS: usize = 32;
const CHUNK: usize = 64 * 1024;
/// The chunks that fill the disk: small ones leave redb no free page in its file to delete
/// with (64 KiB ones happen to leave a few).
const FLOOD_CHUNK: usize = 5_000;
const RESERVE_BYTES: u64 = 4 * 1024 * 1024;

fn sim_path(name: &str) -> PathBuf {
    Path::new("/sim/data").join(name)
}

/// Writes a file of `name` until the disk refuses a block even of 4 KiB.
fn take_the_rest(disk: &SimDisk, name: &str) {
    let file = disk.open(&sim_path(name), OpenMode::Create).unwrap();
    let mut at = file.len().unwrap();
    for block in [vec![0u8; 1 << 20], vec![0u8; 64 << 10], vec![0u8; 4 << 10]] {
        while file.write(at, &block).is_ok() {
            at += block.len() as u64;
        }
    }
    assert!(disk.available(Path::new("/sim/data")).unwrap() < 4096);
}

#[tokio::test]
async fn a_full_disk_collects_expired_recordings_when_every_byte_given_back_is_taken() {
    let clock = ManualClock::new(T0);
    let faults = Faults {
        capacity: Some(CAPACITY),
        ..Faults::default()
    };
    let disk = SimDisk::new(7, faults);
    let options = StoreOptions {
        files: Arc::new(disk.clone()),
        commit_interval: Duration::ZERO,
        ..options(&clock)
    };
    let store = TestStore::new(
        Store::open(&sim_path("tapedeck.redb"), options).unwrap(),
        10,
    );
    let chunk = "e".repeat(CHUNK);
    for i in 0..EXPIRING {
        let mut producer = store.start(&id(&format!("expiring-{i}"))).await.unwrap();
        record(&mut producer, &vec![chunk.as_str(); CHUNKS]).await;
        producer.finish(Status::Completed, None).await.unwrap();
    }
    store.checkpoint().await.unwrap();

    // A recording appends until the disk is full.
    let mut flood = store.start(&id("flood")).await.unwrap();
    let flood_chunk = "f".repeat(FLOOD_CHUNK);
    let full = loop {
        let appended = match flood.append(&flood_chunk).await {
            Ok(committed) => acked(committed).await,
            Err(err) => Err(err),
        };
        if let Err(err) = appended {
            break err;
        }
    };
    assert!(matches!(full.root(), Error::DiskFull { .. }), "{full}");
    let reserve = sim_path("tapedeck.reserve");
    assert_eq!(disk.len(&reserve).unwrap(), RESERVE_BYTES / 2);
    // Whatever filled the disk takes the half the store gave back, and every byte besides.
    take_the_rest(&disk, "filler");

    clock.advance(ms(RETENTION) + 1);
    let report = store.collect_expired().await.unwrap();
    // The flood's recording too: it ended `failed` when the disk filled.
    assert_eq!(report.recordings_deleted, EXPIRING as u64 + 1);
    let names = (0..EXPIRING).map(|i| format!("expiring-{i}"));
    for name in names.chain(["flood".to_string()]) {
        assert!(store.meta(id(&name).key()).await.unwrap().is_none());
    }
    // The file gave its room back to the disk: the reserve is whole, recordings are taken.
    let mut after = store.start(&id("after")).await.unwrap();
    record(&mut after, &["room again"]).await;
    assert_eq!(disk.len(&reserve).unwrap(), RESERVE_BYTES);
}
