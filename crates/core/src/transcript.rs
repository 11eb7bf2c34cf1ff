//! The Markdown transcript of an agent: profile, task, and every cycle with its decision and outcome.

use super::budget::{format_usd, Micros};
use super::history::{format_call, Episode};
use super::state::AgentState;

/// The transcript of `episodes` (every step, read from the store: the state holds only the
/// newest); `spent` is what the ledger charged the agent in all (its sub-agents included).
pub fn render_transcript(state: &AgentState, episodes: &[Episode], spent: Micros) -> String {
    let mut out = format!("# {} — transcript\n\n", state.name());
    out.push_str(&format!(
        "- **Agent id:** `{}`\n- **State:** {}\n- **Cycles:** {}\n- **Model:** {}\n- **Created:** {}\n- **Tokens:** {} prompt, {} completion in {} calls\n- **Spent:** {} (the agent and its sub-agents)\n\n",
        state.id,
        state.progress.phase.label(),
        episodes.len(),
        state.brief.settings.model,
        state.created_at.format("%Y-%m-%d %H:%M UTC"),
        state.money.usage.prompt_tokens,
        state.money.usage.completion_tokens,
        state.money.usage.calls,
        format_usd(spent),
    ));
    if let Some(profile) = &state.brief.profile {
        out.push_str(&format!(
            "## Profile\n\n**{}**, {}\n\n",
            profile.name, profile.role
        ));
        for (title, items) in [
            ("Best practices", &profile.best_practices),
            ("Constraints", &profile.constraints),
        ] {
            if !items.is_empty() {
                out.push_str(&format!("{title}:\n"));
                for item in items {
                    out.push_str(&format!("- {item}\n"));
                }
                out.push('\n');
            }
        }
    }
    out.push_str(&format!("## Task\n\n{}\n\n## Steps\n\n", state.full_task()));
    for episode in episodes {
        out.push_str(&format!(
            "### Cycle {}: `{}`\n\n",
            episode.cycle,
            format_call(&episode.command, 300)
        ));
        if !episode.reasoning.trim().is_empty() {
            out.push_str(&format!("*Reasoning:* {}\n\n", episode.reasoning.trim()));
        }
        if let Some(by) = &episode.decided_by {
            out.push_str(&format!("*Decided by:* {by}\n\n"));
        }
        if !episode.edited_by.is_empty() {
            let editors = crate::person::ActedBy::People(episode.edited_by.clone());
            out.push_str(&format!("*Arguments edited by:* {editors}\n\n"));
        }
        if !episode.cost.is_zero() {
            out.push_str(&format!("*Cost:* {}\n\n", format_usd(episode.cost)));
        }
        out.push_str(&format!(
            "*Status:* {}\n\n```\n{}\n```\n\n",
            episode.outcome.status(),
            episode.outcome.text().replace("```", "'''")
        ));
        if let Some(summary) = &episode.summary {
            out.push_str(&format!("*Summary:* {summary}\n\n"));
        }
    }
    if let Some(pending) = &state.progress.pending {
        out.push_str(&format!(
            "### Cycle {} (pending): `{}`\n\n",
            pending.cycle,
            format_call(&pending.command, 300)
        ));
    }
    out
}
