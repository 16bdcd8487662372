//! Open streams across restarts: taken over at start (so that none reaches the end of its
//! grace period while no one writes it), and let go at shutdown, open in the file, for the
//! next run to take over again.
use super::Streams;
use crate::error::Result;
use crate::id::ConversationId;
use crate::recorder::TapeWriter;

impl Streams {
    /// A producer session on open stream `id`, whose `committed` bytes are stored.
    ///
    /// Fails with `ShuttingDown` once the server has begun to stop (the stream stays open in
    /// the file, for the next run), or as [`crate::recorder::Recordings::resume`] does.
    pub(super) async fn take_over(
        &self,
        id: &ConversationId,
        committed: u64,
    ) -> Result<TapeWriter> {
        self.refuse_if_stopping()?;
        let committed = match self.recorder.deck().live(id.key()) {
            Some(tape) => tape.progress().bytes,
            None => committed,
        };
        let writer = self.recorder.deck().resume(id, committed, None).await?;
        writer.tape().hold_open();
        Ok(writer)
    }

    /// Takes over every open stream the store holds; returns how many.
    ///
    /// Fails with a storage error.
    pub async fn adopt_open(&self) -> Result<usize> {
        let mut adopted = 0;
        for tape in self.recorder.deck().live_tapes() {
            if tape.holder().attached {
                continue;
            }
            let store = self.recorder.deck().store();
            if store.stream_row(tape.key()).await?.is_some() {
                self.load(tape.id()).await?;
                adopted += 1;
            }
        }
        Ok(adopted)
    }

    /// Lets go of every open stream's producer session, because of `reason` (shutdown, or
    /// this node no longer leads its cluster): they stay open in the file, and are taken over
    /// again at the next start, or by the next leader.
    pub async fn release_all(&self, reason: &str) {
        for handle in self.all() {
            let mut state = handle.state.lock().await;
            if let Some(writer) = state.writer.take() {
                writer.detach(reason.into());
            }
            state.gone = true;
        }
        self.handles().clear();
    }
}
