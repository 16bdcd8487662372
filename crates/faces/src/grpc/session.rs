//! A Record call's producer session: run here, or, on a node of a cluster, forwarded to the
//! leader. Both answer the same calls; the Record handler does not tell them apart.
use std::pin::Pin;

use super::gated::Gated;
use crate::cluster::{Cluster, ForwardedProducer};
use crate::error::Result;
use crate::id::ConversationId;
use crate::pb::RecordRequest;
use crate::recorder::Committed;
use crate::recorder::{Producer, Progress, Recorder, StartOptions, Stopped};

/// A producer session, here or on the leader.
pub(super) enum Session {
    Local(Producer),
    Forwarded(ForwardedProducer),
}

impl Session {
    /// Opens the session `options` asks for: on the leader through `cluster`, if given, else
    /// here.
    ///
    /// Fails as [`Recorder::start`] does, or with the leader's refusal.
    pub(super) async fn open(
        recorder: &Recorder,
        cluster: Option<&Cluster>,
        id: ConversationId,
        options: StartOptions,
    ) -> Result<Session> {
        Ok(match cluster {
            Some(cluster) => Session::Forwarded(
                cluster
                    .forward_producer(id, options.resume_from, options.retention)
                    .await?,
            ),
            None => Session::Local(recorder.start(id, options).await?),
        })
    }

    /// Byte offset after the last content accepted.
    pub(super) fn appended_bytes(&self) -> u64 {
        match self {
            Session::Local(producer) => producer.appended_bytes(),
            Session::Forwarded(forwarded) => forwarded.appended_bytes(),
        }
    }

    /// Bytes of the recording committed so far.
    pub(super) fn committed_bytes(&self) -> u64 {
        match self {
            Session::Local(producer) => producer.progress().bytes,
            Session::Forwarded(forwarded) => forwarded.committed_bytes(),
        }
    }

    pub(super) async fn accept(
        &mut self,
        conversation_id: &[u8],
        content: &str,
    ) -> Result<Option<Committed>> {
        match self {
            Session::Local(producer) => producer.accept(conversation_id, content).await,
            Session::Forwarded(forwarded) => forwarded.accept(conversation_id, content).await,
        }
    }

    /// Appends the content of each of `messages` in order, together (see
    /// [`Producer::accept_all`], [`ForwardedProducer::accept_all`]), and empties it; does not
    /// wait for their commit.
    ///
    /// Fails at the first message refused, as [`accept`](Self::accept) does.
    pub(super) async fn accept_all(&mut self, messages: &mut Vec<RecordRequest>) -> Result<()> {
        let messages = messages.drain(..).map(|m| (m.conversation_id, m.content));
        match self {
            Session::Local(producer) => producer.accept_all(messages).await,
            Session::Forwarded(forwarded) => forwarded.accept_all(messages).await,
        }
    }

    /// Resolves once [`stopped`](Self::stopped) would; made once per session, and polled
    /// only after it woke (see [`Gated`]).
    pub(super) fn stop_signal(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        match self {
            Session::Local(producer) => Box::pin(Gated::new(producer.stop_signal())),
            Session::Forwarded(forwarded) => Box::pin(Gated::new(forwarded.stop_signal())),
        }
    }

    /// Resolves when the session is stopped by another hand. Fails when a forwarded session
    /// was given up (see [`ForwardedProducer::stopped`]).
    pub(super) async fn stopped(&mut self) -> Result<Stopped> {
        match self {
            Session::Local(producer) => Ok(producer.stopped().await),
            Session::Forwarded(forwarded) => forwarded.stopped().await,
        }
    }

    pub(super) async fn complete(&mut self) -> Result<Progress> {
        match self {
            Session::Local(producer) => producer.complete().await,
            Session::Forwarded(forwarded) => forwarded.complete().await,
        }
    }

    pub(super) fn end_message(&self) -> Option<&str> {
        match self {
            Session::Local(producer) => producer.end_message(),
            Session::Forwarded(forwarded) => forwarded.end_message(),
        }
    }

    pub(super) async fn end_without_complete(self) -> String {
        match self {
            Session::Local(producer) => producer.end_without_complete(),
            Session::Forwarded(forwarded) => forwarded.end_without_complete().await,
        }
    }

    pub(super) fn detach(self, reason: String) {
        match self {
            Session::Local(producer) => producer.detach(reason),
            Session::Forwarded(forwarded) => forwarded.detach(reason),
        }
    }
}
