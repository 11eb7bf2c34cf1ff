//! Paid embedding calls: each one's worst case reserved in the spend ledger before the request and
//! settled after it, with the breaker told how the endpoint answered.
//!
//! The reservation (`reserve_embedding`: the price, the breaker's pre-check, a ledger reservation
//! without a flush) is for the texts' bytes plus `MARKERS_PER_TEXT` tokens a text: no tokenizer
//! makes more tokens than bytes, so nothing is encoded before the call; a server that reports no
//! usage is charged by our own count, made then. `embed_reserved` is admitted by the breaker right
//! before the request and settles or releases after it; `embed` is a call made on its own.
//!
//! A cycle's memory and its recall query can be reserved before the step's own flush
//! (`prepare_remember`/`remember_prepared`, `prepare_recall`/`recall_prepared`), so that flush
//! makes the reservations durable and the calls cost no flush of their own. A cycle with memory on
//! thus flushes twice (the episode with the embeddings', the recall's and the next model call's
//! reservations; the proposal with its command's start), and once on the console when its command
//! lands with its result.

use super::{Memory, MemoryError, MemoryPlace, MemoryRecord, Payer};
use crate::budget::ledger::Reservation;
use crate::budget::{FailedCharge, Metered};
use crate::core::budget::Price;
use crate::core::memory::{MemoryHit, MemoryScope, MemorySource};
use crate::llm::embed::{EmbedPurpose, Embedded};
use crate::llm::{Billing, LlmError};

/// An embedding call reserved in the ledger and not made yet.
pub struct EmbedTicket {
    payer: Payer,
    pub(super) texts: Vec<String>,
    purpose: EmbedPurpose,
    model: String,
    price: Price,
    reservation: Reservation,
}

/// Tokens a server may add to each text it embeds (a start and an end marker, and room to spare).
const MARKERS_PER_TEXT: u64 = 16;

/// A cycle's memory with its embedding reserved (or the reason it could not be).
pub struct PreparedRemember {
    pub(super) record: MemoryRecord,
    pub(super) ticket: Result<EmbedTicket, MemoryError>,
}

/// How a recall begins (`Memory::recall_start`).
pub(super) enum RecallStart {
    /// Nothing is stored where it searches, and nothing is queued.
    Nothing,
    /// Queued memories are written first.
    AfterQueued,
    /// Its query is embedded and searched with at once.
    Now,
}

/// A cycle's recall, prepared before the step's flush.
pub enum PreparedRecall {
    /// The agent has nothing stored: no query is paid for.
    Nothing,
    /// Queued memories are written first, each batch with its own reserved call, so the query
    /// waits for them.
    AfterQueued {
        payer: Payer,
        places: Vec<MemoryPlace>,
        query: String,
    },
    /// The query's embedding is reserved (or the reason it could not be).
    Ready {
        payer: Payer,
        places: Vec<MemoryPlace>,
        ticket: Box<Result<EmbedTicket, MemoryError>>,
    },
}

impl PreparedRemember {
    fn reservation(&self) -> Option<&EmbedTicket> {
        self.ticket.as_ref().ok()
    }

    /// Whether a reservation waits to be made durable before the call.
    pub fn is_reserved(&self) -> bool {
        self.reservation().is_some()
    }
}

impl PreparedRecall {
    fn reservation(&self) -> Option<&EmbedTicket> {
        match self {
            PreparedRecall::Ready { ticket, .. } => ticket.as_ref().as_ref().ok(),
            _ => None,
        }
    }

    /// Whether a reservation waits to be made durable before the call.
    pub fn is_reserved(&self) -> bool {
        self.reservation().is_some()
    }
}

impl Memory {
    /// Reserves the worst case of embedding `texts`; refused at once while the breaker holds
    /// memory off. The reservation must be made durable before `embed_reserved` makes the call.
    pub(super) fn reserve_embedding(
        &self,
        payer: &Payer,
        texts: Vec<String>,
        purpose: EmbedPurpose,
    ) -> Result<EmbedTicket, MemoryError> {
        let model = self.embedder.model(purpose).to_string();
        let price = self
            .budgets
            .price(&model)
            .map_err(|unpriced| MemoryError::Budget(unpriced.to_string()))?;
        // The worst case is counted in bytes, not tokens: no tokenizer an embeddings server may
        // use makes more tokens of a text than it has bytes (each token stands for one byte at
        // least), plus a few markers per text, so a settled call stays within its reservation
        // whatever the server counts with. Encoding the texts here cost a tenth of a millisecond
        // a cycle for a bound that a server with another tokenizer could still pass.
        let worst_tokens: u64 = texts
            .iter()
            .map(|t| t.len() as u64 + MARKERS_PER_TEXT)
            .sum();
        let worst = price.cost(worst_tokens, 0);
        self.breaker
            .would_admit(self.clock.now())
            .map_err(MemoryError::Off)?;
        let what = format!("{model} embeddings");
        match self
            .budgets
            .reserve_call::<LlmError>(payer, worst, &what, self.clock.now())
        {
            Ok(reservation) => Ok(EmbedTicket {
                payer: payer.clone(),
                texts,
                purpose,
                model,
                price,
                reservation,
            }),
            Err(refused) => Err(match refused {
                Metered::Refused(why) => {
                    metrics::counter!(crate::ops::names::BUDGET_REFUSALS, "kind" => "embeddings")
                        .increment(1);
                    MemoryError::Budget(why)
                }
                Metered::Ledger(e) => e.into(),
                Metered::Call(e) => MemoryError::Embedding(e.to_string()),
            }),
        }
    }

    /// Makes the call a durable reservation was made for, then settles it (or releases it).
    pub(super) async fn embed_reserved(
        &self,
        ticket: EmbedTicket,
    ) -> Result<Vec<Vec<f32>>, MemoryError> {
        let EmbedTicket {
            payer,
            texts,
            purpose,
            model,
            price,
            reservation,
        } = ticket;
        // What the call used, by the server's count; a server that reports none is charged by
        // ours (counted only then).
        let used = |embedded: &Embedded| {
            embedded.prompt_tokens.unwrap_or_else(|| {
                texts
                    .iter()
                    .map(|text| self.counter.count(text) as u64)
                    .sum()
            })
        };
        // Calls reserved together are admitted one by one: an earlier one may have just turned
        // memory off.
        if let Err(off) = self.breaker.admit(self.clock.now()) {
            self.budgets.release_call(&payer, &reservation);
            return Err(MemoryError::Off(off));
        }
        let result = self.embedder.embed(&texts, purpose).await;
        let embedded = self.budgets.close_call(
            &payer,
            &reservation,
            result,
            |embedded: &Embedded| price.cost(used(embedded), 0),
            |e: &LlmError| match e.billing() {
                Billing::NotBilled => FailedCharge::Nothing,
                // The server may have embedded the texts before it failed.
                Billing::MayBeBilled => FailedCharge::Reservation,
            },
        );
        match embedded {
            Ok((done, cost)) => {
                use crate::ops::names;
                metrics::counter!(names::TOKENS, "model" => model.clone(), "kind" => "embedding")
                    .increment(used(&done));
                metrics::counter!(names::SPEND_MICRODOLLARS, "model" => model).increment(cost.0);
                if self.breaker.record_success() {
                    tracing::info!("the embeddings endpoint answers again; memory is back on");
                }
                // Every embedder promises one vector per input, in order; a server that breaks the
                // promise must not pair a text with another text's vector.
                if done.vectors.len() != texts.len() {
                    return Err(MemoryError::Embedding(format!(
                        "asked for {} embeddings, got {}",
                        texts.len(),
                        done.vectors.len()
                    )));
                }
                Ok(done.vectors)
            }
            Err(Metered::Call(e)) => {
                self.note_failure(&e);
                Err(MemoryError::Embedding(e.to_string()))
            }
            Err(Metered::Refused(why)) => Err(MemoryError::Budget(why)),
            Err(Metered::Ledger(e)) => Err(e.into()),
        }
    }

    /// `embed_reserved` for a prepared call, whose reservation may have been refused: the
    /// refusal is its answer.
    pub(super) async fn embed_if_reserved(
        &self,
        ticket: Result<EmbedTicket, MemoryError>,
    ) -> Result<Vec<Vec<f32>>, MemoryError> {
        self.embed_reserved(ticket?).await
    }

    /// Makes a ticket's reservation durable on its own (when no step flush carries it) and calls.
    async fn embed_now(&self, ticket: EmbedTicket) -> Result<Vec<Vec<f32>>, MemoryError> {
        if let Err(e) = self.budgets.make_durable().await {
            self.give_back(&ticket);
            return Err(e.into());
        }
        self.embed_reserved(ticket).await
    }

    /// Returns a reservation whose call will not be made.
    pub(super) fn give_back(&self, ticket: &EmbedTicket) {
        self.budgets
            .release_call(&ticket.payer, &ticket.reservation);
    }

    /// Embeds `texts`: reserved, made durable, called, settled.
    pub(super) async fn embed(
        &self,
        payer: &Payer,
        texts: &[String],
        purpose: EmbedPurpose,
    ) -> Result<Vec<Vec<f32>>, MemoryError> {
        let ticket = self.reserve_embedding(payer, texts.to_vec(), purpose)?;
        self.embed_now(ticket).await
    }

    /// The vector of one text (`embed_reserved` has checked that there is exactly one).
    fn only_vector(vectors: Vec<Vec<f32>>) -> Result<Vec<f32>, MemoryError> {
        vectors
            .into_iter()
            .next()
            .ok_or_else(|| MemoryError::Embedding("the server returned no embedding".into()))
    }

    pub(super) async fn embed_one(
        &self,
        payer: &Payer,
        text: &str,
        purpose: EmbedPurpose,
    ) -> Result<Vec<f32>, MemoryError> {
        Self::only_vector(self.embed(payer, &[text.to_string()], purpose).await?)
    }

    /// A memory to write, with its embedding reserved but not yet durable: the caller flushes the
    /// store before `remember_prepared`.
    pub fn prepare_remember(
        &self,
        payer: &Payer,
        cycle: u64,
        source: MemorySource,
        text: &str,
    ) -> Result<PreparedRemember, MemoryError> {
        let record = self.new_record(payer, cycle, source, text)?;
        let ticket =
            self.reserve_embedding(payer, vec![record.text.clone()], EmbedPurpose::Passage);
        Ok(PreparedRemember { record, ticket })
    }

    /// An agent's new memory, not stored yet.
    pub(super) fn new_record(
        &self,
        payer: &Payer,
        cycle: u64,
        source: MemorySource,
        text: &str,
    ) -> Result<MemoryRecord, MemoryError> {
        Ok(MemoryRecord {
            id: self.db.generate_id()?,
            agent: payer.agent.clone(),
            guild: payer.spender.guild.clone(),
            cycle,
            source,
            text: text.to_string(),
            created_at: self.clock.now(),
            pinned: false,
            forgotten: false,
            scope: MemoryScope::Agent,
            added_by: None,
            pinned_by: None,
            unpinned_by: None,
            forgotten_by: None,
        })
    }

    /// Writes a prepared memory. When the embedding fails it is queued (and `Err` says why); the
    /// queue is written by `flush_pending` once the endpoint answers again.
    pub async fn remember_prepared(&self, prepared: PreparedRemember) -> Result<u64, MemoryError> {
        let PreparedRemember { record, ticket } = prepared;
        let embedded = self
            .embed_if_reserved(ticket)
            .await
            .and_then(Self::only_vector);
        self.keep(&record, embedded)
    }

    /// Stores a memory with its vector, or queues it when its embedding failed (and `Err` says
    /// why).
    pub(super) fn keep(
        &self,
        record: &MemoryRecord,
        embedded: Result<Vec<f32>, MemoryError>,
    ) -> Result<u64, MemoryError> {
        match embedded {
            Ok(vector) => {
                self.store(record, &vector)?;
                Ok(record.id)
            }
            Err(e) => {
                self.queue(record)?;
                if self.breaker.off().is_none() {
                    tracing::warn!(agent = %record.agent, error = %e, "memory queued until embeddings work again");
                }
                Err(e)
            }
        }
    }

    /// Writes a memory now (a command's `remember`): reserved, made durable, embedded, stored.
    pub async fn remember(
        &self,
        payer: &Payer,
        cycle: u64,
        source: MemorySource,
        text: &str,
    ) -> Result<u64, MemoryError> {
        let prepared = self.prepare_remember(payer, cycle, source, text)?;
        if prepared.reservation().is_some() {
            if let Err(e) = self.budgets.make_durable().await {
                self.abandon_remember(&prepared);
                return Err(e.into());
            }
        }
        self.remember_prepared(prepared).await
    }

    /// Gives back a prepared memory's reservation when it will not be written.
    pub fn abandon_remember(&self, prepared: &PreparedRemember) {
        if let Some(ticket) = prepared.reservation() {
            self.give_back(ticket);
        }
    }

    /// A cycle's recall from `places` (see `MemoryPlace::recalled_by`) with its query's
    /// embedding reserved but not yet durable: the caller flushes the store before
    /// `recall_prepared`.
    pub fn prepare_recall(
        &self,
        payer: &Payer,
        places: Vec<MemoryPlace>,
        query: &str,
    ) -> PreparedRecall {
        match self.recall_start(&payer.agent, &places) {
            // A new agent has nothing to recall: no query embedding is paid for.
            RecallStart::Nothing => return PreparedRecall::Nothing,
            RecallStart::AfterQueued => {
                return PreparedRecall::AfterQueued {
                    payer: payer.clone(),
                    places,
                    query: query.to_string(),
                }
            }
            RecallStart::Now => {}
        }
        PreparedRecall::Ready {
            payer: payer.clone(),
            places,
            ticket: Box::new(self.reserve_embedding(
                payer,
                vec![query.to_string()],
                EmbedPurpose::Query,
            )),
        }
    }

    /// Gives back a prepared recall's reservation when it will not run.
    pub fn abandon_recall(&self, prepared: &PreparedRecall) {
        if let Some(ticket) = prepared.reservation() {
            self.give_back(ticket);
        }
    }

    /// Runs a prepared recall: failures are logged and the cycle goes on without memories.
    pub async fn recall_prepared(&self, prepared: PreparedRecall) -> Vec<MemoryHit> {
        let (payer, found) = match prepared {
            PreparedRecall::Nothing => return Vec::new(),
            PreparedRecall::AfterQueued {
                payer,
                places,
                query,
            } => {
                if let Err(e) = self.flush_pending(&payer).await {
                    if !matches!(e, MemoryError::Off(_)) {
                        tracing::warn!(agent = %payer.agent, error = %e, "queued memories are still waiting");
                    }
                }
                let found = self
                    .search_at(&payer, &places, &query, self.config.recall_top_k)
                    .await;
                (payer, found)
            }
            PreparedRecall::Ready {
                payer,
                places,
                ticket,
            } => {
                let found = match self
                    .embed_if_reserved(*ticket)
                    .await
                    .and_then(Self::only_vector)
                {
                    Ok(vector) => {
                        self.search_vector(&places, &vector, self.config.recall_top_k)
                            .await
                    }
                    Err(e) => Err(e),
                };
                (payer, found)
            }
        };
        self.hits_or_nothing(&payer, found)
    }

    /// What a recall found; a failure is logged and the cycle goes on without memories.
    pub(super) fn hits_or_nothing(
        &self,
        payer: &Payer,
        found: Result<Vec<MemoryHit>, MemoryError>,
    ) -> Vec<MemoryHit> {
        found.unwrap_or_else(|e| {
            self.note_recall_failure(payer, &e);
            Vec::new()
        })
    }

    /// Logs why a recall found nothing, unless memory being off says it already.
    pub(super) fn note_recall_failure(&self, payer: &Payer, error: &MemoryError) {
        match error {
            // Memory turning off was announced once; each cycle without it is not news.
            MemoryError::Off(_) => {}
            e if self.breaker.off().is_some() => {
                tracing::debug!(agent = %payer.agent, error = %e, "recall failed");
            }
            e => {
                tracing::warn!(agent = %payer.agent, error = %e, "recall failed; the cycle goes on without memories");
            }
        }
    }

    /// How a recall from `places` begins: with nothing to search, with the agent's queued
    /// memories, or with its query.
    pub(super) fn recall_start(&self, agent: &str, places: &[MemoryPlace]) -> RecallStart {
        if self.pending_count(agent) > 0 {
            RecallStart::AfterQueued
        } else if places.iter().any(|place| self.has_any(&place.key)) {
            RecallStart::Now
        } else {
            RecallStart::Nothing
        }
    }

    /// A cycle's recall made at once: queued memories are written first, then the search.
    pub async fn recall(
        &self,
        payer: &Payer,
        places: Vec<MemoryPlace>,
        query: &str,
    ) -> Vec<MemoryHit> {
        let prepared = self.prepare_recall(payer, places, query);
        if prepared.reservation().is_some() {
            if let Err(e) = self.budgets.make_durable().await {
                self.abandon_recall(&prepared);
                tracing::warn!(agent = %payer.agent, error = %e, "recall failed; the cycle goes on without memories");
                return Vec::new();
            }
        }
        self.recall_prepared(prepared).await
    }
}
