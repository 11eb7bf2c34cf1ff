//! A step's paid calls reserved in the spend ledger before the step's own flush, so that flush
//! makes them durable too instead of one flush each: the cycle's memory and its recall query, and
//! the cycle's model call (the one that follows the recall, or the one the step starts); and the
//! tasks that make the memory calls.
//!
//! `Actor::prepare_memory_calls` gives each `Remember` and `Recall` effect its `PreparedCall`;
//! `abandon` gives them back when they will not run (a drain, a failed persist). A step with one
//! memory and one recall that `Memory::prepare_joined` can join gets `PreparedCall::Joined` on the
//! recall and `WithRecall` on the memory, and `recall_with_memory` runs both in one request.
//! `give_up` handles the prepared calls of a stored step that a drain or an earlier effect's error
//! stops: recalls are given back, memories still written.
//!
//! `ThinkAhead` (`reserve_think_ahead`) is the cycle's model call reserved in the same flush, sized
//! by the last cycle's prompt plus a quarter (plus `memory.max_recall_tokens` when a recall leads
//! to it); it is not made for a call to the smarter model. The call takes it
//! (`MeteredCall::reserved_ahead`), and it is given back when the state stops waiting for that call
//! (`drop_unused_think_ahead`, after every step and when the actor stops). The budget view the step
//! sees leaves it out, so the prompt and the caps see the budget as they would without it.

use std::sync::Arc;

use crate::budget::ledger::Reservation;
use crate::budget::Budgets;
use crate::core::budget::Micros;
use crate::core::event::{CallPurpose, Effect, Event};
use crate::core::memory::MemorySource;
use crate::core::prompt::ContextLimits;
use crate::core::state::Phase;
use crate::memory::{Memory, MemoryPlace, Payer, PreparedJoined, PreparedRemember};

use super::{Actor, ActorMsg};

/// A step's paid memory call, reserved before the step's flush.
pub(super) enum PreparedCall {
    Remember(Box<crate::memory::PreparedRemember>),
    Recall(crate::memory::PreparedRecall),
    /// The step's recall and its memory in one request, carried out with the recall.
    Joined(Box<crate::memory::PreparedJoined>),
    /// The step's memory, which the recall's request carries (`Joined`).
    WithRecall,
}

impl PreparedCall {
    pub(super) fn needs_durability(&self) -> bool {
        match self {
            PreparedCall::Remember(prepared) => prepared.is_reserved(),
            PreparedCall::Recall(prepared) => prepared.is_reserved(),
            PreparedCall::Joined(prepared) => prepared.is_reserved(),
            PreparedCall::WithRecall => false,
        }
    }
}

/// The cycle's model call, reserved before the flush of the step that leads to it: the step that
/// starts a recall (the call follows the recall's answer), or the step that starts the call
/// itself (no memory). The call's own flush for its reservation is saved. The prompt may not be
/// built yet, so the amount is the last such prompt with room to grow; a call it does not cover
/// gives it back and reserves for itself. Dropped unused (the agent stopped waiting, the actor
/// ended, even by an error), it is given back.
pub(super) struct ThinkAhead {
    /// The recall or call it waits for: it is kept only while the state waits for this one.
    pub(super) seq: u64,
    reservation: Option<Reservation>,
    budgets: Arc<Budgets>,
    payer: Payer,
}

impl ThinkAhead {
    pub(super) fn amount(&self) -> Micros {
        self.reservation.as_ref().map_or(Micros::ZERO, |r| r.amount)
    }

    /// The reservation, for the call that uses it: from now on that call settles or releases it.
    pub(super) fn into_reservation(mut self) -> Option<Reservation> {
        self.reservation.take()
    }
}

impl Drop for ThinkAhead {
    fn drop(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            self.budgets.release_call(&self.payer, &reservation);
        }
    }
}

impl Actor {
    /// Reserves, before the step's flush, the cycle's model call: the one the step's recall leads
    /// to, or the one the step starts. Nothing for the first cycle (no prompt to go by), during a
    /// drain, for a call to the smarter model, or when the budgets cannot cover the estimate: the
    /// call then reserves for itself, as any call does.
    pub(super) fn reserve_think_ahead(
        &self,
        effects: &[Effect],
        limits: ContextLimits,
    ) -> Option<ThinkAhead> {
        let recall_room = self.deps.config.memory.max_recall_tokens as u64;
        // The recall may find more than the last one did, so its call gets room for that too.
        let (seq, room, max_tokens) = effects.iter().find_map(|effect| match effect {
            Effect::Recall { seq, .. } => Some((*seq, recall_room, limits.max_tokens)),
            // A call its recall already reserved for takes that reservation. With memory on, a
            // call reaches here only when its recall could not reserve for it: the flush this
            // forces replaces the call's own.
            Effect::CallModel(call)
                if call.purpose == CallPurpose::Think
                    && !call.smart
                    && self.think_ahead.is_none() =>
            {
                Some((call.seq, 0, call.max_tokens))
            }
            _ => None,
        })?;
        let last_prompt = self.last_think_prompt_tokens?;
        if self.deps.drain.is_raised() {
            return None;
        }
        let model = &self.state.brief.settings.model;
        let price = self.deps.budgets.price(model).ok()?;
        // The history grows by a step.
        let prompt = (last_prompt + last_prompt / 4 + room).min(limits.context_tokens.into());
        let reply = self.deps.config.llm.reply_tokens(model, max_tokens);
        let worst = price.cost(prompt, reply.into());
        let payer = self.deps.budgets.payer(&self.state);
        let what = format!("{model} {:?}", CallPurpose::Think);
        let reservation = self
            .deps
            .budgets
            .reserve_call::<()>(&payer, worst, &what, self.deps.clock.now())
            .ok()?;
        Some(ThinkAhead {
            seq,
            reservation: Some(reservation),
            budgets: self.deps.budgets.clone(),
            payer,
        })
    }

    /// Gives back a reservation made ahead that no call will use: the state no longer waits for
    /// its recall or call (paused, stopped, or the cycle moved on), or the bot is shutting down.
    pub(super) fn drop_unused_think_ahead(&mut self) {
        let waiting = self.think_ahead.as_ref().is_some_and(|ahead| {
            self.state.progress.phase == Phase::Thinking
                && self.state.progress.call_seq == ahead.seq
                && !self.deps.drain.is_raised()
        });
        if !waiting {
            // Dropping it gives it back.
            self.think_ahead = None;
        }
    }

    /// Reserves the paid memory calls among a step's effects (one entry per effect).
    pub(super) fn prepare_memory_calls(&self, effects: &[Effect]) -> Vec<Option<PreparedCall>> {
        let Some(memory) = self.deps.memory.as_ref() else {
            return effects.iter().map(|_| None).collect();
        };
        let payer = memory.payer(&self.state);
        // Read once for the step's recall, joined or not.
        let recalls = effects
            .iter()
            .any(|effect| matches!(effect, Effect::Recall { .. }));
        let places = if recalls {
            self.recall_places()
        } else {
            Vec::new()
        };
        let mut prepared: Vec<Option<PreparedCall>> = effects.iter().map(|_| None).collect();
        if let Some((remember_at, recall_at, joined)) =
            self.prepare_joined(memory, &payer, effects, &places)
        {
            prepared[remember_at] = Some(PreparedCall::WithRecall);
            prepared[recall_at] = Some(PreparedCall::Joined(Box::new(joined)));
        }
        for (effect, slot) in effects.iter().zip(prepared.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            *slot = match effect {
                Effect::Remember { cycle, text } => memory
                    .prepare_remember(&payer, *cycle, MemorySource::Cycle, text)
                    .map_err(|e| {
                        tracing::warn!(agent = %self.state.id, error = %e, "a memory could not be prepared; it is written without");
                    })
                    .ok()
                    .map(|prepared| PreparedCall::Remember(Box::new(prepared))),
                Effect::Recall { query, .. } if !self.deps.drain.is_raised() => Some(
                    PreparedCall::Recall(memory.prepare_recall(&payer, places.clone(), query)),
                ),
                _ => None,
            };
        }
        prepared
    }

    /// The step's memory and its recall query as one request, when the step has one of each and
    /// the memory layer can join them (`Memory::prepare_joined`): with the positions of the
    /// two effects.
    fn prepare_joined(
        &self,
        memory: &Memory,
        payer: &Payer,
        effects: &[Effect],
        places: &[MemoryPlace],
    ) -> Option<(usize, usize, PreparedJoined)> {
        if self.deps.drain.is_raised() || !memory.embeds_both_alike() {
            return None;
        }
        let mut remembers = effects.iter().enumerate().filter_map(|(at, e)| match e {
            Effect::Remember { cycle, text } => Some((at, *cycle, text)),
            _ => None,
        });
        let (remember_at, cycle, text) = remembers.next()?;
        let mut recalls = effects.iter().enumerate().filter_map(|(at, e)| match e {
            Effect::Recall { query, .. } => Some((at, query)),
            _ => None,
        });
        let (recall_at, query) = recalls.next()?;
        // A step with more than one of either is left to the usual calls.
        if remembers.next().is_some() || recalls.next().is_some() {
            return None;
        }
        let joined = memory.prepare_joined(payer, cycle, text, places.to_vec(), query)?;
        Some((remember_at, recall_at, joined))
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
        MemoryPlace::recalled_by(
            &self.state.id,
            thread,
            self.state.money.spender.guild.as_ref(),
        )
    }

    /// A prepared call of a stored step that will not be made as planned: a recall's reservation
    /// is given back, but the step's memory is still written (alone, when the recall's request
    /// was to carry it).
    pub(super) fn give_up(&mut self, call: PreparedCall) {
        match call {
            PreparedCall::Joined(joined) => self.write_memory(joined.into_remember()),
            PreparedCall::Remember(prepared) => self.write_memory(*prepared),
            call => self.abandon(&call),
        }
    }

    /// Gives back the reservation of a prepared call that will not be made.
    pub(super) fn abandon(&self, call: &PreparedCall) {
        if let Some(memory) = self.deps.memory.as_ref() {
            match call {
                PreparedCall::Remember(prepared) => memory.abandon_remember(prepared),
                PreparedCall::Recall(prepared) => memory.abandon_recall(prepared),
                PreparedCall::Joined(prepared) => memory.abandon_joined(prepared),
                PreparedCall::WithRecall => {}
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
        if let Some(PreparedCall::Joined(joined)) = prepared {
            self.recall_with_memory(seq, *joined, memory);
            return;
        }
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

    /// Recalls with the query embedded in one request with the cycle's memory. The memory is
    /// stored after the cycle has its answer, in its turn among the agent's memory writes: the
    /// turn is taken only then, so a summary's memory still on its way does not hold up the
    /// recall, and still before the next cycle's memory can be written, which keeps their order.
    fn recall_with_memory(&mut self, seq: u64, joined: PreparedJoined, memory: Arc<Memory>) {
        let handle = self.handle.clone();
        let in_order = self.memory_writes.clone();
        self.tasks.spawn(async move {
            let (hits, embedded) = memory.recall_joined(joined).await;
            let event = Event::Recalled { seq, hits };
            handle.report(ActorMsg::Event { event, reply: None }).await;
            // Letting the actor take its answer first usually means, on the console's one
            // thread, that the memory is indexed while the model call waits for its reply
            // rather than before the call is sent.
            tokio::task::yield_now().await;
            let _turn = in_order.lock().await;
            let _ = memory.keep_joined(embedded);
        });
    }

    /// Writes a cycle's memory in a task; a failed embedding leaves it queued in the store.
    pub(super) fn remember(&mut self, cycle: u64, text: String, prepared: Option<PreparedCall>) {
        match prepared {
            // The recall's request carries it (`recall_with_memory`).
            Some(PreparedCall::WithRecall) => {}
            Some(PreparedCall::Remember(prepared)) => self.write_memory(*prepared),
            _ => {
                let Some(memory) = self.deps.memory.clone() else {
                    return;
                };
                let payer = memory.payer(&self.state);
                let in_order = self.memory_writes.clone();
                self.tasks.spawn(async move {
                    let _turn = in_order.lock().await;
                    let _ = memory
                        .remember(&payer, cycle, MemorySource::Cycle, &text)
                        .await;
                });
            }
        }
    }

    /// Writes a prepared memory in a task, in its turn among the agent's memory writes.
    fn write_memory(&mut self, prepared: PreparedRemember) {
        let Some(memory) = self.deps.memory.clone() else {
            return;
        };
        let in_order = self.memory_writes.clone();
        self.tasks.spawn(async move {
            let _turn = in_order.lock().await;
            let _ = memory.remember_prepared(prepared).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BudgetConfig;
    use crate::core::state::Spender;
    use crate::store::Store;

    /// A reservation made ahead and never used is given back when it is dropped, whatever drops
    /// it; one handed to its call is not (the call settles it).
    #[test]
    fn a_reservation_made_ahead_is_given_back_unless_its_call_takes_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let budgets = Arc::new(Budgets::new(&store, &BudgetConfig::default()).unwrap());
        let payer = Payer {
            agent: "a1".into(),
            spender: Spender::default(),
            agent_limit: Micros(1_000_000),
        };
        let now = chrono::DateTime::<chrono::Utc>::from_timestamp(1_795_000_000, 0).unwrap();
        let ahead = || ThinkAhead {
            seq: 1,
            reservation: Some(
                budgets
                    .reserve_call::<()>(&payer, Micros(500), "m Think", now)
                    .unwrap_or_else(|_| panic!("the budget covers it")),
            ),
            budgets: budgets.clone(),
            payer: payer.clone(),
        };
        let open = || budgets.ledger().open_reservations().unwrap().len();
        drop(ahead());
        assert_eq!(open(), 0, "dropped unused: given back");
        let taken = ahead().into_reservation().unwrap();
        assert_eq!(open(), 1, "taken by its call: still held");
        budgets.ledger().settle(taken.id, Micros(200)).unwrap();
        assert_eq!(open(), 0);
        assert_eq!(
            budgets.ledger().account("agent/a1").unwrap().spent,
            Micros(200)
        );
    }
}
