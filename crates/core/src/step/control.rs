//! The human and money half of the loop: budget refusals, rate-limit waits, budget and policy
//! changes, Continue from a parked card, pause and resume, and what each cycle cost.
//!
//! `on_call_refused` pauses with `PauseReason::Budget` naming the budget that ran out. Stop on a
//! parked agent makes it a person's pause. `on_finish` closes a waiting proposal as not run, so its
//! card can never decide a later proposal of the same number; during a command, `finish_requested`
//! ends the task when the command returns, before a requested pause. `on_resume` clears the brake.

use super::Stepper;
use crate::audit::AuditEvent;
use crate::brake::SpendSample;
use crate::budget::{BudgetStop, Micros, Pacing};
use crate::commands::Risk;
use crate::event::{CallPurpose, Effect};
use crate::history::Outcome;
use crate::person::{ActedBy, Person};
use crate::policy::ClassAction;
use crate::state::{PauseReason, Phase};

impl Stepper<'_, '_> {
    /// The ledger refused a call: no budget can pay for its worst case. The agent pauses where it is
    /// (a summary simply waits for a later cycle) and continues when the budget is raised.
    pub(super) fn on_call_refused(&mut self, seq: u64, purpose: CallPurpose, reason: String) {
        if matches!(purpose, CallPurpose::Summary { .. }) || seq != self.state.progress.call_seq {
            return;
        }
        match (purpose, &self.state.progress.phase) {
            (CallPurpose::SelfCritique, Phase::Critiquing) => {
                self.fx.push(Effect::Notify(format!(
                    "The self-critique was not run: {reason}. The proposal is still waiting for a decision."
                )));
                self.show_pending_again();
            }
            (_, Phase::Thinking | Phase::Creating) => {
                // The tightest budget is the one that refused; the card offers to raise it.
                let stop = self.ctx.budget.map(|view| BudgetStop {
                    kind: view.tightest,
                    limit: view.tightest_limit,
                    spent: view.tightest_limit.saturating_sub(view.remaining),
                });
                self.pause(PauseReason::Budget {
                    message: reason,
                    stop,
                })
            }
            _ => {}
        }
    }

    /// The current call waits for a rate limit; a long wait is announced, and the proposal will
    /// say it waited.
    pub(super) fn on_paced(&mut self, seq: u64, purpose: CallPurpose, pacing: Pacing) {
        if seq == self.state.progress.call_seq && !matches!(purpose, CallPurpose::Summary { .. }) {
            if pacing.until - self.ctx.now >= chrono::Duration::seconds(super::PACING_NOTICE_SECS) {
                self.fx.push(Effect::Notify(format!(
                    "Rate limited: {}.",
                    pacing.describe()
                )));
            }
            self.state.progress.paced = Some(pacing);
        }
    }

    /// A new budget for the agent; one paused because its budget ran out continues by itself.
    pub(super) fn on_set_budget(&mut self, budget: Micros, by: Person) {
        self.state.brief.settings.budget = Some(budget);
        self.fx.push(Effect::Notify(format!(
            "{} set the agent's budget to {}.",
            by.name,
            crate::budget::format_usd(budget)
        )));
        self.audit(by, AuditEvent::BudgetChanged { budget });
        if matches!(
            self.state.progress.phase,
            Phase::Paused(PauseReason::Budget { .. })
        ) {
            self.on_resume(None);
        }
    }

    /// Someone let a parked agent go on from its card, with a new budget if they raised it.
    pub(super) fn on_continue(&mut self, by: Person, budget: Option<Micros>) {
        if !matches!(self.state.progress.phase, Phase::Paused(_)) {
            self.fx.push(Effect::Rejected(format!(
                "the agent is not paused ({})",
                self.state.progress.phase.label()
            )));
            return;
        }
        if let Some(budget) = budget {
            self.state.brief.settings.budget = Some(budget);
        }
        let budget_note = budget.map_or(String::new(), |b| {
            format!(" with a budget of {}", crate::budget::format_usd(b))
        });
        self.fx.push(Effect::Notify(format!(
            "{} let the agent go on{budget_note}.",
            by.name
        )));
        self.audit(by, AuditEvent::Continued { budget });
        self.on_resume(None);
    }

    /// The owner narrows a class for this agent; the core checks again that it is no wider than the
    /// server's policy, so no surface can widen it by mistake.
    pub(super) fn on_set_policy(&mut self, risk: Risk, action: Option<ClassAction>, by: Person) {
        let ctx = self.ctx;
        match action {
            Some(action) => {
                if let Err(why) = ctx.policy.check_narrowing(risk, action) {
                    self.fx.push(Effect::Rejected(why.to_string()));
                    return;
                }
                self.state.brief.settings.policy.insert(risk, action);
            }
            None => {
                self.state.brief.settings.policy.remove(&risk);
            }
        }
        let (now, _) = ctx
            .policy
            .effective(&self.state.brief.settings.policy, risk);
        self.fx.push(Effect::Notify(format!(
            "{} set {} commands to `{}` for this agent.",
            by.name,
            risk.label(),
            now.label()
        )));
        self.audit(
            by,
            AuditEvent::PolicyChanged {
                class: risk.label().to_string(),
                action: now.label().to_string(),
            },
        );
    }

    /// What the cycle closing now cost (the agent's spend since the last cycle closed), noted for
    /// the runaway brake with the time and the tokens used so far.
    pub(super) fn note_spend(&mut self) -> Micros {
        let Some(view) = self.ctx.budget else {
            return Micros::ZERO;
        };
        // An agent saved before costs were kept has no baseline: its first step gets none rather
        // than its whole past spend.
        let cost = self
            .state
            .money
            .spent_at_last_cycle
            .map_or(Micros::ZERO, |before| {
                view.agent_spent.saturating_sub(before)
            });
        self.state.money.spent_at_last_cycle = Some(view.agent_spent);
        if let Some(limits) = &self.ctx.brake {
            let usage = &self.state.money.usage;
            let sample = SpendSample {
                at: self.ctx.now,
                micros: view.agent_spent,
                tokens: usage.prompt_tokens + usage.completion_tokens,
            };
            self.state.safety.brake.record(sample, limits.window);
        }
        cost
    }

    /// Pauses the agent at once, or when its running command returns.
    pub(super) fn on_pause(&mut self, by: Person) {
        match self.state.progress.phase {
            Phase::Creating | Phase::Thinking | Phase::AwaitingDecision | Phase::Critiquing => {
                if self.state.progress.phase == Phase::Critiquing {
                    self.state.progress.phase = Phase::AwaitingDecision;
                }
                self.state.safety.auto_approvals_left = 0;
                self.pause(PauseReason::ByUser { by });
            }
            Phase::Executing => {
                // A running command is never cut short; the pause takes effect when it returns.
                self.state.safety.auto_approvals_left = 0;
                self.state.progress.pause_requested = Some(by);
                self.fx.push(Effect::Notify(
                    "The agent will pause when the running command finishes.".into(),
                ));
            }
            // Parked for its budget or by the brake, it would go on by itself once a budget is
            // raised; stopped, it waits for a human's resume.
            Phase::Paused(PauseReason::Budget { .. } | PauseReason::Runaway { .. }) => {
                self.pause(PauseReason::ByUser { by })
            }
            Phase::Paused(_) | Phase::Finished { .. } => self.fx.push(Effect::Rejected(format!(
                "the agent is already {}",
                self.state.progress.phase.label()
            ))),
        }
    }

    /// Ends the agent's task at once, or when its running command returns; a proposal waiting
    /// for a decision is dropped, not run.
    pub(super) fn on_finish(&mut self, by: Person) {
        match self.state.progress.phase {
            Phase::Executing => {
                // A running command is never cut short (an `ask_user` wait is withdrawn by the
                // runtime): the task ends when it returns.
                self.state.safety.auto_approvals_left = 0;
                self.state.progress.finish_requested = Some(by);
                self.fx.push(Effect::Notify(
                    "The agent will finish when the running command returns.".into(),
                ));
            }
            Phase::Finished { .. } => self
                .fx
                .push(Effect::Rejected("the agent has already finished".into())),
            _ => {
                // The waiting proposal closes its cycle as not run, so that its card's buttons
                // can never decide a later proposal of the same number.
                if self.state.progress.pending.is_some() {
                    let why = format!("Not run: {} finished the agent's task.", by.name);
                    self.record_from_pending(Outcome::HumanFeedback(why), Some(ActedBy::from(&by)));
                }
                self.finish(format!("Finished by {}.", by.name));
            }
        }
    }

    /// Continues a paused agent where it stopped, or a finished one with a follow-up task.
    pub(super) fn on_resume(&mut self, follow_up: Option<String>) {
        let follow_up = follow_up
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        match &self.state.progress.phase {
            Phase::Finished { .. } => match follow_up {
                Some(task) => {
                    self.state.brief.follow_ups.push(task);
                    let cycle = self.state.progress.cycle;
                    self.state.safety.brake.clear(cycle);
                    self.state.progress.cycles_since_resume = 0;
                    self.begin_cycle();
                }
                None => self.fx.push(Effect::Rejected(
                    "the agent has finished; give it a follow-up task to continue".into(),
                )),
            },
            Phase::Paused(_) => {
                if let Some(task) = follow_up {
                    self.state.brief.follow_ups.push(task);
                }
                // A human looked and let it go on: the runaway brake counts from here.
                let cycle = self.state.progress.cycle;
                self.state.safety.brake.clear(cycle);
                self.state.safety.invalid_replies_in_row = 0;
                self.state.progress.cycles_since_resume = 0;
                if self.state.progress.pending.is_some() {
                    self.show_pending_again();
                } else if self.state.brief.profile.is_none() {
                    self.state.progress.phase = Phase::Creating;
                    self.request_profile();
                } else {
                    self.begin_cycle();
                }
            }
            _ => self.fx.push(Effect::Rejected(format!(
                "the agent is already running ({})",
                self.state.progress.phase.label()
            ))),
        }
    }
}
