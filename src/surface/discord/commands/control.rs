//! `/agent pause`, `/agent stop` and `/agent resume`: events any decider may send to the agent.

use super::{thread_agent, Ctx, Error};
use crate::core::event::Event;
use crate::service::rights::may_decide;
use crate::service::{UserError, NOT_ALLOWED};
use crate::surface::discord::respond::{author, defer_privately, reply};

async fn control(
    ctx: Ctx<'_>,
    event: impl FnOnce(String) -> Event,
    done: &str,
) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let (binding, state) = thread_agent(ctx).await?;
    if !may_decide(&binding, &author(ctx)) {
        return Err(UserError::new(NOT_ALLOWED).into());
    }
    let by = ctx.author().name.clone();
    ctx.data().supervisor.send(&state.id, event(by))?;
    reply(ctx, done, true).await
}

/// Pause the agent (a running command finishes first).
#[poise::command(slash_command, guild_only)]
pub(super) async fn pause(ctx: Ctx<'_>) -> Result<(), Error> {
    control(ctx, |by| Event::Pause { by }, "Pausing.").await
}

/// Stop the agent; it is kept and can be resumed.
#[poise::command(slash_command, guild_only)]
pub(super) async fn stop(ctx: Ctx<'_>) -> Result<(), Error> {
    control(
        ctx,
        |by| Event::Pause { by },
        "Stopped; `/agent resume` continues.",
    )
    .await
}

/// Resume a paused agent, or give a finished one a follow-up task.
#[poise::command(slash_command, guild_only)]
pub(super) async fn resume(
    ctx: Ctx<'_>,
    #[description = "A follow-up task (for a finished agent)"]
    #[max_length = 4000]
    follow_up: Option<String>,
) -> Result<(), Error> {
    control(ctx, |by| Event::Resume { by, follow_up }, "Resuming.").await
}
