//! Model-based test of the recorder core (`Recorder` over a `Store` on a real redb file, with
//! a manual clock): random sequences of start / append / complete / cancel / interrupt /
//! vanish / supersede / resume / delete / subscribe / sweep / crash-and-reopen, and after every
//! step each conversation's replay (from several offsets, or why there is none: unknown,
//! expired, deleted), what `get` says of it, every live subscriber, and the live check are
//! compared with a plain in-memory model of what they must return.
//!
//! Each case runs with no producer grace period (a producer that goes away interrupts its
//! recording at once) or a long one (the recording stays live, detached, for a resume), with
//! the supersede or the reject conflict policy, and on a real file or on the simulated disk
//! (`store::sim_disk`), where each crash is a power cut: the disk keeps what was synced and a
//! random part of the rest. Everything the model holds was shown to a reader, so committed, so
//! a power cut loses none of it.
//!
//! `cargo test` runs [`DEFAULT_CASES`] cases; `PROPTEST_CASES=2000` runs more.
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tapedeck::Error;
use tapedeck::clock::{Clock, ManualClock};
use tapedeck::error::Absence;
use tapedeck::id::ConversationId;
use tapedeck::recorder::{
    Found, Limits, LivePolicy, OnConflict, Producer, Recorder, Replay, StartOptions, Status,
    Stopped,
};
use tapedeck::store::sim_disk::{Faults, SimDisk};
use tapedeck::store::{Gone, Store, StoreOptions};

/// Cases run by `cargo test`.
const DEFAULT_CASES: u32 = 64;
/// Conversations the operations pick from: few, so that they collide.
const CONVERSATIONS: usize = 3;
const RETENTION_MS: u64 = 1_000;
const TOMBSTONE_MS: u64 = 1_500;
/// A grace period no case outlives: a detached recording stays live until resumed.
const LONG_GRACE: Duration = Duration::from_secs(3600);
const IDLE_MS: u64 = 2_500;
const LIMITS: Limits = Limits {
    max_chunk_bytes: 24,
    max_recording_bytes: 120,
    max_retention: Duration::from_secs(3600),
};
/// How a case's server treats producers that go away and new recordings of live ones.
#[derive(Debug, Clone, Copy)]
struct Setup {
    long_grace: bool,
    reject: bool,
    /// On the simulated disk, whose crashes are power cuts (seeded by the case).
    power_cuts: Option<u64>,
}

impl Setup {
    fn policy(self) -> LivePolicy {
        LivePolicy {
            max_live: 100,
            grace: if self.long_grace {
                LONG_GRACE
            } else {
                Duration::ZERO
            },
            on_conflict: if self.reject {
                OnConflict::Reject
            } else {
                OnConflict::Supersede
            },
        }
    }
}
/// How long any single wait may take before the case fails.
const WAIT: Duration = Duration::from_secs(5);

/// How a message names its conversation.
#[derive(Debug, Clone, Copy)]
enum IdForm {
    /// Empty: "same as the first message".
    Empty,
    /// The text the stream started with.
    Same,
    /// The same conversation as hyphenated UUID text.
    UuidText,
    /// Another conversation: refused.
    Other,
}

#[derive(Debug, Clone)]
enum Op {
    /// Starts recording (superseding a live recording); `binary` sends the 16-byte form.
    Start {
        conv: usize,
        binary: bool,
    },
    Append {
        conv: usize,
        text: String,
        id: IdForm,
    },
    Complete {
        conv: usize,
    },
    Cancel {
        conv: usize,
    },
    /// The producer reports a failure of its stream.
    Interrupt {
        conv: usize,
    },
    /// The producer's handle is dropped without a word.
    Vanish {
        conv: usize,
    },
    /// Resumes the conversation's recording from `back` characters before its end (past the
    /// end when `back` is 255), resending what lies after that offset.
    Resume {
        conv: usize,
        back: u8,
    },
    /// Deletes the conversation's recording.
    Delete {
        conv: usize,
    },
    /// Opens a replay that follows the recording live from `offset_pick`'s boundary.
    Subscribe {
        conv: usize,
        offset_pick: u8,
    },
    /// Advances the clock by `ms`, then runs one sweep (idle timeout, then retention).
    Sweep {
        ms: u64,
    },
    /// Stops the commit pipeline, drops every handle, reopens the file (`drop_only`: drops
    /// every handle without stopping anything first, as a process exit would).
    Crash {
        drop_only: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let conv = 0..CONVERSATIONS;
    let text = prop_oneof![
        4 => "[a-z ]{0,6}",
        2 => "[é日🎉x]{1,4}",
        1 => "[a-z]{20,30}", // sometimes over the 24-byte chunk limit
    ];
    let id = prop_oneof![
        6 => Just(IdForm::Empty),
        1 => Just(IdForm::Same),
        1 => Just(IdForm::UuidText),
        1 => Just(IdForm::Other),
    ];
    prop_oneof![
        4 => (conv.clone(), any::<bool>()).prop_map(|(conv, binary)| Op::Start { conv, binary }),
        10 => (conv.clone(), text, id).prop_map(|(conv, text, id)| Op::Append { conv, text, id }),
        2 => conv.clone().prop_map(|conv| Op::Complete { conv }),
        2 => conv.clone().prop_map(|conv| Op::Cancel { conv }),
        1 => conv.clone().prop_map(|conv| Op::Interrupt { conv }),
        1 => conv.clone().prop_map(|conv| Op::Vanish { conv }),
        3 => (conv.clone(), prop_oneof![4 => 0u8..4, 1 => Just(255u8)])
            .prop_map(|(conv, back)| Op::Resume { conv, back }),
        1 => conv.clone().prop_map(|conv| Op::Delete { conv }),
        2 => (conv, any::<u8>()).prop_map(|(conv, offset_pick)| Op::Subscribe { conv, offset_pick }),
        2 => (0u64..1_800).prop_map(|ms| Op::Sweep { ms }),
        1 => any::<bool>().prop_map(|drop_only| Op::Crash { drop_only }),
    ]
}

// ---------------------------------------------------------------------------------------------
// The model

#[derive(Debug, Clone)]
struct ModelRecording {
    /// Identifies this recording among all of the conversation's recordings.
    serial: u64,
    text: String,
    status: Status,
    last_activity_ms: u64,
    finished_ms: Option<u64>,
    /// A producer is attached (meaningful while live).
    attached: bool,
}

#[derive(Debug, Default)]
struct Model {
    now_ms: u64,
    serials: u64,
    recordings: [Option<ModelRecording>; CONVERSATIONS],
    /// What is left of a collected or deleted recording, and when it is forgotten.
    tombstones: [Option<(Gone, u64)>; CONVERSATIONS],
    /// How live recordings that went away without ending ended for their subscribers
    /// (superseded or deleted), by serial.
    vanished: std::collections::HashMap<u64, Status>,
}

impl Model {
    fn live(&self, conv: usize) -> Option<&ModelRecording> {
        self.recordings[conv]
            .as_ref()
            .filter(|r| r.status == Status::Recording)
    }

    fn finish(&mut self, conv: usize, status: Status) {
        let now = self.now_ms;
        if let Some(recording) = self.recordings[conv]
            .as_mut()
            .filter(|r| r.status == Status::Recording)
        {
            recording.status = status;
            recording.finished_ms = Some(now);
        }
    }

    fn start(&mut self, conv: usize) -> u64 {
        if let Some(old) = self.live(conv) {
            self.vanished.insert(old.serial, Status::Superseded);
        }
        self.serials += 1;
        self.recordings[conv] = Some(ModelRecording {
            serial: self.serials,
            text: String::new(),
            status: Status::Recording,
            last_activity_ms: self.now_ms,
            finished_ms: None,
            attached: true,
        });
        self.tombstones[conv] = None;
        self.serials
    }

    fn delete(&mut self, conv: usize) -> bool {
        let Some(old) = self.recordings[conv].take() else {
            return false;
        };
        if old.status == Status::Recording {
            self.vanished.insert(old.serial, Status::Deleted);
        }
        self.tombstones[conv] = Some((Gone::Deleted, self.now_ms + TOMBSTONE_MS));
        true
    }

    fn sweep(&mut self) {
        let now = self.now_ms;
        for conv in 0..CONVERSATIONS {
            if self
                .live(conv)
                .is_some_and(|r| now - r.last_activity_ms >= IDLE_MS)
            {
                self.finish(conv, Status::Interrupted);
            }
        }
        for conv in 0..CONVERSATIONS {
            if self.recordings[conv]
                .as_ref()
                .and_then(|r| r.finished_ms)
                .is_some_and(|finished| finished + RETENTION_MS <= now)
            {
                self.recordings[conv] = None;
                self.tombstones[conv] = Some((Gone::Expired, now + TOMBSTONE_MS));
            }
        }
        for tombstone in &mut self.tombstones {
            if tombstone.is_some_and(|(_, forgotten)| forgotten <= now) {
                *tombstone = None;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The real thing

/// A replay opened by `Subscribe`, and what it has returned so far.
struct Subscriber {
    conv: usize,
    serial: u64,
    replay: Replay,
    /// Offset it started from.
    from: usize,
    seen: String,
}

struct Real {
    path: std::path::PathBuf,
    /// The simulated disk the store is on, if the case cuts the power.
    disk: Option<SimDisk>,
    setup: Setup,
    clock: ManualClock,
    store: Store,
    recorder: Recorder,
    producers: [Option<Producer>; CONVERSATIONS],
    subscribers: Vec<Subscriber>,
}

fn name(conv: usize) -> String {
    format!("conversation-{conv}")
}

fn id(conv: usize) -> ConversationId {
    ConversationId::parse(name(conv).as_bytes()).unwrap()
}

fn open_store(
    path: &std::path::Path,
    clock: &ManualClock,
    disk: Option<&SimDisk>,
) -> tapedeck::Result<Store> {
    let mut options = StoreOptions {
        retention: Duration::from_millis(RETENTION_MS),
        tombstone_retention: Duration::from_millis(TOMBSTONE_MS),
        clock: Arc::new(clock.clone()),
        // Small, so that the model's runs go through many checkpoints, and through pages
        // redb no longer holds in memory.
        checkpoint_bytes: 16 * 1024,
        cache_bytes: 256 * 1024,
        ..StoreOptions::default()
    };
    if let Some(disk) = disk {
        options.files = Arc::new(disk.clone());
    }
    Store::open(path, options)
}

impl Real {
    fn open(path: std::path::PathBuf, setup: Setup, clock: ManualClock) -> Real {
        let disk = setup
            .power_cuts
            .map(|seed| SimDisk::new(seed, Faults::default()));
        let store = open_store(&path, &clock, disk.as_ref()).unwrap();
        Real::on(path, disk, setup, clock, store)
    }

    /// A fresh recorder over `store`, opened on `path`; no producers or subscribers yet.
    fn on(
        path: std::path::PathBuf,
        disk: Option<SimDisk>,
        setup: Setup,
        clock: ManualClock,
        store: Store,
    ) -> Real {
        let recorder = Recorder::new(store.clone(), LIMITS, setup.policy());
        Real {
            path,
            disk,
            setup,
            clock,
            store,
            recorder,
            producers: Default::default(),
            subscribers: Vec::new(),
        }
    }

    /// Drops every handle and reopens the file; with `stop_writer`, the commit pipeline is
    /// stopped first, so recordings still live stay `recording` in the file for recovery. On
    /// the simulated disk the power is cut first: the store is opened again on what the disk
    /// kept, while the old one fails on the dead disk and is closed.
    async fn crash(self, stop_writer: bool) -> Real {
        let Real {
            path,
            disk,
            setup,
            clock,
            store,
            recorder,
            producers,
            subscribers,
        } = self;
        let disk = disk.map(|disk| disk.power_cut());
        if stop_writer || disk.is_some() {
            within("the store to close", store.clone().close()).await;
        }
        drop((subscribers, producers, recorder, store));
        // Without a stopped pipeline the writer thread lets go of the file once it has
        // committed what the dropped producers queued; wait for that.
        let store = tokio::time::timeout(WAIT, async {
            loop {
                match open_store(&path, &clock, disk.as_ref()) {
                    Ok(store) => return store,
                    Err(Error::DatabaseInUse { .. }) => tokio::task::yield_now().await,
                    Err(err) => panic!("reopen failed: {err}"),
                }
            }
        })
        .await
        .expect("the file was not released");
        Real::on(path, disk, setup, clock, store)
    }

    /// Waits until no recording is live (those adopted after a reopen with no grace period
    /// are interrupted in the background).
    async fn settle(&self) {
        within("adopted recordings to end", async {
            while self.recorder.live_count() > 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
    }
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {WAIT:?}"))
}

/// Character boundaries of `text` to resume from, picked by `pick`.
fn boundary(text: &str, pick: u8) -> usize {
    let boundaries: Vec<usize> = (0..=text.len())
        .filter(|&i| text.is_char_boundary(i))
        .collect();
    boundaries[pick as usize % boundaries.len()]
}

// ---------------------------------------------------------------------------------------------
// Applying an op to both

async fn apply(real: &mut Real, model: &mut Model, op: &Op) {
    match op.clone() {
        Op::Start { conv, binary } => {
            let wire = if binary {
                id(conv).uuid().as_bytes().to_vec()
            } else {
                name(conv).into_bytes()
            };
            let started = within(
                "start",
                real.recorder.start(
                    ConversationId::parse(&wire).unwrap(),
                    StartOptions::default(),
                ),
            )
            .await;
            if real.setup.reject && model.live(conv).is_some() {
                assert!(
                    matches!(started, Err(Error::AlreadyRecording { .. })),
                    "reject policy: {:?}",
                    started.err()
                );
                return;
            }
            // A producer still attached to a recording it no longer owns just goes away.
            real.producers[conv] = Some(started.unwrap());
            model.start(conv);
        }
        Op::Append {
            conv,
            text,
            id: form,
        } => {
            let Some(producer) = real.producers[conv].as_mut() else {
                return;
            };
            let wire = match form {
                IdForm::Empty => Vec::new(),
                IdForm::Same => producer.id().original().to_vec(),
                IdForm::UuidText => id(conv).uuid().hyphenated().to_string().into_bytes(),
                IdForm::Other => name(conv + 1).into_bytes(),
            };
            let accepted = within("append", producer.accept(&wire, &text)).await;
            let live = model.live(conv).is_some();
            let len = model.recordings[conv].as_ref().map_or(0, |r| r.text.len());
            match (accepted, form) {
                (Err(Error::ConversationIdChanged), IdForm::Other) => {}
                (Err(Error::ChunkTooLarge { .. }), _) => {
                    assert!(text.len() > LIMITS.max_chunk_bytes)
                }
                (Err(Error::RecordingTooLarge { .. }), _) => {
                    assert!(len + text.len() > LIMITS.max_recording_bytes as usize || !live)
                }
                (Err(err), _) => panic!("append refused: {err}"),
                (Ok(None), _) => assert!(text.is_empty()),
                (Ok(Some(committed)), _) => {
                    assert!(!matches!(form, IdForm::Other), "a changed id was accepted");
                    let outcome = within("commit", committed).await.unwrap();
                    if live {
                        let end = outcome.unwrap_or_else(|e| panic!("append failed: {e}"));
                        let recording = model.recordings[conv].as_mut().unwrap();
                        recording.text.push_str(&text);
                        recording.last_activity_ms = model.now_ms;
                        assert_eq!(end as usize, recording.text.len(), "acknowledged length");
                    } else {
                        // The recording ended (cancelled, superseded, idle): refused.
                        assert!(outcome.is_err(), "append to an ended recording succeeded");
                    }
                }
            }
        }
        Op::Complete { conv } => {
            let Some(producer) = real.producers[conv].take() else {
                return;
            };
            // The producer of the conversation's latest recording: it owns it while it is live.
            let owns = model.live(conv).is_some();
            let mut producer = producer;
            let progress = within("complete", producer.complete()).await.unwrap();
            if owns {
                assert_eq!(progress.status, Status::Completed);
                model.finish(conv, Status::Completed);
            } else {
                assert_ne!(progress.status, Status::Completed);
            }
        }
        Op::Cancel { conv } => {
            let accepted = within("cancel", real.recorder.cancel(&id(conv)))
                .await
                .unwrap();
            let expected = match &model.recordings[conv] {
                Some(r) => matches!(r.status, Status::Recording | Status::Cancelled),
                None => false,
            };
            assert_eq!(accepted, expected, "cancel accepted");
            model.finish(conv, Status::Cancelled);
        }
        Op::Interrupt { conv } => {
            let Some(producer) = real.producers[conv].take() else {
                return;
            };
            let owns = model.live(conv).is_some();
            let mut progress = producer.subscribe();
            producer.detach("stream failed".into());
            gone_away(real, model, conv, owns, &mut progress).await;
        }
        Op::Vanish { conv } => {
            let Some(producer) = real.producers[conv].take() else {
                return;
            };
            let owns = model.live(conv).is_some();
            let mut progress = producer.subscribe();
            drop(producer);
            gone_away(real, model, conv, owns, &mut progress).await;
        }
        Op::Subscribe { conv, offset_pick } => {
            let Some(recording) = model.recordings[conv].clone() else {
                return;
            };
            let from = boundary(&recording.text, offset_pick);
            let replay = within("subscribe", real.recorder.replay(&id(conv), from as u64))
                .await
                .unwrap();
            real.subscribers.push(Subscriber {
                conv,
                serial: recording.serial,
                replay,
                from,
                seen: String::new(),
            });
        }
        Op::Sweep { ms } => {
            real.clock.advance(ms);
            model.now_ms += ms;
            within(
                "sweep",
                real.recorder.sweep_once(Duration::from_millis(IDLE_MS)),
            )
            .await
            .unwrap();
            model.sweep();
        }
        Op::Resume { conv, back } => resume(real, model, conv, back).await,
        Op::Delete { conv } => {
            let existed = within("delete", real.recorder.delete(&id(conv)))
                .await
                .unwrap();
            assert_eq!(existed, model.delete(conv), "delete: existed");
        }
        Op::Crash { .. } => unreachable!("handled by the caller"),
    }
}

/// After the producer of `conv` let go: with no grace period its recording (if it owned the
/// live one) ends `interrupted` at once, in the background; with a long one it stays live,
/// detached.
async fn gone_away(
    real: &Real,
    model: &mut Model,
    conv: usize,
    owns: bool,
    progress: &mut tokio::sync::watch::Receiver<tapedeck::recorder::Progress>,
) {
    if !real.setup.long_grace {
        within("interrupt", progress.wait_for(|p| !p.status.is_live()))
            .await
            .unwrap();
        if owns {
            model.finish(conv, Status::Interrupted);
        }
    } else if owns {
        model.recordings[conv].as_mut().unwrap().attached = false;
    }
}

/// Resumes `conv`'s recording `back` characters before its end (255: one byte past it),
/// resends what lies after the offset (all of it already committed, so all skipped), and
/// checks that the producer it took over from, if any, is fenced.
async fn resume(real: &mut Real, model: &mut Model, conv: usize, back: u8) {
    let (text, status) = match &model.recordings[conv] {
        Some(r) => (r.text.clone(), Some(r.status)),
        None => (String::new(), None),
    };
    let boundaries: Vec<usize> = (0..=text.len())
        .filter(|&i| text.is_char_boundary(i))
        .collect();
    let offset = if back == 255 {
        text.len() + 1
    } else {
        boundaries[boundaries.len().saturating_sub(1 + back as usize)]
    };
    let options = StartOptions {
        resume_from: Some(offset as u64),
        retention: None,
    };
    let resumed = within("resume", real.recorder.start(id(conv), options)).await;
    let mut producer = match (status, back == 255) {
        // A recording that has ended for good says so, whatever the offset.
        (Some(Status::Completed | Status::Cancelled), _) => {
            assert!(
                matches!(resumed, Err(Error::AlreadyEnded { .. })),
                "resume of an ended recording: {:?}",
                resumed.err()
            );
            return;
        }
        (_, true) => {
            assert!(
                matches!(&resumed, Err(Error::ResumePastEnd { committed, .. }) if *committed as usize == text.len()),
                "resume past the end: {:?}",
                resumed.err()
            );
            return;
        }
        _ => resumed.unwrap_or_else(|e| panic!("resume from {offset}: {e}")),
    };
    match model.recordings[conv].as_mut() {
        // Nothing recorded (or only a tombstone): a resume from 0 is a start.
        None => {
            model.start(conv);
        }
        Some(recording) => {
            if recording.status != Status::Recording {
                // Reopened: live again, its idle clock restarted.
                recording.last_activity_ms = model.now_ms;
            }
            recording.status = Status::Recording;
            recording.finished_ms = None;
            recording.attached = true;
        }
    }
    // Everything resent is already committed: skipped, nothing appended.
    let resent = &text[offset..];
    if !resent.is_empty() {
        let cut = resent.floor_char_boundary(resent.len() / 2);
        for piece in [&resent[..cut], &resent[cut..]] {
            let accepted = within("resend", producer.accept(b"", piece)).await;
            assert!(matches!(accepted, Ok(None)), "a resent piece was stored");
        }
    }
    assert_eq!(producer.appended_bytes() as usize, text.len());
    if let Some(mut old) = real.producers[conv].replace(producer)
        && status == Some(Status::Recording)
    {
        // The producer it took over from is told, and stores nothing more.
        let stopped = within("fenced", old.stopped()).await;
        assert_eq!(stopped, Stopped::Fenced);
        let late = within("fenced append", old.accept(b"", "late")).await;
        if let Ok(Some(committed)) = late {
            let outcome = within("fenced commit", committed).await.unwrap();
            assert!(matches!(outcome, Err(Error::Fenced)), "{outcome:?}");
        }
        assert!(matches!(
            within("fenced complete", old.complete()).await,
            Err(Error::Fenced)
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Checking the real thing against the model

async fn check(real: &mut Real, model: &Model, step: usize) {
    for conv in 0..CONVERSATIONS {
        check_replays(real, model, conv, step).await;
    }
    check_subscribers(real, model, step).await;
    let ids: Vec<Vec<u8>> = (0..CONVERSATIONS).map(|c| name(c).into_bytes()).collect();
    let live = real
        .recorder
        .check_live(&ids, |_| true, &Default::default())
        .unwrap();
    let expected: Vec<Vec<u8>> = (0..CONVERSATIONS)
        .filter(|&c| model.live(c).is_some())
        .map(|c| name(c).into_bytes())
        .collect();
    assert_eq!(live, expected, "step {step}: live check");
}

async fn check_replays(real: &Real, model: &Model, conv: usize, step: usize) {
    let what = format!("step {step}: replay of conversation {conv}");
    let found = within(&what, real.recorder.get(&id(conv))).await.unwrap();
    let Some(recording) = &model.recordings[conv] else {
        let err = real.recorder.replay(&id(conv), 0).await.err();
        let why = match err {
            Some(Error::RecordingNotFound { why, .. }) => why,
            err => panic!("{what}: expected NOT_FOUND, got {err:?}"),
        };
        match model.tombstones[conv] {
            None => {
                assert_eq!(why, Absence::Unknown, "{what}");
                assert_eq!(found, Found::Unknown, "{what}");
            }
            Some((gone, _)) => {
                let expected = matches!(
                    (gone, why),
                    (Gone::Expired, Absence::Expired { .. })
                        | (Gone::Deleted, Absence::Deleted { .. })
                );
                assert!(expected, "{what}: {gone:?} but {why:?}");
                assert!(
                    matches!(&found, Found::Gone(t) if t.gone == gone),
                    "{what}: {found:?}"
                );
            }
        }
        return;
    };
    let Found::Recording(info) = &found else {
        panic!("{what}: get says {found:?}");
    };
    assert_eq!(info.meta.status, recording.status, "{what}: get status");
    assert_eq!(
        info.meta.byte_len as usize,
        recording.text.len(),
        "{what}: get length"
    );
    if recording.status == Status::Recording {
        assert_eq!(
            info.producer_attached, recording.attached,
            "{what}: attached"
        );
    }
    let text = &recording.text;
    let mut offsets = vec![0, text.len()];
    offsets.extend(
        (1..text.len())
            .filter(|&i| text.is_char_boundary(i))
            .take(3),
    );
    for from in offsets {
        let mut replay = within(&what, real.recorder.replay(&id(conv), from as u64))
            .await
            .unwrap_or_else(|e| panic!("{what} from {from}: {e}"));
        let mut seen = String::new();
        while from + seen.len() < text.len() {
            let piece = within(&what, replay.next())
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"))
                .unwrap_or_else(|| panic!("{what} from {from}: ended early"));
            seen.push_str(std::str::from_utf8(&piece.data).unwrap());
            assert_eq!(
                piece.end_offset as usize,
                from + seen.len(),
                "{what}: offset"
            );
        }
        assert_eq!(seen, text[from..], "{what} from {from}");
        if recording.status != Status::Recording {
            let end = within(&what, replay.next()).await.unwrap();
            assert!(end.is_none(), "{what}: more than recorded: {end:?}");
            assert_eq!(replay.ending(), Some(recording.status), "{what}: ending");
        }
    }
    // Offsets that are not resumable.
    let past = real.recorder.replay(&id(conv), text.len() as u64 + 1).await;
    if recording.status == Status::Recording {
        assert!(past.is_ok(), "{what}: a live resume past the end waits");
    } else {
        assert!(
            matches!(past, Err(Error::OffsetOutOfRange { .. })),
            "{what}: past the end: {:?}",
            past.err()
        );
    }
    if let Some(inside) = (1..text.len()).find(|&i| !text.is_char_boundary(i)) {
        let result = real.recorder.replay(&id(conv), inside as u64).await;
        assert!(
            matches!(result, Err(Error::OffsetInsideCharacter { .. })),
            "{what}: inside a character: {:?}",
            result.err()
        );
    }
}

/// Every subscriber has received exactly the model's text from where it started, and has
/// ended, with the right status, once its recording did.
async fn check_subscribers(real: &mut Real, model: &Model, step: usize) {
    let mut still_open = Vec::new();
    for mut sub in std::mem::take(&mut real.subscribers) {
        let what = format!("step {step}: subscriber of conversation {}", sub.conv);
        let current = model.recordings[sub.conv]
            .as_ref()
            .filter(|r| r.serial == sub.serial);
        match current {
            Some(recording) => {
                let len = recording.text.len() - sub.from;
                let mut seen = std::mem::take(&mut sub.seen);
                read_exactly_from(&mut sub.replay, &mut seen, sub.from, len, &what).await;
                assert_eq!(seen, recording.text[sub.from..], "{what}");
                sub.seen = seen;
                if recording.status == Status::Recording {
                    still_open.push(sub);
                } else {
                    let end = within(&what, sub.replay.next()).await.unwrap();
                    assert!(end.is_none(), "{what}: more than recorded");
                    assert_eq!(sub.replay.ending(), Some(recording.status), "{what}");
                }
            }
            None => {
                // Replaced by a newer recording (or collected after it ended, which only
                // happens after this subscriber saw the end): it ends without more text.
                let end = within(&what, sub.replay.next()).await;
                assert!(matches!(end, Ok(None)), "{what}: {end:?}");
                let how = model.vanished.get(&sub.serial).copied();
                assert_eq!(sub.replay.ending(), how, "{what}");
            }
        }
    }
    real.subscribers = still_open;
}

async fn read_exactly_from(
    replay: &mut Replay,
    seen: &mut String,
    from: usize,
    len: usize,
    what: &str,
) {
    while seen.len() < len {
        let piece = within(what, replay.next())
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .unwrap_or_else(|| panic!("{what}: ended at {} of {len}", seen.len()));
        seen.push_str(std::str::from_utf8(&piece.data).unwrap());
        assert_eq!(
            piece.end_offset as usize,
            from + seen.len(),
            "{what}: offset"
        );
    }
}

async fn run(setup: Setup, ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let mut model = Model {
        now_ms: clock.now_ms(),
        ..Model::default()
    };
    let mut real = Real::open(dir.path().join("model.redb"), setup, clock);
    for (step, op) in ops.iter().enumerate() {
        if let Op::Crash { drop_only } = op {
            real = real.crash(!drop_only).await;
            // Every recording that was live comes back detached, its idle clock restarted;
            // with no grace period it is interrupted at once.
            let now = model.now_ms;
            for conv in 0..CONVERSATIONS {
                if !setup.long_grace {
                    model.finish(conv, Status::Interrupted);
                } else if let Some(live) = model.recordings[conv]
                    .as_mut()
                    .filter(|r| r.status == Status::Recording)
                {
                    live.attached = false;
                    live.last_activity_ms = now;
                }
            }
            if !setup.long_grace {
                real.settle().await;
            }
        } else {
            apply(&mut real, &mut model, op).await;
        }
        check(&mut real, &model, step).await;
    }
    drop(real.subscribers);
    drop(real.producers);
    real.store.close().await;
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_recorder_behaves_like_its_model(
        long_grace in any::<bool>(),
        reject in any::<bool>(),
        power_cuts in prop::option::of(any::<u64>()),
        ops in prop::collection::vec(op(), 1..50),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run(Setup { long_grace, reject, power_cuts }, ops));
    }
}
