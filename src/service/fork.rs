//! Forking an agent (a new agent with another's history, workspace and, through the memory service,
//! memories as they were when one of its cycles closed, the original left untouched) and rewinding
//! one in place to such a cycle.
//!
//! `fork_cycle` picks and checks the cycle (`Store::check_fork`). `fork` builds the fork's state:
//! the source's task, follow-ups, profile and settings, cycle `from + 1`, phase `Creating` so that
//! `Event::Start` shows its profile and begins its next cycle, its own spender, and the source's
//! taint if it was tainted by then; the store writes it with `AuditEvent::ForkedFrom` on its trail,
//! and `Forked` goes on the source's.
//!
//! `rewind` takes a resting agent: its next cycle is numbered after every cycle it had, so no card
//! or record of the undone cycles can act on a new step; its phase becomes `Thinking` and the
//! proposal, Approve ×N's count, the counters of invalid replies and refusals, the rethink, the
//! requested pause and finish, the pacing, the recalled memories and the brake are cleared. The
//! taint stays, since sub-agents started since are kept and what they read may come back.
//! `Store::rewind_agent` writes it all at once. The caller forgets the undone cycles' memories
//! first (`Memory::forget_after`).

use crate::core::person::Person;
use anyhow::Context as _;

use super::rights::Requester;
use super::{AgentService, ServiceResult, UserError};
use crate::core::audit::{AuditEntry, AuditEvent};
use crate::core::budget::Micros;
use crate::core::state::{AgentState, GuildId, Spender};

impl AgentService {
    /// The cycle a fork of `source` starts from: `asked`, or its last closed cycle, checked
    /// against what the store still holds.
    pub fn fork_cycle(&self, source: &AgentState, asked: Option<u64>) -> ServiceResult<u64> {
        let cycle = asked.unwrap_or_else(|| source.last_episode().map_or(0, |e| e.cycle));
        self.store
            .check_fork(source, cycle)
            .map_err(|why| UserError(format!("It cannot go back to cycle {cycle}: {why}.")))?;
        Ok(cycle)
    }

    /// Stores the fork `id` of `source` from `cycle`, owned and paid for by `who` (named `by` on
    /// both agents' trails), and returns it loaded with its steps, ready to start. Its own
    /// approve-and-remember rules, sub-agents and spend start empty.
    pub fn fork(
        &self,
        source: &AgentState,
        cycle: u64,
        id: String,
        who: &Requester,
        by: &Person,
        guild: GuildId,
    ) -> ServiceResult<AgentState> {
        let now = self.clock.now();
        let mut fork = AgentState::new(
            id,
            source.brief.task.clone(),
            source.brief.profile.clone(),
            source.brief.settings.clone(),
            now,
        );
        fork.brief.follow_ups = source.brief.follow_ups.clone();
        fork.progress.cycle = cycle + 1;
        fork.progress.history_from = Some(cycle);
        fork.money.spent_at_last_cycle = Some(Micros::ZERO);
        fork.money.spender = Spender {
            user: Some(who.user_id.to_string()),
            guild: Some(guild),
        };
        // Untrusted content read by then is in the fork's history too.
        fork.safety.tainted = source.safety.tainted.clone().filter(|t| t.cycle <= cycle);
        let forked_from = AuditEntry {
            at: now,
            by: by.into(),
            event: AuditEvent::ForkedFrom {
                agent: source.id.clone(),
                name: source.name().to_string(),
                cycle,
            },
        };
        self.store
            .fork_agent(&source.id, cycle, &fork, &forked_from)?;
        self.store.append_audit(
            &source.id,
            &AuditEntry {
                at: now,
                by: by.into(),
                event: AuditEvent::Forked {
                    fork: fork.id.clone(),
                    cycle,
                },
            },
        )?;
        self.store
            .load_agent(&fork.id)?
            .context("the fork vanished as it was stored")
    }
}

impl AgentService {
    /// Rewinds the resting agent `current` in place to how it was after `cycle` (checked as for a
    /// fork), by `by`: returns its new state, ready to think again, and how many steps were
    /// undone. Its next cycle is numbered after every cycle it had, so no card or record of the
    /// undone cycles can act on a new step.
    pub fn rewind(
        &self,
        current: &AgentState,
        cycle: u64,
        by: &Person,
    ) -> ServiceResult<(AgentState, usize)> {
        self.fork_cycle(current, Some(cycle))?;
        let now = self.clock.now();
        let mut state = current.clone();
        state.restart_after_rewind(now);
        let audit = |steps| AuditEntry {
            at: now,
            by: by.into(),
            event: AuditEvent::Rewound { cycle, steps },
        };
        let removed = self.store.rewind_agent(cycle, &state, audit)?;
        let state = self
            .store
            .load_agent(&state.id)?
            .context("the agent vanished as it was rewound")?;
        Ok((state, removed))
    }
}
