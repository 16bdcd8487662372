//! A Record call's producer session: run here, or, on a node of a cluster, forwarded to the
//! leader. Both answer the same calls; the Record handler does not tell them apart.
use crate::cluster::Forwarded;
use crate::error::Result;
use crate::recorder::{Producer, Progress, Stopped};
use crate::store::Committed;

/// A producer session, here or on the leader.
pub(super) enum Session {
    Local(Producer),
    Forwarded(Forwarded),
}

impl Session {
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

    pub(super) async fn stopped(&mut self) -> Stopped {
        match self {
            Session::Local(producer) => producer.stopped().await,
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

    pub(super) fn end_without_complete(self) -> String {
        match self {
            Session::Local(producer) => producer.end_without_complete(),
            Session::Forwarded(forwarded) => forwarded.end_without_complete(),
        }
    }

    pub(super) fn detach(self, reason: String) {
        match self {
            Session::Local(producer) => producer.detach(reason),
            Session::Forwarded(forwarded) => forwarded.detach(reason),
        }
    }
}
