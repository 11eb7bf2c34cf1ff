//! `/agent pause`, `/agent finish` (and `/agent stop`), `/agent resume` and `/agent archive`:
//! events any decider may send to the agent, and its thread archived by its owner.
//!
//! Pause, finish (and stop, the same) and resume are for anyone who may decide; resume applies
//! `check_resume` first. Archive is for the owner or someone who manages threads: it marks the
//! thread in the store (`archive_when_finished`) and finishes the agent, and the surface archives
//! the thread after the closing summary.

use super::{thread_agent, Ctx, Error};
use crate::core::event::Event;
use crate::core::person::Person;
use crate::core::state::Phase;
use crate::service::rights::may_decide;
use crate::service::{UserError, NOT_ALLOWED};
use crate::surface::discord::people::person_of;
use crate::surface::discord::respond::{author, defer_privately, reply_privately};

/// Sends the agent `event` for a decider; `resuming` checks the caps on running agents first
/// (a paused or finished agent counts against them again once it goes on).
async fn control(
    ctx: Ctx<'_>,
    event: impl FnOnce(Person) -> Event,
    done: &str,
    resuming: bool,
) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let (binding, state) = thread_agent(ctx).await?;
    let who = author(ctx);
    if !may_decide(&binding, &who) {
        return Err(UserError::new(NOT_ALLOWED).into());
    }
    if resuming {
        ctx.data().agents.check_resume(&binding, &state, &who)?;
        // An archive asked for before belongs to the task that ended; a follow-up's own finish
        // leaves the thread open.
        ctx.data().app.store.take_archive_mark(&state.id)?;
    }
    let by = person_of(ctx.author());
    ctx.data().supervisor.send(&state.id, event(by))?;
    reply_privately(ctx, done).await
}

/// Pause the agent (a running command finishes first).
#[poise::command(slash_command, guild_only)]
pub(super) async fn pause(ctx: Ctx<'_>) -> Result<(), Error> {
    control(ctx, |by| Event::Pause { by }, "Pausing.", false).await
}

/// End the agent's task (a follow-up starts it again).
#[poise::command(slash_command, guild_only)]
pub(super) async fn finish(ctx: Ctx<'_>) -> Result<(), Error> {
    control(ctx, |by| Event::Finish { by }, FINISHING, false).await
}

/// The same as finish.
#[poise::command(slash_command, guild_only)]
pub(super) async fn stop(ctx: Ctx<'_>) -> Result<(), Error> {
    control(ctx, |by| Event::Finish { by }, FINISHING, false).await
}

const FINISHING: &str = "Finishing: the agent's task ends (a running command returns first; a question to you is withdrawn). `/agent resume follow_up:…` gives it a new one.";

/// Finish the agent and archive its thread.
#[poise::command(slash_command, guild_only)]
pub(super) async fn archive(ctx: Ctx<'_>) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let (binding, state) = thread_agent(ctx).await?;
    let who = author(ctx);
    if who.user_id != binding.owner_id && !who.manage_threads {
        return Err(UserError::new(
            "Only the agent's owner, or someone who manages threads, can archive its thread.",
        )
        .into());
    }
    if matches!(state.progress.phase, Phase::Finished { .. }) {
        reply_privately(ctx, "Archived.").await?;
        ctx.data().surface.archive_thread(binding.thread_id).await;
        return Ok(());
    }
    ctx.data().app.store.archive_when_finished(&state.id)?;
    let by = person_of(ctx.author());
    ctx.data()
        .supervisor
        .send(&state.id, Event::Finish { by })?;
    reply_privately(
        ctx,
        "Finishing; the thread is archived once the agent has said its last word.",
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
    control(ctx, |by| Event::Resume { by, follow_up }, "Resuming.", true).await
}
