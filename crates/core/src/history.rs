//! Episodes (one per cycle: the action and its outcome), their rendering for the Progress section
//! (`render_full`, output fenced and labelled as data; `render_summary`), and the prompt that
//! condenses an episode into one line (`COMPRESSION_PROMPT`, `summary_request`, `clean_summary`).
//! Only an episode whose outcome holds more than a line is summarised by the model
//! (`Episode::needs_model_summary`); without a summary, a success's line masks its output.
//!
//! `EarlierSteps` bounds what an agent holds in memory however long it runs:
//! `AgentState::record_episode` keeps the newest `WHOLE_STEPS_KEPT` episodes whole and turns the
//! oldest into its Progress line, of which `STEP_LINES_KEPT` are kept; older steps are only
//! counted. The prompt reads whole episodes first, then the lines, so within a budget that shows
//! fewer steps the prompt is the same as with the whole history. The store keeps every episode (see
//! `store::steps`).

use serde::{Deserialize, Serialize};

use super::budget::Micros;
use super::message::Message;
use super::reply::CommandCall;
use super::text::{truncate_chars, FirstChars};

/// What came of a cycle's proposed command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "text", rename_all = "snake_case")]
pub enum Outcome {
    Success(String),
    Error(String),
    /// The human answered with feedback instead of running the command.
    HumanFeedback(String),
    /// The human asked for a self-critique instead of running the command.
    SelfCritique(String),
}

impl Outcome {
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Success(_) => "success",
            Outcome::Error(_) => "error",
            Outcome::HumanFeedback(_) => "interrupted_by_human",
            Outcome::SelfCritique(_) => "self_critique",
        }
    }

    pub fn text(&self) -> &str {
        match self {
            Outcome::Success(t)
            | Outcome::Error(t)
            | Outcome::HumanFeedback(t)
            | Outcome::SelfCritique(t) => t,
        }
    }

    /// Whether the command itself ran (feedback and critique replace it).
    pub fn command_ran(&self) -> bool {
        matches!(self, Outcome::Success(_) | Outcome::Error(_))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Episode {
    pub cycle: u64,
    pub command: CommandCall,
    pub reasoning: String,
    pub outcome: Outcome,
    /// The model's one-line condensation, filled in off the critical path.
    pub summary: Option<String>,
    /// Who approved or answered, for the transcript.
    pub decided_by: Option<crate::person::ActedBy>,
    /// Who changed the model's arguments before they ran, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edited_by: Vec<crate::person::Person>,
    /// What the agent spent during the cycle, as the ledger stood when it closed: the cycle's
    /// model calls and those its command made (sub-agents, pages read).
    #[serde(default)]
    pub cost: Micros,
}

/// `name(arg=value, …)` with values as compact JSON, cut to `max_chars` code points as
/// `truncate_chars` cuts (through the same writer). Writing stops once the cut is known: a
/// step's call is rendered for every step shown, every cycle, and formatting a written file's
/// whole contents only to keep the first few dozen characters was a tenth of building a prompt.
pub fn format_call(call: &CommandCall, max_chars: usize) -> String {
    use std::fmt::Write;
    let mut out = FirstChars::new(max_chars);
    // The only error is the writer refusing more once the cut is reached, which is how the
    // formatting stops; what it kept is the result either way.
    let _ = (|| {
        write!(out, "{}(", call.name)?;
        for (i, (key, value)) in call.args.iter().enumerate() {
            let separator = if i == 0 { "" } else { ", " };
            write!(out, "{separator}{key}={value}")?;
        }
        out.write_char(')')
    })();
    out.finish()
}

impl Episode {
    /// The full rendering used for the newest steps.
    pub fn render_full(&self) -> String {
        // A success says so by its "Output" label; any other status is named.
        let status = match self.outcome {
            Outcome::Success(_) => String::new(),
            _ => format!("- Status: `{}`\n", self.outcome.status()),
        };
        let mut out = format!(
            "### Step {}: `{}`\n- Reasoning: \"{}\"\n{status}",
            self.cycle,
            format_call(&self.command, FULL_STEP_CALL_CHARS),
            self.reasoning.trim(),
        );
        let label = match self.outcome {
            Outcome::Success(_) => "Output",
            Outcome::Error(_) => "Reason",
            Outcome::HumanFeedback(_) => "Feedback",
            Outcome::SelfCritique(_) => "Critique",
        };
        // Output is fenced and labelled so that the model reads it as data rather than as
        // instructions; a fence inside it cannot close ours.
        // The Progress header says once that outputs are data, not instructions.
        out.push_str(&format!(
            "- {label}:\n```\n{}\n```",
            self.outcome.text().replace("```", "'''")
        ));
        out
    }

    /// The one-line rendering used for older steps: the model's summary, or a mechanical one until it exists.
    pub fn render_summary(&self) -> String {
        match &self.summary {
            Some(summary) => format!("- Step {}: {}", self.cycle, summary.trim()),
            None => format!("- Step {}: {}", self.cycle, self.mechanical_summary()),
        }
    }

    /// `call → output`, cut to one line: what a step says when no model has condensed it. A
    /// success's output is masked (`→ done`): the line stands for a step older than those shown
    /// in full, whose output the agent has read already, and which long-term memory and the
    /// workspace keep; repeating it in every later prompt cost more than any other part of the
    /// history (after the arXiv 2508.21433 finding that masking old outputs halves the cost
    /// without hurting results). A failure, feedback or critique keeps its first line.
    pub fn mechanical_summary(&self) -> String {
        if let Outcome::Success(_) = self.outcome {
            let call = truncate_chars(&brief_call(&self.command), SUMMARY_LINE_CALL_CHARS);
            return format!("{call} → done");
        }
        let call = format_call(&self.command, SUMMARY_LINE_CALL_CHARS);
        let first_line = self.outcome.text().lines().next().unwrap_or("");
        format!(
            "{call} → {}: {}",
            self.outcome.status(),
            truncate_chars(first_line, SUMMARY_LINE_OUTPUT_CHARS)
        )
    }

    /// Whether the outcome holds more than a line, so that a model call to condense it is worth
    /// its tokens. A short one-line outcome ("Wrote 412 characters to notes.txt") needs none: its
    /// line says the step was done, or keeps the failure; a file's contents or a page do.
    pub fn needs_model_summary(&self) -> bool {
        let text = self.outcome.text().trim();
        text.lines().nth(1).is_some() || text.chars().count() > SUMMARY_LINE_OUTPUT_CHARS
    }
}

/// How much of a step's output and of its call its one-line fallback summary shows.
const SUMMARY_LINE_OUTPUT_CHARS: usize = 100;
const SUMMARY_LINE_CALL_CHARS: usize = 48;
/// How much of a call a step shown in full shows: long arguments (a file's contents) are in the
/// workspace, where the agent can read them, and the step's output says what came of them.
const FULL_STEP_CALL_CHARS: usize = 60;
/// The longest argument a masked step's line shows; a longer one is `…`.
const LINE_ARGUMENT_CHARS: usize = 40;

/// A call as a masked step's line shows it: `name(value, …)`, the values of its short arguments
/// in order without their names, a long one (a file's contents) as `…`. The name and the short
/// values (a path, a query) say which step it was, which is all a line for a success needs; a
/// failure's line shows the call with its arguments' names, as they explain the failure.
fn brief_call(call: &CommandCall) -> String {
    let values: Vec<String> = call
        .args
        .values()
        .map(|value| {
            let text = value.to_string();
            if text.chars().count() > LINE_ARGUMENT_CHARS {
                "…".to_string()
            } else {
                text
            }
        })
        .collect();
    format!("{}({})", call.name, values.join(", "))
}

/// AutoGPT 0.5's compression instruction, verbatim, since users tune prompts against it.
pub const COMPRESSION_PROMPT: &str = "The text represents an action, the reason for its execution, and its result.\n\nCondense the action taken and its result into one line.\n\nPreserve any specific factual information gathered by the action.";

/// Messages asking the model to condense one episode, fitted to `max_chars` of input.
pub fn summary_request(episode: &Episode, max_chars: usize) -> Vec<Message> {
    vec![
        Message::system(COMPRESSION_PROMPT),
        Message::user(truncate_chars(&episode.render_full(), max_chars)),
    ]
}

/// A model summary is one line; anything longer is cut rather than trusted.
pub fn clean_summary(text: &str) -> Option<String> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())?
        .trim_start_matches(['-', '*', ' '])
        .to_string();
    (!line.is_empty()).then(|| truncate_chars(&line, 300))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn episode(outcome: Outcome) -> Episode {
        Episode {
            cycle: 7,
            command: CommandCall {
                name: "read_file".into(),
                args: json!({"filename": "a.txt"}).as_object().cloned().unwrap(),
            },
            reasoning: "need the data".into(),
            outcome,
            summary: None,
            decided_by: None,
            edited_by: Vec::new(),
            cost: Micros::ZERO,
        }
    }

    #[test]
    fn full_rendering_shows_action_status_and_fenced_output() {
        let text = episode(Outcome::Success("line ```x```".into())).render_full();
        assert_eq!(
            text,
            "### Step 7: `read_file(filename=\"a.txt\")`\n- Reasoning: \"need the data\"\n- Output:\n```\nline '''x'''\n```"
        );
        let feedback = episode(Outcome::HumanFeedback("use a title".into())).render_full();
        assert!(
            feedback.contains("- Status: `interrupted_by_human`\n- Feedback:"),
            "{feedback}"
        );
    }

    #[test]
    fn a_call_is_cut_as_its_whole_text_would_be() {
        let call = CommandCall {
            name: "write_file".into(),
            args: json!({"filename": "é/ß.md", "contents": "naïve “quotes”\n".repeat(300)})
                .as_object()
                .cloned()
                .unwrap(),
        };
        let args: Vec<String> = call.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let whole = format!("{}({})", call.name, args.join(", "));
        let length = whole.chars().count();
        for max in [0, 1, 5, 11, 12, 48, 200, length - 1, length, length + 1] {
            assert_eq!(
                format_call(&call, max),
                truncate_chars(&whole, max),
                "cut at {max}"
            );
        }
        assert_eq!(format_call(&call, length), whole);
        assert!(format_call(&call, 48).ends_with('…'));
    }

    #[test]
    fn summary_rendering_prefers_model_summary() {
        let mut ep = episode(Outcome::Error("no such file\nmore".into()));
        assert_eq!(
            ep.render_summary(),
            "- Step 7: read_file(filename=\"a.txt\") → error: no such file"
        );
        ep.summary = Some("Read a.txt; it did not exist.".into());
        assert_eq!(
            ep.render_summary(),
            "- Step 7: Read a.txt; it did not exist."
        );
    }

    #[test]
    fn only_outcomes_the_line_would_cut_need_a_model_summary() {
        assert!(
            !episode(Outcome::Success("Wrote 412 characters to a.txt".into()))
                .needs_model_summary()
        );
        assert!(!episode(Outcome::Error("no such file".into())).needs_model_summary());
        assert!(episode(Outcome::Success("first\nsecond".into())).needs_model_summary());
        assert!(episode(Outcome::Success("x".repeat(101))).needs_model_summary());
    }

    #[test]
    fn truncation_counts_code_points() {
        assert_eq!(truncate_chars("héllo wörld", 5), "héll…");
        assert_eq!(truncate_chars("short", 5), "short");
        assert_eq!(
            clean_summary("\n\n - Wrote haiku.txt\nextra"),
            Some("Wrote haiku.txt".into())
        );
        assert_eq!(clean_summary("   \n"), None);
    }
}

/// How many of an agent's newest steps are kept whole in memory: more than the prompt shows in
/// full, the runaway brake looks back over, or a late summary can still reach.
pub const WHOLE_STEPS_KEPT: usize = 32;

/// How many older steps are kept as the one line the prompt would show for them: as many as the
/// widest `agent.step_lines` allows; anything older lives in the store (for the transcript and
/// export) and in long-term memory (for recall), so a long-running agent's footprint stays flat
/// instead of growing with every cycle.
pub const STEP_LINES_KEPT: usize = 256;

/// The steps older than the whole ones: their Progress lines, oldest first, and how many more
/// came before them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EarlierSteps {
    pub lines: std::collections::VecDeque<(u64, Box<str>)>,
    pub not_kept: u64,
}

impl EarlierSteps {
    /// Takes a step leaving the whole ones (the oldest of the lines so far is the first to go).
    pub fn push(&mut self, episode: &Episode) {
        self.lines
            .push_back((episode.cycle, episode.render_summary().into_boxed_str()));
        while self.lines.len() > STEP_LINES_KEPT {
            self.lines.pop_front();
            self.not_kept += 1;
        }
    }

    /// Takes a step older than every line so far, as the store reads them newest first.
    pub fn push_older(&mut self, episode: &Episode) {
        if self.lines.len() < STEP_LINES_KEPT {
            self.lines
                .push_front((episode.cycle, episode.render_summary().into_boxed_str()));
        } else {
            self.not_kept += 1;
        }
    }

    pub fn len(&self) -> u64 {
        self.not_kept + self.lines.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
