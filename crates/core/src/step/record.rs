//! Recording on `Stepper`: a finished command's outcome (capped, then kept as the cycle's episode
//! with its memory), after which the agent finishes or begins its next cycle.
//!
//! An outcome too long for the context window becomes an error (AutoGPT's failure message).
//! `on_command_finished` also sets the agent's `Taint` after an untrusted read (see `taint`).
//! Closing a cycle notes what it cost (`note_spend`, for the card and the brake), emits `Remember`
//! when memory is on and the episode needs no model summary (the others are remembered when their
//! summary arrives, so the memory carries the condensed line), keeps the episode through
//! `AgentState::record_episode` (see `history::EarlierSteps`) and moves to the next cycle number.

use super::*;

impl Stepper<'_, '_> {
    /// Records the outcome of the running command of `cycle`, then finishes the agent or begins
    /// the next cycle.
    pub(super) fn on_command_finished(&mut self, cycle: u64, outcome: Outcome) {
        if self.state.progress.phase != Phase::Executing
            || self.state.pending_cycle() != Some(cycle)
        {
            return;
        }
        let Some(pending) = self.state.progress.pending.clone() else {
            return;
        };
        let ctx = self.ctx;
        let outcome = if ctx.counter.count(outcome.text()) > ctx.limits.max_result_tokens() {
            Outcome::Error(format!(
                "Failure: command {} returned too much output. Do not execute this command again with the same arguments.",
                pending.command.name
            ))
        } else {
            outcome
        };
        let finished = pending.command.name == FINISH && matches!(outcome, Outcome::Success(_));
        let untrusted = ctx
            .commands
            .get(&pending.command.name)
            .is_some_and(|spec| spec.reads_untrusted);
        if untrusted
            && self.state.safety.tainted.is_none()
            && crate::taint::carries_untrusted(&outcome)
        {
            self.state.safety.tainted = Some(Taint {
                cycle,
                command: pending.command.name.clone(),
            });
        }
        self.record_from_pending(outcome, pending.approved_by.clone());
        if finished {
            let reason = pending
                .command
                .args
                .get("reason")
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string();
            self.finish(reason);
        } else {
            self.begin_cycle();
        }
    }

    /// Closes the current cycle with an episode of the pending proposal and `outcome`.
    pub(super) fn record_from_pending(&mut self, outcome: Outcome, by: Option<ActedBy>) {
        if let Some(pending) = self.state.progress.pending.take() {
            // The transcript says whose arguments ran when they were not the model's.
            let edited_by = pending.edits.into_iter().map(|edit| edit.by).collect();
            let episode =
                self.new_episode(pending.command, pending.thoughts.reasoning, outcome, by);
            self.close_cycle(Episode {
                edited_by,
                ..episode
            });
        }
    }

    /// Closes the current cycle with an episode and moves to the next cycle number.
    pub(super) fn record_episode(
        &mut self,
        command: CommandCall,
        reasoning: String,
        outcome: Outcome,
        decided_by: Option<ActedBy>,
    ) {
        let episode = self.new_episode(command, reasoning, outcome, decided_by);
        self.close_cycle(episode);
    }

    /// The episode closing the current cycle, with what the agent spent in it.
    fn new_episode(
        &mut self,
        command: CommandCall,
        reasoning: String,
        outcome: Outcome,
        decided_by: Option<ActedBy>,
    ) -> Episode {
        Episode {
            cycle: self.state.progress.cycle,
            command,
            reasoning,
            outcome,
            summary: None,
            decided_by,
            edited_by: Vec::new(),
            cost: self.note_spend(),
        }
    }

    /// Records `episode` and moves to the next cycle number.
    fn close_cycle(&mut self, episode: Episode) {
        let cycle = episode.cycle;
        // A step that needs no model summary is remembered now; the others when their summary
        // arrives, so that the memory carries the condensed line.
        if let Some(memory) = self
            .ctx
            .memory
            .as_ref()
            .filter(|_| !episode.needs_model_summary())
        {
            self.fx.push(Effect::Remember {
                cycle,
                text: cycle_memory_text(&episode, memory.text_chars),
            });
        }
        self.state.record_episode(episode);
        self.state.progress.pending = None;
        // A person's rethink holds for its cycle only, through restarts and resumes.
        self.state.safety.rethink_requested = None;
        self.state.progress.cycle += 1;
        self.state.progress.cycles_since_resume += 1;
        self.fx.push(Effect::EpisodeRecorded { cycle });
    }
}
