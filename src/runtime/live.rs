//! The actor's side of the live status: after every step it works out what its agent is doing now
//! (`Doing`) and since when, and tells the surface when that or the agent's progress changed.
//!
//! `report_status` runs after every message the actor handles, from the agent's phase and the rate
//! limit it waits for, and only for a surface that shows a live status, so the console pays
//! nothing.

use super::surface::{Doing, LiveStatus};
use super::Actor;
use crate::budget::Budgets;
use crate::core::state::Phase;

impl Actor {
    /// What the agent is doing now, from its phase (and the rate limit it waits for).
    fn doing(&self) -> Doing {
        let now = self.deps.clock.now();
        match &self.state.progress.phase {
            Phase::Creating => Doing::Starting,
            Phase::Thinking => match &self.state.progress.paced {
                Some(pacing) if pacing.until > now => Doing::RateLimited {
                    until: pacing.until,
                    why: pacing.why.clone(),
                },
                _ => Doing::Thinking,
            },
            Phase::AwaitingDecision => Doing::WaitingForApproval,
            Phase::Critiquing => Doing::Critiquing,
            Phase::Executing => Doing::Running {
                command: self
                    .state
                    .progress
                    .pending
                    .as_ref()
                    .map(|p| p.command.name.clone())
                    .unwrap_or_default(),
            },
            Phase::Paused(reason) => Doing::Paused {
                why: reason.describe(),
            },
            Phase::Finished { .. } => Doing::Finished,
        }
    }

    /// Tells the surface what the agent is doing when it changed since the last time; `since`
    /// moves only when the activity itself changes.
    pub(super) fn report_status(&mut self) {
        if !self.deps.surface.wants_status() {
            return;
        }
        let doing = self.doing();
        let since = match &self.live {
            Some(last) if last.doing == doing => last.since,
            _ => self.deps.clock.now(),
        };
        let account = self
            .deps
            .budgets
            .ledger()
            .account(&Budgets::agent_account(&self.state.id))
            .unwrap_or_default();
        let subagents = self
            .deps
            .store
            .subagents(&self.state.id)
            .map_or(0, |found| found.len());
        let status = LiveStatus {
            doing,
            since,
            cycle: self.state.progress.cycle,
            spent: account.spent,
            reserved: account.reserved,
            budget: self.deps.budgets.agent_limit(&self.state),
            soft_cap_percent: self.deps.budgets.soft_cap_percent(),
            subagents,
        };
        if self.live.as_ref() != Some(&status) {
            self.deps.surface.status(&self.state, &status);
            self.live = Some(status);
        }
    }
}
