//! Edit, then approve: a person replaces the pending command's arguments, which are checked as a
//! model's would be, and the card is shown again, saying who changed what. An approval covers what
//! the card showed: a command whose file changed since is shown again instead of run.
//!
//! `apply_edit` validates a person's arguments like a model's, records the `ArgumentEdit`, ends
//! Approve ×N and shows the card again; an edit claims no decision. `argument_text` and
//! `edited_value` are how both surfaces read a typed argument, and `changed_arguments` what the
//! card lists. `count_approval` counts an approval toward its class's quorum, showing the card
//! again until it is reached. `on_command_stale` (`Event::CommandStale`) shows the card again for a
//! new decision when the approved command's file changed after the card was shown.

use serde_json::{Map, Value};

use super::Stepper;
use crate::audit::{AuditEvent, ShownCommand};
use crate::event::Effect;
use crate::person::{ActedBy, Person};
use crate::quorum::Tally;
use crate::reply::CommandCall;
use crate::state::{ArgumentEdit, Phase, MAX_EDITS_KEPT};

/// An argument as a person edits it: a string as it is, anything else as JSON.
pub fn argument_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// What a person typed for an argument whose value was `original`: `None` (remove it) when they
/// emptied it; text for a string (or a new argument); JSON for anything else, left as text when it
/// is not JSON, for the command's validation to name the type it wants.
pub fn edited_value(original: Option<&Value>, typed: &str) -> Option<Value> {
    if typed.trim().is_empty() {
        return None;
    }
    Some(match original {
        Some(Value::String(_)) | None => Value::String(typed.to_string()),
        Some(_) => serde_json::from_str(typed).unwrap_or_else(|_| Value::String(typed.to_string())),
    })
}

/// The names of the arguments that differ between `before` and `after`, in a stable order.
pub fn changed_arguments(before: &Map<String, Value>, after: &Map<String, Value>) -> Vec<String> {
    let mut names: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|name| before.get(*name) != after.get(*name))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

impl Stepper<'_, '_> {
    /// Applies `by`'s edit of the pending command: the same command with `args`, validated like a
    /// model's reply. A refused edit leaves the proposal as it was and says why.
    pub(super) fn apply_edit(&mut self, args: Map<String, Value>, by: Person) {
        let Some(pending) = self.state.progress.pending.as_ref() else {
            return;
        };
        let edited = CommandCall {
            name: pending.command.name.clone(),
            args,
        };
        let valid = match self.ctx.commands.validate(&edited) {
            Ok(valid) => valid,
            Err(problem) => {
                self.fx.push(Effect::Rejected(format!(
                    "The edit was not applied. {problem}"
                )));
                return;
            }
        };
        let arguments = changed_arguments(&pending.command.args, &valid.call.args);
        if arguments.is_empty() {
            self.fx.push(Effect::Rejected(
                "The edit was not applied: it changes no argument.".into(),
            ));
            return;
        }
        let outgoing = self.outgoing_of(&valid.call);
        let remember = self.rule_scopes(&valid.call, valid.risk, outgoing.is_some());
        let Some(pending) = self.state.progress.pending.as_mut() else {
            return;
        };
        pending.outgoing = outgoing;
        pending.remember = remember;
        pending.command = valid.call;
        pending.risk = valid.risk;
        let shown = crate::audit::ShownCommand::of(&pending.command, pending.revision + 1);
        let cycle = pending.cycle;
        pending.edits.push(ArgumentEdit {
            by: by.clone(),
            arguments: arguments.clone(),
        });
        pending.revision = pending.revision.saturating_add(1);
        // Approvals given to the command before the edit do not cover the edited one.
        pending.approvals.clear();
        if pending.edits.len() > MAX_EDITS_KEPT {
            pending.edits.remove(0);
        }
        // An edited command is a new command: nothing approved before covers it.
        self.state.safety.auto_approvals_left = 0;
        self.audit(
            by,
            AuditEvent::Edited {
                cycle,
                changed: arguments,
                shown,
            },
        );
        self.show_pending_again();
    }

    /// Counts `by`'s approval toward the class's quorum: `Some(approvers)` once it is reached (the
    /// command runs, approved by all of them); otherwise the card is shown again with the count,
    /// or `by` is told their approval already counts, and `None`.
    pub(super) fn count_approval(&mut self, by: Person) -> Option<ActedBy> {
        let quorum = self.ctx.quorum;
        let pending = self.state.progress.pending.as_mut()?;
        match quorum.approve(pending.risk, &mut pending.approvals, &by) {
            Tally::Reached if pending.approvals.len() == 1 => Some(ActedBy::person(by)),
            Tally::Reached => Some(ActedBy::People(pending.approvals.clone())),
            Tally::Waiting { .. } => {
                let progress = format!(
                    "{} of {}",
                    pending.approvals.len(),
                    quorum.needed(pending.risk)
                );
                let (cycle, shown) = (
                    pending.cycle,
                    ShownCommand::of(&pending.command, pending.revision),
                );
                self.audit(
                    by,
                    AuditEvent::ApprovalCounted {
                        cycle,
                        progress,
                        shown,
                    },
                );
                self.show_pending_again();
                None
            }
            Tally::AlreadyCounted => {
                self.fx.push(Effect::Rejected(format!(
                    "Your approval already counts; the {} class needs {} people to approve.",
                    pending.risk.label(),
                    quorum.needed(pending.risk)
                )));
                None
            }
        }
    }

    /// The runtime found the approved command's file changed since its card was shown, and did
    /// not run it: the card is shown again, with the change as it now stands, for a new decision.
    pub(super) fn on_command_stale(&mut self, cycle: u64, why: String) {
        if self.state.progress.phase != Phase::Executing
            || self.state.pending_cycle() != Some(cycle)
        {
            return;
        }
        if let Some(pending) = self.state.progress.pending.as_mut() {
            pending.approved_by = None;
            pending.approvals.clear();
            // Shown to a person now: what they approve needs no rule's check.
            pending.script_check = None;
            let command = pending.command.name.clone();
            self.audit(
                ActedBy::Automatic("file check".into()),
                AuditEvent::NotRun {
                    cycle,
                    command,
                    why: why.clone(),
                },
            );
        }
        self.state.safety.auto_approvals_left = 0;
        self.fx.push(Effect::Notify(format!(
            "Cycle {cycle}: the approved command was not run: {why} Look at the card again."
        )));
        self.show_pending_again();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn changed_arguments_names_changed_added_and_removed_ones() {
        let before = json!({"filename": "a.txt", "text": "hi", "mode": "w"});
        let after = json!({"filename": "b.txt", "text": "hi", "extra": 1});
        let names =
            super::changed_arguments(before.as_object().unwrap(), after.as_object().unwrap());
        assert_eq!(names, ["extra", "filename", "mode"]);
        assert!(
            super::changed_arguments(before.as_object().unwrap(), before.as_object().unwrap())
                .is_empty()
        );
    }
}
