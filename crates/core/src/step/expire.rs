//! A card nobody decided in time: its class's action on expiry (`core::expiry`), applied when the
//! runtime's timer reports the deadline and only if the card still waits and the deadline (which an
//! escalation moves) has passed, so a late or repeated timer changes nothing.
//!
//! Deny records the step as not run and thinks again; escalate calls the approvers once with a
//! second deadline; park (or a second escalation) pauses with `PauseReason::Unanswered`. Each emits
//! `Effect::Expired` and an audit entry. A card shown anew (a resume) gets a new deadline
//! (`show_pending_again`); an edit or an approval keeps it.

use super::Stepper;
use crate::audit::AuditEvent;
use crate::event::Effect;
use crate::expiry::{ExpiryAction, DEADLINE};
use crate::history::Outcome;
use crate::person::ActedBy;
use crate::state::PauseReason;

impl Stepper<'_, '_> {
    pub(super) fn on_deadline_passed(&mut self, cycle: u64) {
        let now = self.ctx.now;
        if !self.state.awaits_decision_on(cycle) {
            return;
        }
        let Some(pending) = self.state.progress.pending.as_mut() else {
            return;
        };
        let Some(deadline) = pending.deadline.filter(|d| d.at <= now) else {
            return;
        };
        let command = pending.command.name.clone();
        let shown = pending.clone();
        let waited = deadline.waited();
        let escalate = deadline.action == ExpiryAction::Escalate && !deadline.escalated;
        let (action, text) = if escalate {
            pending.deadline = Some(deadline.escalate(now));
            (
                "approvers called",
                format!(
                    "Nobody decided on cycle {cycle} (`{command}`) within {waited}: calling the approvers. If nobody decides within {waited} more, the agent is parked."
                ),
            )
        } else if deadline.action == ExpiryAction::Deny {
            pending.deadline = None;
            (
                "not run",
                format!("Nobody decided within {waited}: `{command}` was not run."),
            )
        } else {
            // A resume shows the card again with a deadline of its own, and, as after a Deny,
            // gathers its approvals anew.
            pending.deadline = None;
            pending.approvals.clear();
            (
                "agent parked",
                format!("Nobody decided within {waited}: the agent is parked; `/agent resume` shows this card again."),
            )
        };
        self.audit(
            ActedBy::Automatic(DEADLINE.into()),
            AuditEvent::Expired {
                cycle,
                command: command.clone(),
                action: action.into(),
            },
        );
        self.fx.push(Effect::Expired {
            proposal: shown,
            text,
            escalate,
        });
        self.state.safety.auto_approvals_left = 0;
        match deadline.action {
            _ if escalate => self.show_pending_again(),
            ExpiryAction::Deny => {
                let told = format!(
                    "Nobody decided on `{command}` within {waited}, so it was not run. Consider another way."
                );
                self.record_from_pending(
                    Outcome::Error(told),
                    Some(ActedBy::Automatic(DEADLINE.into())),
                );
                self.begin_cycle();
            }
            ExpiryAction::Park | ExpiryAction::Escalate => {
                self.pause(PauseReason::Unanswered { cycle, waited })
            }
        }
    }
}
