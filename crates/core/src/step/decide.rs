//! A person's decision on the pending card: an edit goes to `edit`, an approval counts toward
//! its class's quorum, and the decision is recorded in the audit trail with what the card showed
//! before the command runs, the agent stops, or the feedback or critique is taken.

use super::*;

impl Stepper<'_, '_> {
    /// Rethink on the stuck panel (or any card): the proposal is dropped and the model asked
    /// again for this cycle, with the stronger model where there is one, told why it seems stuck.
    fn rethink_stuck(&mut self) {
        self.state.safety.auto_approvals_left = 0;
        let pending = self.state.progress.pending.take();
        self.state.safety.rethink_requested = Some(pending.as_ref().map_or(0, |p| p.revision + 1));
        let why = pending.and_then(|p| p.stuck).map_or_else(
            || "a person did not like the proposed command".to_string(),
            |s| s.why,
        );
        self.state.progress.phase = Phase::Thinking;
        let messages = super::super::prompt::stuck_rethink_messages(self.cycle_prompt(), &why);
        let model = self.rethink_model();
        self.ask_for_reply(CallPurpose::Rethink, messages, model);
    }

    /// Applies a human's decision on the pending proposal of `cycle`.
    pub(super) fn on_decision(&mut self, cycle: u64, decision: Decision, by: Person) {
        let ctx = self.ctx;
        if !self.state.awaits_decision_on(cycle) {
            self.fx
                .push(Effect::Rejected(NO_LONGER_PENDING.to_string()));
            return;
        }
        let decision = match decision {
            Decision::Edit(args) => return self.apply_edit(*args, by),
            other => other,
        };
        let approving = decision.is_approval();
        if approving {
            // The policy may have become stricter since the card was shown (the owner narrowed it,
            // or the bot restarted with a stricter config): the policy in force now decides.
            let denial = self.state.progress.pending.as_ref().and_then(|p| {
                ctx.policy
                    .denial(&self.state.brief.settings.policy, &p.command.name, p.risk)
            });
            if let Some(denial) = denial {
                self.state.safety.auto_approvals_left = 0;
                let command = self.shown_pending().map(|s| s.command).unwrap_or_default();
                self.audit(
                    by.clone(),
                    AuditEvent::NotRun {
                        cycle,
                        command,
                        why: "its class is now denied by policy".into(),
                    },
                );
                self.fx.push(Effect::Notify(format!(
                    "Cycle {}: the approved command was not run: its class is now denied by policy.",
                    self.state.progress.cycle
                )));
                self.record_from_pending(Outcome::Error(denial), Some(ActedBy::person(by)));
                self.begin_cycle();
                return;
            }
        }
        let by = match approving {
            true => match self.count_approval(by) {
                Some(all) => all,
                None => return,
            },
            false => ActedBy::person(by),
        };
        let soft_capped = ctx.budget.is_some_and(BudgetView::soft_cap_reached);
        if let Some(shown) = self.shown_pending() {
            let edited_by = self
                .state
                .progress
                .pending
                .as_ref()
                .map(|p| p.edits.iter().map(|edit| edit.by.clone()).collect())
                .unwrap_or_default();
            let mut event = AuditEvent::decided(cycle, &decision, shown, edited_by);
            if let (Decision::ApproveN(_), true, AuditEvent::Decided { decision, .. }) =
                (&decision, soft_capped, &mut event)
            {
                decision.push_str(" (this step only: the soft cap is reached)");
            }
            self.audit(by.clone(), event);
        }
        match decision {
            Decision::Approve => self.start_execution(by),
            Decision::Remember(draft) => {
                if let Some(person) = by.people().first().cloned() {
                    self.keep_rule(cycle, *draft, &person);
                }
                self.start_execution(by);
            }
            Decision::ApproveN(n) => {
                match ctx.budget.filter(|view| view.soft_cap_reached()) {
                    Some(view) => {
                        self.state.safety.auto_approvals_left = 0;
                        self.fx.push(Effect::Notify(format!(
                            "Approved this step only. {}",
                            view.soft_cap_note()
                        )));
                    }
                    None => self.state.safety.auto_approvals_left = n.saturating_sub(1),
                }
                self.start_execution(by);
            }
            Decision::Deny => {
                self.state.safety.auto_approvals_left = 0;
                // One deny ends the count: a resumed proposal gathers its approvals anew.
                if let Some(pending) = self.state.progress.pending.as_mut() {
                    pending.approvals.clear();
                }
                let by = by.people().first().cloned();
                if let Some(by) = by {
                    self.pause(PauseReason::Denied { by });
                }
            }
            Decision::Feedback(text) => {
                self.state.safety.auto_approvals_left = 0;
                self.record_from_pending(Outcome::HumanFeedback(text), Some(by));
                self.begin_cycle();
            }
            Decision::Edit(_) => {}
            Decision::Rethink => self.rethink_stuck(),
            Decision::Skip => {
                self.state.safety.auto_approvals_left = 0;
                let skipped = format!(
                    "{} skipped this step: the command was not run. Do not propose it again; try a different approach.",
                    by.names()
                );
                self.record_from_pending(Outcome::HumanFeedback(skipped), Some(by));
                self.begin_cycle();
            }
            Decision::SelfCritique => {
                let Some(pending) = self.state.progress.pending.as_mut() else {
                    return;
                };
                pending.approved_by = Some(by);
                let profile = self
                    .state
                    .brief
                    .profile
                    .clone()
                    .unwrap_or_else(Profile::fallback);
                let messages =
                    self_critique_messages(&profile, &pending.thoughts, &pending.command);
                pending.deadline = None;
                self.state.progress.phase = Phase::Critiquing;
                self.call_model(
                    CallPurpose::SelfCritique,
                    messages,
                    CRITIQUE_MAX_TOKENS.min(ctx.limits.max_tokens),
                    None,
                    ModelChoice::Usual,
                );
            }
        }
    }
}
