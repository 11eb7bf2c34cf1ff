//! The watchdog: notices when the model proposes the very command it just ran (the loop rethinks
//! once, then shows the stuck panel), and when an agent makes no progress: its last results all
//! failed, or it circles back to a command it ran twice in its last few steps.
//!
//! `repeats_last_step` is the one-step watchdog. `no_progress` holds when the last `FAILING_IN_ROW`
//! results all failed, or the proposed command already ran `CIRCLING_RUNS` times in the last
//! `CIRCLING_WINDOW` steps. `Stuck` says why, and whether a stronger model is there for Rethink;
//! such a proposal becomes the stuck panel and is never approved automatically.

use serde::{Deserialize, Serialize};

use super::expiry::DEADLINE;
use super::history::{Episode, Outcome};
use super::person::ActedBy;
use super::reply::CommandCall;

/// Failed results in a row (errors and refused commands) that mean the agent is stuck.
pub const FAILING_IN_ROW: usize = 3;
/// Steps looked back over for a command the agent keeps coming back to…
pub const CIRCLING_WINDOW: usize = 5;
/// …and how often it must have run there already: a third run of the same command and arguments
/// in five steps is going in circles (A, B, A, B, A), which the one-step watchdog misses.
pub const CIRCLING_RUNS: usize = 2;

/// Why a proposal is shown as the stuck panel instead of an ordinary card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stuck {
    pub why: String,
    /// Whether a stronger model is configured for Rethink (the panel names it).
    pub smart: bool,
}

/// Whether the deadline decided it (nobody answered the card in time).
fn is_deadline(by: Option<&ActedBy>) -> bool {
    matches!(by, Some(ActedBy::Automatic(what) | ActedBy::Recorded(what)) if what == DEADLINE)
}

/// Why the agent, about to propose `proposed` after `episodes` (oldest first), makes no
/// progress; `None` while it does.
pub fn no_progress(episodes: &[Episode], proposed: &CommandCall) -> Option<String> {
    // A card nobody answered in time is no failure of the agent's.
    let failing = episodes
        .iter()
        .rev()
        .take_while(|e| {
            matches!(e.outcome, Outcome::Error(_)) && !is_deadline(e.decided_by.as_ref())
        })
        .count();
    if failing >= FAILING_IN_ROW {
        return Some(format!("its last {failing} steps failed"));
    }
    let runs = episodes
        .iter()
        .rev()
        .take(CIRCLING_WINDOW)
        .filter(|e| e.outcome.command_ran() && e.command == *proposed)
        .count();
    (runs >= CIRCLING_RUNS).then(|| {
        format!(
            "it proposes `{}` with the same arguments a {} time in {CIRCLING_WINDOW} steps",
            proposed.name,
            ordinal(runs + 1)
        )
    })
}

fn ordinal(n: usize) -> String {
    match n {
        2 => "second".into(),
        3 => "third".into(),
        4 => "fourth".into(),
        5 => "fifth".into(),
        n => format!("{n}th"),
    }
}

/// What the stuck panel says when the watchdog's rethink did not help.
pub fn repeated_after_rethink(call: &CommandCall) -> String {
    format!(
        "it proposes `{}` with the arguments of the step it just ran, even after being asked to think again",
        call.name
    )
}

/// True when `proposed` is the same command with the same arguments as the last executed step.
/// Only steps whose command actually ran count: repeating a command the human replaced with
/// feedback is a legitimate retry.
pub fn repeats_last_step(last: Option<&Episode>, proposed: &CommandCall) -> bool {
    match last {
        Some(episode) => episode.outcome.command_ran() && episode.command == *proposed,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Outcome;
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
            edited_by: Vec::new(),
            cost: crate::budget::Micros::ZERO,
        }
    }

    #[test]
    fn no_progress_is_failing_in_a_row_or_circling_back() {
        let read = |f: &str| call("read_file", json!({ "filename": f }));
        let ok = |c: CommandCall| episode(c, Outcome::Success("x".into()));
        let failed = |c: CommandCall| episode(c, Outcome::Error("boom".into()));
        let next = read("z");
        assert_eq!(no_progress(&[], &next), None);
        let two_failures = [ok(read("a")), failed(read("b")), failed(read("c"))];
        assert_eq!(no_progress(&two_failures, &next), None);
        let three = [failed(read("a")), failed(read("b")), failed(read("c"))];
        assert_eq!(
            no_progress(&three, &next).as_deref(),
            Some("its last 3 steps failed")
        );
        // A card nobody answered in time, denied by its deadline, is no failure of the agent's.
        let unanswered = Episode {
            decided_by: Some(ActedBy::Automatic(DEADLINE.into())),
            edited_by: Vec::new(),
            ..failed(read("d"))
        };
        let with_unanswered = [failed(read("a")), unanswered, failed(read("c"))];
        assert_eq!(no_progress(&with_unanswered, &next), None);
        // Different files each step is progress; coming back to one a third time is not.
        let walking: Vec<Episode> = ["a", "b", "c", "d", "e"].map(|f| ok(read(f))).into();
        assert_eq!(no_progress(&walking, &read("f")), None);
        assert_eq!(no_progress(&walking, &read("a")), None, "once in five");
        let circling = [ok(read("a")), ok(read("b")), ok(read("a")), ok(read("b"))];
        let why = no_progress(&circling, &read("a")).unwrap();
        assert!(
            why.contains("`read_file`") && why.contains("third time"),
            "{why}"
        );
        // A command a person replaced with feedback did not run.
        let replaced = [
            episode(read("a"), Outcome::HumanFeedback("no".into())),
            ok(read("b")),
            episode(read("a"), Outcome::HumanFeedback("no".into())),
        ];
        assert_eq!(no_progress(&replaced, &read("a")), None);
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
