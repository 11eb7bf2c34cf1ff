//! `/agent list`: this server's agents with links to their threads.

use super::{guild_of, Ctx, Error};
use crate::surface::discord::respond::reply;

/// List this server's agents with links to their threads.
#[poise::command(slash_command, guild_only)]
pub(super) async fn list(ctx: Ctx<'_>) -> Result<(), Error> {
    let agents = ctx.data().agents.agents_in(guild_of(ctx)?)?;
    let lines: Vec<String> = agents
        .iter()
        .map(|(binding, state)| {
            format!(
                "**{}** `{}` — {} — cycle {} — <#{}>",
                state.name(),
                state.id,
                state.phase.label(),
                state.cycle,
                binding.thread_id
            )
        })
        .collect();
    let text = if lines.is_empty() {
        "No agents in this server yet. Start one with `/agent start`.".to_string()
    } else {
        lines.join("\n")
    };
    reply(ctx, text, true).await
}
