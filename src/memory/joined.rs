//! A cycle's memory and its recall query embedded in one request, when one model serves both
//! (`embeds_both_alike`; E5-style setups use two models): a cycle then asks the embeddings endpoint
//! once instead of twice, with one reservation and one settlement, which halves its embeddings
//! requests against a provider's rate limit and spends less CPU on both ends. (With
//! `memory.batch_size` at 1 the embedder still sends the two texts as two requests, under the one
//! reservation.) A failed joined request counts once with the breaker, where the two requests
//! counted twice; its memory is queued, and the recalls that follow are not joined until the queue
//! is written.
//!
//! `prepare_joined` joins them only when the recall has something to search and need not first
//! write queued memories; the memory goes first in the request. `recall_joined` searches with the
//! query's vector and reports the answer before the memory is stored: the actor's turn usually
//! comes first, so on the console's one thread the memory is indexed while the model call waits,
//! and the memory then takes its turn among the agent's writes (`keep_joined`). A failed request
//! queues the memory and the recall finds nothing. `into_remember` keeps the memory alone when the
//! recall will not run (a drain, or an earlier effect of the step failing: `Actor::give_up`).

use super::paid::{EmbedTicket, PreparedRemember, RecallStart};
use super::{Memory, MemoryError, MemoryPlace, MemoryRecord, Payer};
use crate::core::memory::{MemoryHit, MemorySource};
use crate::llm::embed::EmbedPurpose;

/// A cycle's memory and its recall, prepared together before the step's flush: one reservation
/// for both texts, the memory's first.
pub struct PreparedJoined {
    payer: Payer,
    record: MemoryRecord,
    places: Vec<MemoryPlace>,
    ticket: Result<EmbedTicket, MemoryError>,
}

/// The memory a joined call embedded (or the reason it could not), to be stored after the
/// recall's answer has gone back to the cycle.
pub struct JoinedMemory {
    record: MemoryRecord,
    vector: Result<Vec<f32>, MemoryError>,
}

impl PreparedJoined {
    /// Whether a reservation waits to be made durable before the call.
    pub fn is_reserved(&self) -> bool {
        self.ticket.is_ok()
    }

    /// The memory alone, when the recall will not run (the bot is shutting down): the request
    /// then carries the memory only, within the reservation made for both.
    pub fn into_remember(self) -> PreparedRemember {
        let ticket = self.ticket.map(|mut ticket| {
            ticket.texts.truncate(1);
            ticket
        });
        PreparedRemember {
            record: self.record,
            ticket,
        }
    }
}

impl Memory {
    /// Whether a memory and a query are embedded by the same model, so that one request can
    /// carry both (E5-style models use two).
    pub fn embeds_both_alike(&self) -> bool {
        self.embedder.model(EmbedPurpose::Passage) == self.embedder.model(EmbedPurpose::Query)
    }

    /// Prepares a cycle's memory and its recall from `places` as one request. `None` when they
    /// cannot share one: the models differ, the recall has nothing to search or must first
    /// write queued memories, or the memory cannot be made; the caller prepares them apart.
    pub fn prepare_joined(
        &self,
        payer: &Payer,
        cycle: u64,
        text: &str,
        places: Vec<MemoryPlace>,
        query: &str,
    ) -> Option<PreparedJoined> {
        if !self.embeds_both_alike() {
            return None;
        }
        if !matches!(self.recall_start(&payer.agent, &places), RecallStart::Now) {
            return None;
        }
        let record = self
            .new_record(payer, cycle, MemorySource::Cycle, text)
            .ok()?;
        let texts = vec![record.text.clone(), query.to_string()];
        let ticket = self.reserve_embedding(payer, texts, EmbedPurpose::Passage);
        Some(PreparedJoined {
            payer: payer.clone(),
            record,
            places,
            ticket,
        })
    }

    /// Gives back a joined call's reservation when neither part will run.
    pub fn abandon_joined(&self, prepared: &PreparedJoined) {
        if let Ok(ticket) = &prepared.ticket {
            self.give_back(ticket);
        }
    }

    /// Makes a joined call and searches with its query's vector. The memory is left to
    /// `keep_joined`, so that the cycle does not wait for it to be indexed.
    pub async fn recall_joined(&self, prepared: PreparedJoined) -> (Vec<MemoryHit>, JoinedMemory) {
        let PreparedJoined {
            payer,
            record,
            places,
            ticket,
        } = prepared;
        let embedded = self.embed_if_reserved(ticket).await;
        // `embed_reserved` has checked that there is one vector per text, the memory's first.
        let vectors = embedded.and_then(|vectors| {
            <[Vec<f32>; 2]>::try_from(vectors).map_err(|vectors| {
                MemoryError::Embedding(format!("asked for 2 embeddings, got {}", vectors.len()))
            })
        });
        match vectors {
            Ok([memory, query]) => {
                let found = self
                    .search_vector(&places, &query, self.config.recall_top_k)
                    .await;
                let memory = JoinedMemory {
                    record,
                    vector: Ok(memory),
                };
                (self.hits_or_nothing(&payer, found), memory)
            }
            Err(e) => {
                self.note_recall_failure(&payer, &e);
                let memory = JoinedMemory {
                    record,
                    vector: Err(e),
                };
                (Vec::new(), memory)
            }
        }
    }

    /// Stores a joined call's memory, or queues it when the call failed (and `Err` says why).
    pub fn keep_joined(&self, memory: JoinedMemory) -> Result<u64, MemoryError> {
        self.keep(&memory.record, memory.vector)
    }
}
