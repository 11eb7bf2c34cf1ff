//! Forking an agent: a new agent with another's history, workspace and (through the memory
//! service) memories as they were when one of its cycles closed, the original left untouched.

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
            .map_err(|why| UserError(format!("It cannot be forked from cycle {cycle}: {why}.")))?;
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
        by: &str,
        guild: GuildId,
    ) -> ServiceResult<AgentState> {
        let now = self.clock.now();
        let mut fork = AgentState::new(
            id,
            source.task.clone(),
            source.profile.clone(),
            source.settings.clone(),
            now,
        );
        fork.follow_ups = source.follow_ups.clone();
        fork.cycle = cycle + 1;
        fork.spent_at_last_cycle = Some(Micros::ZERO);
        fork.spender = Spender {
            user: Some(who.user_id.to_string()),
            guild: Some(guild),
        };
        // Untrusted content read by then is in the fork's history too.
        fork.tainted = source.tainted.clone().filter(|t| t.cycle <= cycle);
        let forked_from = AuditEntry {
            at: now,
            by: by.to_string(),
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
                by: by.to_string(),
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
