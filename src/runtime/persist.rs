//! Storing what a step changed: `Actor::persist` carries out the step's `StoragePlan` (nothing,
//! the start alone, or the whole commit with or without a flush; `storage_plan` decides which
//! and says why), in one write and at most one flush, before any effect of the step becomes
//! visible (persist before you post). Trail entries of a step not stored on its own wait in
//! `Actor::unstored_audit` and go first into the next write, since they happened first.

use super::storage_plan::{
    self, Cause, Flush, Journal, ProposalOrder, Reservations, Starting, StoragePlan, Surroundings,
};
use super::{Actor, Executed, RuntimeError};
use crate::core::audit::AuditEntry;
use crate::core::event::Effect;
use crate::core::reply::CommandCall;
use crate::store::Commit;

impl Actor {
    /// Stores what the step changed as its `StoragePlan` says, with the reservations of the
    /// step's memory calls and model call made durable by the same flush.
    pub(super) async fn persist(
        &mut self,
        cause: Cause,
        effects: &[Effect],
        executed: Option<Executed>,
        reservations: Reservations,
    ) -> Result<(), RuntimeError> {
        let step = storage_plan::Step {
            cause,
            effects,
            reservations,
        };
        let around = Surroundings {
            proposals: match self.deps.surface.needs_stored_proposals() {
                true => ProposalOrder::StoreThenShow,
                false => ProposalOrder::ShowMayComeFirst,
            },
            starting: match self.deps.drain.is_raised() {
                true => Starting::HeldByDrain,
                false => Starting::Allowed,
            },
            commands: &self.deps.tools.command_set(),
        };
        match storage_plan::plan(&step, &around) {
            StoragePlan::Nothing => {
                self.unstored_audit.extend(trail_entries(effects).cloned());
                Ok(())
            }
            StoragePlan::StartAlone => match starts(effects).next() {
                Some((cycle, call)) => self.store_start_alone(cycle, call, effects).await,
                // The plan names a start alone only for a step that starts a command; were it
                // otherwise, storing the whole step is the safe way.
                None => {
                    self.commit_step(effects, executed, Journal::NothingStarts, Flush::Now)
                        .await
                }
            },
            StoragePlan::Commit { journal, flush } => {
                self.commit_step(effects, executed, journal, flush).await
            }
        }
    }

    /// Stores the whole step in one `Store::commit`, after the journal's `executing` record of
    /// each command it starts (written before the flush, so an auto-approved command costs no
    /// flush of its own), and flushes it when the plan says so.
    async fn commit_step(
        &mut self,
        effects: &[Effect],
        executed: Option<Executed>,
        journal: Journal,
        flush: Flush,
    ) -> Result<(), RuntimeError> {
        if journal == Journal::Starts {
            for (cycle, call) in starts(effects) {
                self.deps.store.record_executing_fenced(
                    &self.state.id,
                    cycle,
                    call,
                    self.deps.clock.now(),
                    self.fence,
                )?;
            }
        }
        let episodes = effects
            .iter()
            .filter_map(|e| match e {
                Effect::EpisodeRecorded { cycle } => self.state.episode(*cycle),
                _ => None,
            })
            .collect::<Vec<_>>();
        let (finished_command, workspace) = match &executed {
            Some((cycle, _, _, ops)) => (Some(*cycle), ops.clone()),
            None => (None, Vec::new()),
        };
        // Entries of a step stored with this one come first: they happened first.
        let unstored_audit = std::mem::take(&mut self.unstored_audit);
        let mut audit: Vec<_> = unstored_audit.iter().collect();
        audit.extend(trail_entries(effects));
        let commit = Commit {
            state: Some(&self.state),
            episodes,
            finished_command,
            workspace,
            audit,
            server_rule: effects.iter().find_map(|e| match e {
                Effect::SaveServerRule(rule) => Some(rule),
                _ => None,
            }),
        };
        self.deps.store.commit_fenced(&commit, self.fence)?;
        if flush == Flush::Now {
            self.deps.store.flush().await?;
        }
        Ok(())
    }

    /// Stores the start of an approved command as its journal entry, with the step's trail
    /// entries and any kept from an unstored step, and flushes before the command runs. The
    /// agent's record stays as it was stored with the proposal: a reader sees it executing by the
    /// journal entry, and a restart finds the command interrupted (see `store::started`).
    async fn store_start_alone(
        &mut self,
        cycle: u64,
        call: &CommandCall,
        effects: &[Effect],
    ) -> Result<(), RuntimeError> {
        let unstored_audit = std::mem::take(&mut self.unstored_audit);
        let mut audit: Vec<_> = unstored_audit.iter().collect();
        audit.extend(trail_entries(effects));
        self.deps.store.record_start_fenced(
            &self.state.id,
            cycle,
            call,
            self.deps.clock.now(),
            &audit,
            self.fence,
        )?;
        self.deps.store.flush().await?;
        Ok(())
    }
}

/// The step's entries for the audit trail, in order.
fn trail_entries(effects: &[Effect]) -> impl Iterator<Item = &AuditEntry> {
    effects.iter().filter_map(|e| match e {
        Effect::Audit(entry) => Some(entry),
        _ => None,
    })
}

/// The commands the step starts: (cycle, call).
fn starts(effects: &[Effect]) -> impl Iterator<Item = (u64, &CommandCall)> {
    effects.iter().filter_map(|e| match e {
        Effect::Execute { cycle, call, .. } => Some((*cycle, call)),
        _ => None,
    })
}
