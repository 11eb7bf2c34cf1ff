//! A step's paid memory calls (the cycle's memory and its recall query), reserved in the spend
//! ledger before the step's own flush so that flush makes them durable too, instead of one flush
//! each.

use crate::core::event::Effect;
use crate::core::memory::MemorySource;

use super::Actor;

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
                Effect::Recall { query, .. } if !self.deps.drain.is_raised() => {
                    Some(PreparedCall::Recall(memory.prepare_recall(&payer, query)))
                }
                _ => None,
            })
            .collect()
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
}
