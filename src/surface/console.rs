//! The terminal surface: AutoGPT's original CLI. Prints profiles, thoughts and results, and reads
//! `y`, `y -N`, `n`, `s`, `e` (edit the arguments), `r` (approve and remember), `t` and `k` (think
//! again, skip: the stuck panel's) or feedback text from standard input.
//!
//! `ConsoleSurface::request_decision` reads standard input in a task and calls
//! `AgentHandle::decide`; a streamed reply is printed as it comes when standard output is a
//! terminal. `parse_input` reads a line, `read_edit` asks for one argument at a time, `read_rule`
//! offers a numbered choice of the card's scopes and then how long, and `proposal_text` is the
//! console card. `visible_controls` prints every control character but newline and tab as an
//! escape, so model and tool text cannot drive the terminal.

use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader, Lines};
use tokio::sync::Mutex;

use crate::core::budget::{format_usd, BudgetKind, Micros, MICROS_PER_USD};
use crate::core::decision::{Decision, APPROVE_N_MAX};
use crate::core::history::{Episode, Outcome};
use crate::core::person::Person;
use crate::core::rules::{RuleDraft, RuleLife, RuleReach, RuleScope};
use crate::core::state::{AgentState, AgentView, PauseReason, Proposal};
use crate::core::step::{argument_text, edited_value};
use crate::core::text::truncate_chars;
use crate::runtime::DecideError;
use crate::runtime::{AgentHandle, ShownAs, Surface};
use crate::tools::preview::Preview;
use crate::tools::NoAnswer;
use serde_json::{Map, Value};

type LineSource = Lines<BufReader<Box<dyn AsyncRead + Send + Unpin>>>;

/// What a line typed at the decision prompt means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsoleInput {
    Decision(Decision),
    /// Edit the command's arguments, one prompt each.
    Edit,
    /// Approve, and choose a rule that approves commands like it from now on.
    Remember,
    /// Not understood; the text says how to type it.
    Invalid(String),
    Empty,
}

/// Parses AutoGPT's console answers and ours: `y`, `y -N`, `n`, `s`, `e`, `r`, `t`, `k`; anything
/// else is feedback.
pub fn parse_input(line: &str) -> ConsoleInput {
    let text = line.trim();
    if text.is_empty() {
        return ConsoleInput::Empty;
    }
    let lower = text.to_lowercase();
    match lower.as_str() {
        "y" | "yes" => return ConsoleInput::Decision(Decision::Approve),
        "n" | "no" | "q" | "exit" => return ConsoleInput::Decision(Decision::Deny),
        "s" => return ConsoleInput::Decision(Decision::SelfCritique),
        "e" => return ConsoleInput::Edit,
        "r" => return ConsoleInput::Remember,
        "t" => return ConsoleInput::Decision(Decision::Rethink),
        "k" => return ConsoleInput::Decision(Decision::Skip),
        _ => {}
    }
    if let Some(rest) = lower.strip_prefix("y -") {
        return match rest.trim().parse::<u32>() {
            Ok(n) if (1..=APPROVE_N_MAX).contains(&n) => {
                ConsoleInput::Decision(Decision::ApproveN(n))
            }
            _ => ConsoleInput::Invalid(format!(
                "Use 'y -N' with N a number from 1 to {APPROVE_N_MAX}, e.g. 'y -3'."
            )),
        };
    }
    ConsoleInput::Decision(Decision::Feedback(text.to_string()))
}

/// Whoever runs this console: one terminal has one operator, named as the system knows them.
pub fn operator() -> Person {
    Person::console(std::env::var("USER").unwrap_or_else(|_| "console user".into()))
}

pub struct ConsoleSurface {
    input: Arc<Mutex<LineSource>>,
    /// The terminal's one operator, named as the system knows them.
    user: Person,
    /// Whether a streamed reply is printed as it comes: on a terminal, where a person watches;
    /// piped output gets the formatted proposal only.
    echo_stream: bool,
    /// A streamed reply is being printed (its line is ended before what follows).
    streaming: std::sync::atomic::AtomicBool,
}

impl ConsoleSurface {
    pub fn new(input: Box<dyn AsyncRead + Send + Unpin>) -> Self {
        let user = operator();
        ConsoleSurface {
            input: Arc::new(Mutex::new(BufReader::new(input).lines())),
            user,
            echo_stream: std::io::IsTerminal::is_terminal(&std::io::stdout()),
            streaming: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn stdin() -> Self {
        ConsoleSurface::new(Box::new(tokio::io::stdin()))
    }

    /// Asks which rule to keep: a scope from the card's, then how long. `None` when nothing was
    /// chosen (no scope offered, an answer out of range, or the input ended).
    async fn read_rule(&self, scopes: &[RuleScope]) -> Option<RuleDraft> {
        if scopes.is_empty() {
            print_flush("No rule can be made from this command: its class asks every time, needs several approvers, or it sends data out.\n");
            return None;
        }
        let mut menu = String::from("Approve now, and from now on approve:\n");
        for (number, scope) in scopes.iter().enumerate() {
            menu.push_str(&format!("  {}) {}\n", number + 1, scope.label()));
        }
        print_flush(&menu);
        let pick = |typed: Option<String>, count: usize| {
            typed?
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=count).contains(n))
                .map(|n| n - 1)
        };
        let Some(scope) = pick(self.read_line("Which (number): ").await, scopes.len()) else {
            print_flush("Nothing chosen.\n");
            return None;
        };
        let lives = RuleLife::ALL
            .iter()
            .enumerate()
            .map(|(n, life)| format!("{}) {}", n + 1, life.label()))
            .collect::<Vec<_>>()
            .join(", ");
        let typed = self.read_line(&format!("How long? {lives}: ")).await;
        let Some(life) = pick(typed, RuleLife::ALL.len()) else {
            print_flush("Nothing chosen.\n");
            return None;
        };
        Some(RuleDraft {
            scope: scopes[scope].clone(),
            reach: RuleReach::Agent,
            life: RuleLife::ALL[life],
        })
    }

    /// Asks for each argument in turn, showing its value: Enter keeps it, `-` removes it, and
    /// anything else replaces it. `None` when nothing changed or the input ended.
    async fn read_edit(&self, args: &Map<String, Value>) -> Option<Map<String, Value>> {
        print_flush(
            "Edit each argument: Enter keeps it, '-' removes it, anything else replaces it.\n",
        );
        let mut edited = args.clone();
        for (name, value) in args {
            let shown = truncate_chars(&argument_text(value).replace('\n', "\\n"), 80);
            let typed = self.read_line(&format!("  {name} [{shown}]: ")).await?;
            if typed.is_empty() {
                continue;
            }
            let typed = if typed.trim() == "-" {
                ""
            } else {
                typed.as_str()
            };
            match edited_value(Some(value), typed) {
                Some(new) => edited.insert(name.clone(), new),
                None => edited.remove(name),
            };
        }
        if edited == *args {
            print_flush("Nothing changed.\n");
            return None;
        }
        Some(edited)
    }

    /// Reads one line, after printing `prompt`; `None` at the end of input.
    pub async fn read_line(&self, prompt: &str) -> Option<String> {
        print_flush(prompt);
        let mut input = self.input.lock().await;
        match input.next_line().await {
            Ok(line) => line,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read from standard input");
                None
            }
        }
    }
}

/// How many lines of a diff the console prints before it says how many it left out.
const DIFF_LINES_SHOWN: usize = 40;

/// What a file command would change, as the console shows it under the card.
pub fn changes_text(changes: &Preview) -> String {
    if changes.diff.is_empty() {
        return format!(
            "CHANGES TO {}: none, the file already holds this text\n",
            changes.path
        );
    }
    let lines: Vec<&str> = changes.diff.lines().collect();
    let mut out = format!("CHANGES TO {}:\n", changes.path);
    for line in lines.iter().take(DIFF_LINES_SHOWN) {
        out.push_str(&format!("  {line}\n"));
    }
    if lines.len() > DIFF_LINES_SHOWN {
        out.push_str(&format!(
            "  … {} more lines\n",
            lines.len() - DIFF_LINES_SHOWN
        ));
    }
    out
}

/// The console's card: AutoGPT's sections, the proposed command with its class, the budget line.
pub fn proposal_text(agent: &AgentState, proposal: &Proposal, shown: ShownAs) -> String {
    let auto_approved = shown == ShownAs::AutoApproved;
    let t = &proposal.thoughts;
    let mut out = format!("\n=== {} · cycle {} ===\n", agent.name(), proposal.cycle);
    if proposal.interrupted {
        out.push_str("NOTE: this step was interrupted before it finished and was not re-run. Decide again.\n");
    }
    out.push_str(&section("SPEAK", &t.speak));
    out.push_str(&section("OBSERVATIONS", &t.observations));
    out.push_str(&section("THOUGHTS", &t.text));
    out.push_str(&section("REASONING", &t.reasoning));
    if !t.plan.trim().is_empty() {
        out.push_str("PLAN:\n");
        for line in t.plan.lines().filter(|l| !l.trim().is_empty()) {
            out.push_str(&format!("  {}\n", line.trim()));
        }
    }
    out.push_str(&section("CRITICISM", &t.self_criticism));
    let args = serde_json::to_string(&proposal.command.args).unwrap_or_default();
    out.push_str(&format!(
        "NEXT ACTION: COMMAND = {}  ARGUMENTS = {}  [{}]\n",
        proposal.command.name,
        args,
        proposal.risk.label()
    ));
    if let Some(outgoing) = &proposal.outgoing {
        out.push_str(&format!(
            "SENDS OUT (the agent read untrusted content in {}): {}\n",
            outgoing.tainted_by.describe(),
            outgoing.data
        ));
    }
    let money = proposal.money_line();
    if !money.is_empty() {
        out.push_str(&format!("BUDGET: {money}\n"));
    }
    if let Some(editors) = proposal.editors() {
        out.push_str(&format!("EDITED BY: {editors}\n"));
    }
    if let Some(progress) = proposal.approval_progress() {
        out.push_str(&format!("APPROVALS: {progress}\n"));
    }
    if let Some(stuck) = &proposal.stuck {
        out.push_str(&format!("STUCK: the agent seems stuck: {}.\n", stuck.why));
    }
    if let Some(why) = &proposal.auto_stop {
        out.push_str(&format!("NOTE: {why}\n"));
    }
    if auto_approved {
        let left = agent.safety.auto_approvals_left;
        if let Some(rule) = &proposal.approved_by {
            out.push_str(&format!("(approved automatically by {rule})\n"));
        } else if agent.brief.settings.continuous {
            out.push_str("(approved automatically: continuous mode)\n");
        } else {
            out.push_str(&format!(
                "(approved automatically: {left} more without asking)\n"
            ));
        }
    }
    out
}

/// Writes to the terminal with every control character except newline and tab made visible:
/// model and tool text is untrusted, and an escape sequence in it could otherwise hide lines,
/// move the cursor or retitle the terminal. Nothing else can be done about a closed stdout, so
/// write errors are dropped.
/// A new budget to type after `--budget`: a dollar more than `limit`.
fn suggested_budget(limit: Micros) -> String {
    format!("{:.2}", limit.0 as f64 / MICROS_PER_USD as f64 + 1.0)
}

fn print_flush(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(visible_controls(text).as_bytes());
    let _ = out.flush();
}

/// `text` (a command's output, which outside text reaches) with each line that starts like one of
/// the console's own (`SYSTEM:`, `NOTE:`, an upper-case label and a colon, or `Input:`) set off with
/// `| `, so a tool cannot print a line that reads as the bot's.
fn disarmed_labels(text: &str) -> String {
    fn looks_like_ours(line: &str) -> bool {
        let Some((label, _)) = line.trim_start().split_once(':') else {
            return false;
        };
        let all_caps = label.len() >= 2
            && label.len() <= 30
            && label.starts_with(|c: char| c.is_ascii_uppercase())
            && label
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == ' ' || c == '-' || c == '_');
        all_caps || label == "Input"
    }
    // The first line follows the console's own words on the same line: it cannot pass for one.
    text.split('\n')
        .enumerate()
        .map(|(at, line)| {
            if at > 0 && looks_like_ours(line) {
                format!("| {line}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` with control characters (C0, DEL and C1) other than `\n` and `\t` shown as escapes,
/// such as `\x1b` for ESC.
pub fn visible_controls(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => shown.push(c),
            c if c.is_control() => shown.push_str(&format!("\\x{{{:02x}}}", c as u32)),
            // Bidirectional overrides and isolates reorder what follows them on the line (U+202E
            // shows text backwards), so a tool's text could make a line read as something else.
            '\u{061c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}' => shown.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => shown.push(c),
        }
    }
    shown
}

fn section(label: &str, text: &str) -> String {
    if text.trim().is_empty() {
        String::new()
    } else {
        format!("{label}: {}\n", text.trim())
    }
}

fn bullet_list(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("  - {i}\n"))
        .collect::<String>()
}

impl ConsoleSurface {
    /// Ends the line of a streamed reply, if one is being printed.
    fn end_stream(&self) {
        if self
            .streaming
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            print_flush("\n");
        }
    }
}

#[async_trait]
impl Surface for ConsoleSurface {
    /// A proposal printed again after a crash is only a line more in the terminal.
    fn needs_stored_proposals(&self) -> bool {
        false
    }

    fn watches_stream(&self) -> bool {
        self.echo_stream
    }

    fn streamed(&self, _agent: &str, piece: &str) {
        if !self.echo_stream {
            return;
        }
        if !self
            .streaming
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            print_flush("\nMODEL: ");
        }
        print_flush(piece);
    }

    async fn show_profile(&self, agent: &AgentState) {
        self.end_stream();
        let Some(profile) = &agent.brief.profile else {
            return;
        };
        let mut out = format!(
            "\nAGENT {}\nNAME: {}\nROLE: {}\n",
            agent.id, profile.name, profile.role
        );
        if !profile.best_practices.is_empty() {
            out.push_str("BEST PRACTICES:\n");
            out.push_str(&bullet_list(&profile.best_practices));
        }
        if !profile.constraints.is_empty() {
            out.push_str("CONSTRAINTS:\n");
            out.push_str(&bullet_list(&profile.constraints));
        }
        print_flush(&out);
    }

    async fn show_proposal(
        &self,
        agent: &AgentState,
        proposal: &Proposal,
        shown: ShownAs,
        preview: Option<&Preview>,
    ) {
        self.end_stream();
        let mut text = proposal_text(agent, proposal, shown);
        if let Some(changes) = preview {
            text.push_str(&changes_text(changes));
        }
        print_flush(&text);
    }

    async fn request_decision(&self, agent: &AgentState, proposal: &Proposal, handle: AgentHandle) {
        let remember = match proposal.remember.is_empty() {
            true => "",
            false => " 'r' to approve and remember a rule,",
        };
        let prompt = match &proposal.stuck {
            Some(stuck) => format!(
                "The agent seems stuck. Enter 't' to make it think again{}, type a hint, 'k' to skip this step, 'n' to stop (the agent is saved), or 'y' to approve the command anyway:\nInput: ",
                if stuck.smart { " with the stronger model" } else { "" }
            ),
            None => format!(
                "Enter 'y' to authorise the command, 'y -N' to run N commands without asking,{remember} 'e' to edit its arguments, 's' for a self-critique, 'n' to stop (the agent is saved), or type feedback for {}:\nInput: ",
                agent.name()
            ),
        };
        let cycle = proposal.cycle;
        let args = proposal.command.args.clone();
        let scopes = proposal.remember.clone();
        let input = ConsoleSurface {
            input: self.input.clone(),
            user: self.user.clone(),
            echo_stream: false,
            streaming: std::sync::atomic::AtomicBool::new(false),
        };
        tokio::spawn(async move {
            loop {
                let decision = match input.read_line(&prompt).await {
                    None => {
                        print_flush("\n(end of input: stopping)\n");
                        Decision::Deny
                    }
                    Some(line) => match parse_input(&line) {
                        ConsoleInput::Decision(d) => d,
                        ConsoleInput::Edit => match input.read_edit(&args).await {
                            Some(edited) => Decision::Edit(Box::new(edited)),
                            None => continue,
                        },
                        ConsoleInput::Remember => match input.read_rule(&scopes).await {
                            Some(draft) => Decision::Remember(Box::new(draft)),
                            None => continue,
                        },
                        ConsoleInput::Empty => continue,
                        ConsoleInput::Invalid(help) => {
                            print_flush(&format!("{help}\n"));
                            continue;
                        }
                    },
                };
                match handle.decide(cycle, decision, &input.user).await {
                    Ok(()) => break,
                    Err(why) => {
                        print_flush(&format!("Not applied: {why}\n"));
                        // Only this prompt decides this cycle, so a refusal that is not about a
                        // stale proposal (a storage hiccup, an edit that did not validate) is
                        // worth another try.
                        if !why.is_retryable() && !matches!(why, DecideError::NotApplied(_)) {
                            break;
                        }
                    }
                }
            }
        });
    }

    async fn show_result(&self, _agent: &AgentState, episode: &Episode) {
        self.end_stream();
        let text = disarmed_labels(episode.outcome.text());
        let line = match &episode.outcome {
            Outcome::Success(_) => format!(
                "SYSTEM: Command {} returned: {text}\n",
                episode.command.name
            ),
            Outcome::Error(_) => {
                format!("SYSTEM: Command {} failed: {text}\n", episode.command.name)
            }
            Outcome::HumanFeedback(_) => format!("SYSTEM: Human feedback: {text}\n"),
            Outcome::SelfCritique(_) => format!("SELF-CRITIQUE: {text}\n"),
        };
        print_flush(&line);
    }

    async fn notify(&self, _agent: &AgentState, text: &str) {
        self.end_stream();
        print_flush(&format!("NOTE: {text}\n"));
    }

    async fn paused(&self, agent: &AgentState, reason: &PauseReason) {
        self.end_stream();
        let hint = match reason {
            PauseReason::Budget {
                stop: Some(stop), ..
            } if stop.kind != BudgetKind::Agent => format!(
                "Spent {} of {} ({}). It resets at midnight UTC; to go on now, raise it in the config (budget.user_daily_usd), then: autothread console --resume {}",
                format_usd(stop.spent),
                format_usd(stop.limit),
                stop.kind.label(),
                agent.id
            ),
            PauseReason::Budget { stop, .. } => {
                let spent = stop.map_or(Micros::ZERO, |s| s.spent);
                format!(
                    "Spent {} of {}. Raise its budget to continue: autothread console --resume {} --budget {}",
                    format_usd(spent),
                    stop.map_or("its budget".into(), |s| format_usd(s.limit)),
                    agent.id,
                    suggested_budget(stop.map_or(spent, |s| s.limit))
                )
            }
            PauseReason::Runaway { spent, limit, .. } => format!(
                "Spent {} of {}. Auto-approval has ended. Continue with: autothread console --resume {} (add --budget {} to raise its budget)",
                format_usd(*spent),
                format_usd(*limit),
                agent.id,
                suggested_budget(*limit)
            ),
            _ => format!("Resume with: autothread console --resume {}", agent.id),
        };
        print_flush(&format!(
            "\nAgent {} {}.\n{hint}\n",
            agent.name(),
            reason.describe(),
        ));
    }

    async fn finished(&self, agent: &AgentState, reason: &str) {
        self.end_stream();
        print_flush(&format!(
            "\nAgent {} finished: {reason}\nSpent {} in {} cycle{} ({} prompt + {} completion tokens in {} calls).\nGive it a follow-up task with: autothread console --resume {} --task \"…\"\n",
            agent.name(),
            format_usd(agent.money.spent_at_last_cycle.unwrap_or_default()),
            agent.step_count(),
            if agent.step_count() == 1 { "" } else { "s" },
            agent.money.usage.prompt_tokens,
            agent.money.usage.completion_tokens,
            agent.money.usage.calls,
            agent.id
        ));
    }

    async fn ask_user(&self, agent: &AgentView, question: &str) -> Result<String, NoAnswer> {
        let prompt = format!("\nQUESTION from {}: {question}\nAnswer: ", agent.name);
        match self.read_line(&prompt).await {
            Some(answer) => Ok(answer.trim().to_string()),
            None => Err(NoAnswer::EndOfInput),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_sent_to_the_terminal() {
        let hostile = "line one\n\u{1b}[8mhidden\u{1b}[0m\rover\u{7}\u{9b}31m\ttab";
        let shown = visible_controls(hostile);
        assert_eq!(
            shown,
            "line one\n\\x{1b}[8mhidden\\x{1b}[0m\\x{0d}over\\x{07}\\x{9b}31m\ttab"
        );
        assert!(!shown
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'));
    }

    #[test]
    fn a_tool_cannot_print_a_line_like_the_consoles_own_nor_reorder_it() {
        let hostile = "12:00 UTC\nSYSTEM: Command finish returned: done\n  NOTE: trust me\nInput: y\nkey: value";
        assert_eq!(
            disarmed_labels(hostile),
            "12:00 UTC\n| SYSTEM: Command finish returned: done\n|   NOTE: trust me\n| Input: y\nkey: value"
        );
        let reversed = visible_controls("file\u{202e}txt.exe");
        assert_eq!(reversed, "file\\u{202e}txt.exe");
        assert!(!reversed.contains('\u{202e}'));
    }

    #[test]
    fn parses_autogpt_console_answers() {
        let cases = [
            ("y", ConsoleInput::Decision(Decision::Approve)),
            (" Y ", ConsoleInput::Decision(Decision::Approve)),
            ("y -3", ConsoleInput::Decision(Decision::ApproveN(3))),
            ("n", ConsoleInput::Decision(Decision::Deny)),
            ("s", ConsoleInput::Decision(Decision::SelfCritique)),
            ("t", ConsoleInput::Decision(Decision::Rethink)),
            ("k", ConsoleInput::Decision(Decision::Skip)),
            ("r", ConsoleInput::Remember),
            ("", ConsoleInput::Empty),
            (
                "use a shorter title",
                ConsoleInput::Decision(Decision::Feedback("use a shorter title".into())),
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(parse_input(line), expected, "{line:?}");
        }
        assert!(matches!(parse_input("y -0"), ConsoleInput::Invalid(_)));
        let over = format!("y -{}", APPROVE_N_MAX + 1);
        assert!(matches!(parse_input(&over), ConsoleInput::Invalid(_)));
        assert!(matches!(parse_input("y -x"), ConsoleInput::Invalid(_)));
    }
}
