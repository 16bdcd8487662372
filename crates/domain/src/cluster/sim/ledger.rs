//! The workload and its ledger: each conversation's tokens and pauses (drawn from the seed),
//! how much of it was acknowledged, whether its completion was asked for and answered; and
//! what every node must hold of it at the end.
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;

use crate::cluster::NodeId;
use crate::status::Status;

/// What a replay on one node read: `None` when the node has no such recording; the text, how
/// the replay ended, and the stored row's generation, status and length otherwise.
pub(super) type Read = Result<Option<Replayed>, String>;

/// What one replay read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Replayed {
    pub(super) text: String,
    pub(super) ending: Option<Status>,
    /// The stored row's generation, status and length, after the replay.
    pub(super) row: Option<(u64, Status, u64)>,
}

/// Every conversation of one seed.
pub(super) struct Ledger {
    conversations: Vec<Conversation>,
}

struct Conversation {
    name: String,
    /// Each token, and the pause before it is sent.
    tokens: Vec<(String, Duration)>,
    said: Mutex<Said>,
}

/// What the producer was told.
#[derive(Default, Clone, Copy)]
struct Said {
    /// A producer has started the recording.
    begun: bool,
    /// Bytes acknowledged as committed.
    acked: u64,
    /// Completion was asked for (the tokens were all acknowledged).
    completing: bool,
    /// How the recording ended, as the completion's answer said.
    completed: Option<Status>,
}

/// Some words with characters of two, three and four bytes, so that cuts could fall inside one.
const WORDS: [&str; 6] = ["tape ", "deck ", "é", "ş ", "→ ", "🦀"];

impl Ledger {
    /// `count` conversations of up to 30 tokens each, drawn from `rng`.
    pub(super) fn new(rng: &mut StdRng, count: usize) -> Ledger {
        let conversations = (0..count)
            .map(|i| Conversation {
                name: format!("conversation-{i}"),
                tokens: (0..rng.random_range(1..=30))
                    .map(|_| {
                        let token: String = (0..rng.random_range(1..4))
                            .map(|_| WORDS[rng.random_range(0..WORDS.len())])
                            .collect();
                        (token, Duration::from_millis(rng.random_range(0..150)))
                    })
                    .collect(),
                said: Mutex::default(),
            })
            .collect();
        Ledger { conversations }
    }

    /// How many conversations there are.
    pub(super) fn len(&self) -> usize {
        self.conversations.len()
    }

    pub(super) fn name(&self, conversation: usize) -> String {
        self.conversations[conversation].name.clone()
    }

    /// Where a producer resumes (`None`: it starts the recording) and the tokens it sends.
    pub(super) fn unacked(&self, conversation: usize) -> (Option<u64>, Vec<(String, Duration)>) {
        let tokens = &self.conversations[conversation].tokens;
        let said = *self.said(conversation);
        if !said.begun {
            self.said(conversation).begun = true;
            return (None, tokens.clone());
        }
        // Acknowledgements fall at the end of a token: resume after the last one acknowledged.
        let (mut from, mut first) = (0, 0);
        for (token, _) in tokens {
            let end = from + token.len() as u64;
            if end > said.acked {
                break;
            }
            (from, first) = (end, first + 1);
        }
        (Some(from), tokens[first..].to_vec())
    }

    /// How many conversations were completed, and the bytes acknowledged in all.
    pub(super) fn tally(&self) -> (usize, u64) {
        (0..self.len()).fold((0, 0), |(completed, bytes), i| {
            let said = *self.said(i);
            let done = said.completed == Some(Status::Completed);
            (completed + usize::from(done), bytes + said.acked)
        })
    }

    fn said(&self, conversation: usize) -> std::sync::MutexGuard<'_, Said> {
        let said = &self.conversations[conversation].said;
        said.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The producer was told the recording is committed up to byte `end`.
    pub(super) fn acked(&self, conversation: usize, end: u64) {
        let mut said = self.said(conversation);
        said.acked = said.acked.max(end);
    }

    /// The producer asks for completion.
    pub(super) fn completing(&self, conversation: usize) {
        self.said(conversation).completing = true;
    }

    /// The completion was answered: the recording ended as `status`.
    pub(super) fn completed(&self, conversation: usize, status: Status) {
        self.said(conversation).completed = Some(status);
    }

    /// What is wrong with what the nodes replayed of `conversation`, if anything: every node
    /// must have read the same, to an end, keeping every acknowledged byte and nothing that
    /// was never sent; `completed` only if completion was asked for, and if it was answered so.
    pub(super) fn check(&self, conversation: usize, reads: &[(NodeId, Read)]) -> Vec<String> {
        let name = &self.conversations[conversation].name;
        let sent: String = self.conversations[conversation]
            .tokens
            .iter()
            .map(|(token, _)| token.as_str())
            .collect();
        let said = *self.said(conversation);
        let mut found = Vec::new();
        for (node, read) in reads {
            let mut wrong = |what: String| found.push(format!("{name} on node {node}: {what}"));
            match read {
                Err(err) => wrong(format!("the replay failed: {err}")),
                Ok(None) if said.acked > 0 => {
                    wrong(format!("missing, with {} bytes acknowledged", said.acked))
                }
                Ok(None) => {}
                Ok(Some(Replayed { text, ending, .. })) => {
                    if !sent.starts_with(text.as_str()) {
                        wrong(format!(
                            "holds {text:?}, which was never sent ({sent:?} was)"
                        ));
                    }
                    if (text.len() as u64) < said.acked {
                        wrong(format!(
                            "holds {} bytes of the {} acknowledged",
                            text.len(),
                            said.acked
                        ));
                    }
                    match ending {
                        None | Some(Status::Recording) => {
                            wrong(format!("the replay ended without an end ({ending:?})"))
                        }
                        Some(Status::Completed) if !said.completing || *text != sent => {
                            wrong(format!(
                                "completed with {} of {} bytes, completion asked: {}",
                                text.len(),
                                sent.len(),
                                said.completing
                            ))
                        }
                        _ => {}
                    }
                    if said.completed == Some(Status::Completed)
                        && *ending != Some(Status::Completed)
                    {
                        wrong(format!(
                            "completion was acknowledged, but it ended {ending:?}"
                        ));
                    }
                }
            }
        }
        if let Some((first, theirs)) = reads.first()
            && let Some((other, ours)) = reads.iter().find(|(_, read)| read != theirs)
        {
            found.push(format!(
                "{name}: node {first} read {theirs:?}, node {other} read {ours:?}"
            ));
        }
        found
    }
}
