//! The watchdog: notices when the model proposes the very command it just ran, so the loop can
//! rethink once and then refuse the duplicate instead of spinning.

use super::history::Episode;
use super::reply::CommandCall;

/// True when `proposed` is the same command with the same arguments as the last executed step.
/// Only steps whose command actually ran count: repeating a command the human replaced with
/// feedback is a legitimate retry.
pub fn repeats_last_step(last: Option<&Episode>, proposed: &CommandCall) -> bool {
    match last {
        Some(episode) => episode.outcome.command_ran() && episode.command == *proposed,
        None => false,
    }
}

/// The result the model reads when its duplicate is refused.
pub fn duplicate_refusal(call: &CommandCall) -> String {
    format!(
        "Refused: `{}` with the same arguments was the command just executed; its result is in the Progress section. Do not repeat it: choose a different command, or finish if the task is done.",
        call.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::history::Outcome;
    use serde_json::json;

    fn call(name: &str, args: serde_json::Value) -> CommandCall {
        CommandCall {
            name: name.into(),
            args: args.as_object().cloned().unwrap(),
        }
    }

    fn episode(command: CommandCall, outcome: Outcome) -> Episode {
        Episode {
            cycle: 1,
            command,
            reasoning: String::new(),
            outcome,
            summary: None,
            decided_by: None,
            cost: crate::core::budget::Micros::ZERO,
        }
    }

    #[test]
    fn detects_exact_repeats_only() {
        let read = call("read_file", json!({"filename": "a"}));
        let ran = episode(read.clone(), Outcome::Success("x".into()));
        assert!(repeats_last_step(Some(&ran), &read));
        assert!(!repeats_last_step(
            Some(&ran),
            &call("read_file", json!({"filename": "b"}))
        ));
        assert!(!repeats_last_step(
            Some(&ran),
            &call("list_folder", json!({"filename": "a"}))
        ));
        assert!(!repeats_last_step(None, &read));
        let replaced = episode(read.clone(), Outcome::HumanFeedback("no".into()));
        assert!(!repeats_last_step(Some(&replaced), &read));
        let failed = episode(read.clone(), Outcome::Error("boom".into()));
        assert!(repeats_last_step(Some(&failed), &read));
    }
}
