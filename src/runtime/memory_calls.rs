//! A step's paid memory calls (the cycle's memory and its recall query), reserved in the spend
//! ledger before the step's own flush so that flush makes them durable too, instead of one flush
//! each; and the tasks that make them.

use crate::core::event::{Effect, Event};
use crate::core::memory::MemorySource;
use crate::memory::MemoryPlace;

use super::{Actor, ActorMsg};

/// A step's paid memory call, reserved before the step's flush.
pub(super) enum PreparedCall {
    Remember(Box<crate::memory::PreparedRemember>),
    Recall(crate::memory::PreparedRecall),
}

impl PreparedCall {
    pub(super) fn needs_durability(&self) -> bool {
        match self {
            PreparedCall::Remember(prepared) => prepared.is_reserved(),
            PreparedCall::Recall(prepared) => prepared.is_reserved(),
        }
    }
}

impl Actor {
    /// Reserves the paid memory calls among a step's effects (one entry per effect).
    pub(super) fn prepare_memory_calls(&self, effects: &[Effect]) -> Vec<Option<PreparedCall>> {
        let Some(memory) = self.deps.memory.as_ref() else {
            return effects.iter().map(|_| None).collect();
        };
        let payer = memory.payer(&self.state);
        effects
            .iter()
            .map(|effect| match effect {
                Effect::Remember { cycle, text } => memory
                    .prepare_remember(&payer, *cycle, MemorySource::Cycle, text)
                    .map_err(|e| {
                        tracing::warn!(agent = %self.state.id, error = %e, "a memory could not be prepared; it is written without");
                    })
                    .ok()
                    .map(|prepared| PreparedCall::Remember(Box::new(prepared))),
                Effect::Recall { query, .. } if !self.deps.drain.is_raised() => Some(
                    PreparedCall::Recall(memory.prepare_recall(&payer, self.recall_places(), query)),
                ),
                _ => None,
            })
            .collect()
    }

    /// Where the agent recalls from: its own memories, its thread's and its server's.
    fn recall_places(&self) -> Vec<MemoryPlace> {
        let thread = match self.deps.store.binding(&self.state.id) {
            Ok(binding) => binding.map(|b| b.thread_id),
            Err(e) => {
                tracing::warn!(agent = %self.state.id, error = %e, "the agent's thread cannot be read; it recalls without the thread's memories");
                None
            }
        };
        MemoryPlace::recalled_by(&self.state.id, thread, self.state.spender.guild.as_ref())
    }

    /// Gives back the reservation of a prepared call that will not be made.
    pub(super) fn abandon(&self, call: &PreparedCall) {
        if let Some(memory) = self.deps.memory.as_ref() {
            match call {
                PreparedCall::Remember(prepared) => memory.abandon_remember(prepared),
                PreparedCall::Recall(prepared) => memory.abandon_recall(prepared),
            }
        }
    }

    /// Searches the agent's memories in a task; the cycle continues with whatever was found.
    pub(super) fn recall(&mut self, seq: u64, query: String, prepared: Option<PreparedCall>) {
        let handle = self.handle.clone();
        let Some(memory) = self.deps.memory.clone() else {
            handle.note(Event::Recalled {
                seq,
                hits: Vec::new(),
            });
            return;
        };
        let payer = memory.payer(&self.state);
        let places = self.recall_places();
        self.tasks.spawn(async move {
            let hits = match prepared {
                Some(PreparedCall::Recall(prepared)) => memory.recall_prepared(prepared).await,
                _ => memory.recall(&payer, places, &query).await,
            };
            let event = Event::Recalled { seq, hits };
            handle.report(ActorMsg::Event { event, reply: None }).await;
        });
    }

    /// Writes a cycle's memory in a task; a failed embedding leaves it queued in the store.
    pub(super) fn remember(&mut self, cycle: u64, text: String, prepared: Option<PreparedCall>) {
        let Some(memory) = self.deps.memory.clone() else {
            return;
        };
        let payer = memory.payer(&self.state);
        let in_order = self.memory_writes.clone();
        self.tasks.spawn(async move {
            let _turn = in_order.lock().await;
            let _ = match prepared {
                Some(PreparedCall::Remember(prepared)) => memory.remember_prepared(*prepared).await,
                _ => {
                    memory
                        .remember(&payer, cycle, MemorySource::Cycle, &text)
                        .await
                }
            };
        });
    }
}
