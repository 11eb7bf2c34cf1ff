//! `/agent list`: this server's agents with links to their threads, running ones apart from
//! paused and finished ones.

use super::{guild_of, Ctx, Error};
use crate::core::state::Phase;
use crate::service::counts_against_caps;
use crate::surface::discord::respond::reply_privately;

/// List this server's agents with links to their threads.
#[poise::command(slash_command, guild_only)]
pub(super) async fn list(ctx: Ctx<'_>) -> Result<(), Error> {
    let agents = ctx.data().agents.agents_in(guild_of(ctx)?)?;
    // Running agents (those the caps count) first, then paused ones, then finished ones.
    let mut groups: [(&str, Vec<String>); 3] = [
        ("Running", Vec::new()),
        ("Paused", Vec::new()),
        ("Finished", Vec::new()),
    ];
    for (binding, state) in &agents {
        let group = if counts_against_caps(&state.progress.phase) {
            0
        } else if matches!(state.progress.phase, Phase::Paused(_)) {
            1
        } else {
            2
        };
        groups[group].1.push(format!(
            "**{}** `{}` — {} — cycle {} — <#{}>",
            state.name(),
            state.id,
            state.progress.phase.label(),
            state.progress.cycle,
            binding.thread_id
        ));
    }
    let text = if agents.is_empty() {
        "No agents in this server yet. Start one with `/agent start`.".to_string()
    } else {
        groups
            .iter()
            .filter(|(_, lines)| !lines.is_empty())
            .map(|(title, lines)| format!("__{title}__\n{}", lines.join("\n")))
            .collect::<Vec<_>>()
            .join("\n")
    };
    reply_privately(ctx, text).await
}
