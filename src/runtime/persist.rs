//! Storing what a step changed: `Actor::persist`, one write and at most one flush before any effect
//! of the step becomes visible (persist before you post). It chooses one of four ways from the
//! step's effects:
//!
//! - Nothing at all, for a step that only shows an auto-approved proposal and starts a command that
//!   lands with its result (`CommandSpec::lands_with_result`, the file commands), on a surface that
//!   may show proposals before they are stored (`Surface::needs_stored_proposals` is false only for
//!   the console, since Discord's cards are posted exactly once). The command's change lands in the
//!   same write as its result, so a crash before that write loses the step whole and the restart
//!   asks the model again. Its trail entries wait in `Actor::unstored_audit` for the next write.
//! - The start alone, when a person's approval is all the step changed
//!   (`Effect::Execute::only_approved`): the journal entry and the approval's trail entries in one
//!   write (`Store::record_start`, see `store::started`), flushed; the agent's record stays as it
//!   was stored with the proposal.
//! - Not stored, for a step that only takes a recall's answer and must not flush: what a recall
//!   found only shapes the prompt of the call the step starts, and a restart recalls again.
//! - Otherwise the whole step in one `Store::commit` (the state, its episodes, the finished
//!   command's removal from the journal, its workspace changes, its trail entries, a server rule),
//!   with the `executing` journal record of a command it starts written before it. The write is
//!   flushed when it holds something a person or a restart relies on: an episode, a proposal, a
//!   command's start or result, a trail entry, a server rule, or the reservations of the step's
//!   memory calls and its model call (see `memory_calls`).

use super::{Actor, Executed, RuntimeError};
use crate::core::event::Effect;
use crate::core::reply::CommandCall;
use crate::store::Commit;

impl Actor {
    /// Stores what the step changed before any effect becomes visible (persist before you post),
    /// with the journal's `executing` record of a command the step starts (written before the
    /// flush, so an auto-approved command costs no flush of its own) and one flush for all of it
    /// and for the reservations of the step's memory calls.
    ///
    /// A step that only starts an auto-approved command landing with its result is not stored at
    /// all where proposals need not be stored first (see `only_starts_what_lands_with_its_result`):
    /// the result's write stores it, and its trail entries are kept for that write.
    pub(super) async fn persist(
        &mut self,
        effects: &[Effect],
        executed: Option<Executed>,
        reserved: bool,
        answers_recall: bool,
    ) -> Result<(), RuntimeError> {
        if executed.is_none() && !reserved && self.only_starts_what_lands_with_its_result(effects) {
            self.unstored_audit
                .extend(effects.iter().filter_map(|e| match e {
                    Effect::Audit(entry) => Some(entry.clone()),
                    _ => None,
                }));
            return Ok(());
        }
        if let Some((cycle, call)) = self.approved_start_alone(effects, &executed) {
            return self.store_start_alone(cycle, call, effects).await;
        }
        let mut starts_command = false;
        if !self.deps.drain.is_raised() {
            for effect in effects {
                if let Effect::Execute { cycle, call, .. } = effect {
                    self.deps.store.record_executing(
                        &self.state.id,
                        *cycle,
                        call,
                        self.deps.clock.now(),
                    )?;
                    starts_command = true;
                }
            }
        }
        let episodes = effects
            .iter()
            .filter_map(|e| match e {
                Effect::EpisodeRecorded { cycle } => self.state.episode(*cycle),
                _ => None,
            })
            .collect::<Vec<_>>();
        let proposal = effects.iter().find_map(|e| match e {
            Effect::ShowProposal { proposal, .. } => Some(proposal),
            _ => None,
        });
        let step_audit: Vec<_> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Audit(entry) => Some(entry),
                _ => None,
            })
            .collect();
        let (finished_command, workspace) = match &executed {
            Some((cycle, _, _, ops)) => (Some(*cycle), ops.clone()),
            None => (None, Vec::new()),
        };
        // A decision or a change people made is on disk before anyone is told it happened.
        let durable = !episodes.is_empty()
            || effects
                .iter()
                .any(|e| matches!(e, Effect::SaveServerRule(_)))
            || !step_audit.is_empty()
            || proposal.is_some()
            || executed.is_some()
            || starts_command
            || reserved;
        if answers_recall && !durable {
            // What a recall found only shapes the prompt of the call this step starts; a restart
            // recalls again. The state is stored with the reply instead, a record less per cycle.
            return Ok(());
        }
        // Entries of a step stored with this one come first: they happened first.
        let unstored_audit = std::mem::take(&mut self.unstored_audit);
        let mut audit: Vec<_> = unstored_audit.iter().collect();
        audit.extend(step_audit);
        self.deps.store.commit(&Commit {
            state: Some(&self.state),
            episodes,
            finished_command,
            workspace,
            audit,
            server_rule: effects.iter().find_map(|e| match e {
                Effect::SaveServerRule(rule) => Some(rule),
                _ => None,
            }),
        })?;
        if durable {
            self.deps.store.flush().await?;
        }
        Ok(())
    }

    /// The command the step starts, when starting it is all the step does besides the approval's
    /// trail entries (`Effect::Execute::only_approved`).
    fn approved_start_alone<'e>(
        &self,
        effects: &'e [Effect],
        executed: &Option<Executed>,
    ) -> Option<(u64, &'e CommandCall)> {
        if executed.is_some() || self.deps.drain.is_raised() {
            return None;
        }
        let mut start = None;
        for effect in effects {
            match effect {
                Effect::Execute {
                    cycle,
                    call,
                    only_approved: true,
                    ..
                } if start.is_none() => start = Some((*cycle, call)),
                Effect::Execute { .. }
                | Effect::ShowProposal { .. }
                | Effect::EpisodeRecorded { .. }
                | Effect::SaveServerRule(_) => return None,
                _ => {}
            }
        }
        start
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
        audit.extend(effects.iter().filter_map(|e| match e {
            Effect::Audit(entry) => Some(entry),
            _ => None,
        }));
        self.deps
            .store
            .record_start(&self.state.id, cycle, call, self.deps.clock.now(), &audit)?;
        self.deps.store.flush().await?;
        Ok(())
    }

    /// Whether the step only shows an auto-approved proposal and starts its command, a command
    /// whose one effect is the workspace change it returns, on a surface that may show proposals
    /// before they are stored. Such a step needs no write of its own: the command's change lands
    /// in the same write as its result, with this step's state, so a crash before that write
    /// loses the step whole (nothing ran, as far as anything kept can tell) and the restart asks
    /// the model again, exactly as after a crash while it was thinking.
    fn only_starts_what_lands_with_its_result(&self, effects: &[Effect]) -> bool {
        if self.deps.surface.needs_stored_proposals() || self.deps.drain.is_raised() {
            return false;
        }
        let commands = self.deps.tools.command_set();
        let (mut shown, mut started) = (false, false);
        for effect in effects {
            match effect {
                Effect::ShowProposal {
                    auto_approved: true,
                    ..
                } => shown = true,
                Effect::Execute { call, .. }
                    if commands
                        .get(&call.name)
                        .is_some_and(|spec| spec.lands_with_result) =>
                {
                    started = true
                }
                Effect::Audit(_) => {}
                _ => return false,
            }
        }
        shown && started
    }
}
