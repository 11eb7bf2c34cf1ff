//! `/agent memory search`: an agent's long-term memories, with Pin and Forget buttons for deciders.

use poise::serenity_prelude as serenity;
use serenity::CreateActionRow;

use super::{thread_agent, Ctx, Error};
use crate::service::rights::may_decide;
use crate::service::{UserError, NOT_ALLOWED};
use crate::surface::discord::cards::{message_text, MESSAGE_MAX};
use crate::surface::discord::ids::{CardAction, CardId};
use crate::surface::discord::no_mentions;
use crate::surface::discord::respond::{author, defer_privately, reply};

/// Long-term memory: search it, then forget or pin what you find.
#[poise::command(slash_command, guild_only, subcommands("memory_search"))]
pub(super) async fn memory(_ctx: Ctx<'_>) -> Result<(), Error> {
    Ok(())
}

/// Search this agent's memories (only you see the results).
#[poise::command(slash_command, guild_only, rename = "search")]
pub(super) async fn memory_search(
    ctx: Ctx<'_>,
    #[description = "What to look for"]
    #[max_length = 500]
    query: String,
) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let (binding, state) = thread_agent(ctx).await?;
    let data = ctx.data();
    let Some(memory) = &data.app.memory else {
        return reply(ctx, "Long-term memory is switched off.", true).await;
    };
    let who = author(ctx);
    if !may_decide(&binding, &who) {
        return Err(UserError::new(NOT_ALLOWED).into());
    }
    // On the agents' runtime: the embedding call's connection joins their pool, and an index
    // it builds is built on their blocking threads.
    let search = {
        let (memory, payer, query) = (memory.clone(), memory.payer(&state), query.clone());
        async move { memory.search(&payer, &query, 5).await }
    };
    let hits = match data.agents_runtime.spawn(search).await? {
        Ok(hits) => hits,
        Err(e) => return reply(ctx, format!("The search failed: {e}."), true).await,
    };
    if hits.is_empty() {
        return reply(ctx, "No memories match.", true).await;
    }
    let mut lines = vec![format!(
        "Memories of **{}** for “{}”:",
        state.name(),
        message_text(&query)
    )];
    let mut rows = Vec::new();
    for hit in &hits {
        lines.push(format!(
            "**#{}** · cycle {} · {}{} · similarity {:.2}\n> {}",
            hit.id,
            hit.cycle,
            hit.source.label(),
            if hit.pinned { " · pinned" } else { "" },
            hit.score,
            crate::core::history::truncate_chars(&hit.text.replace('\n', " / "), 250)
        ));
        rows.push(CreateActionRow::Buttons(vec![
            serenity::CreateButton::new(
                CardId::new(CardAction::MemoryPin, &state.id, hit.id).encode(),
            )
            .label(format!("Pin #{}", hit.id))
            .style(serenity::ButtonStyle::Secondary)
            .disabled(hit.pinned),
            serenity::CreateButton::new(
                CardId::new(CardAction::MemoryForget, &state.id, hit.id).encode(),
            )
            .label(format!("Forget #{}", hit.id))
            .style(serenity::ButtonStyle::Danger),
        ]));
    }
    let text = crate::core::history::truncate_chars(&lines.join("\n"), MESSAGE_MAX);
    ctx.send(
        poise::CreateReply::default()
            .content(text)
            .components(rows)
            .ephemeral(true)
            .allowed_mentions(no_mentions()),
    )
    .await?;
    Ok(())
}
