//! `/agent fork [from_cycle]`: a new agent in a new thread, with this agent's history, memories and
//! workspace as they were when a cycle closed; this agent goes on untouched.
//!
//! Only those who may decide for the agent may fork it, and `check_start` applies to the forker as
//! to any start. The thread is opened beside the original (`threads::open_thread`) and bound first,
//! as at a start: the forker owns the fork, the original's owner and sharers share it. Then the
//! store's fork (`AgentService::fork`), `Memory::copy_to_fork` (a failure is logged and the fork
//! goes on without memories), a note in both threads, and `Supervisor::start_new`.

use crate::surface::discord::people::person_of;
use poise::serenity_prelude::{ChannelId, CreateMessage};

use super::start::refuse_without_card_permissions;
use super::{thread_agent, Ctx, Error};
use crate::core::state::GuildId;
use crate::service::rights::may_decide;
use crate::service::{AgentService, UserError, NOT_ALLOWED};
use crate::store::ThreadBinding;
use crate::surface::discord::no_mentions;
use crate::surface::discord::respond::{author, defer_privately, reply_privately};
use crate::surface::discord::threads::open_thread;

/// Try another way: a copy of this agent as it was after a cycle, in a new thread.
#[poise::command(slash_command, guild_only)]
pub(super) async fn fork(
    ctx: Ctx<'_>,
    #[description = "Fork it as it was after this cycle (default: the last one that closed)"]
    #[min = 0]
    from_cycle: Option<u64>,
) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let (binding, source) = thread_agent(ctx).await?;
    let who = author(ctx);
    if !may_decide(&binding, &who) {
        return Err(UserError::new(NOT_ALLOWED).into());
    }
    let data = ctx.data();
    let cycle = data.agents.fork_cycle(&source, from_cycle)?;
    // The fork is a new agent of the person forking: their caps and budget limits apply.
    data.agents
        .check_start(binding.guild_id, &who, source.brief.settings.budget)?;
    let id = AgentService::new_agent_id();
    let title = format!("{} (fork after cycle {cycle})", source.name());
    refuse_without_card_permissions(ctx, ChannelId::new(binding.parent_channel_id))?;
    let thread = open_thread(
        ctx.http(),
        ChannelId::new(binding.parent_channel_id),
        &title,
    )
    .await?;
    let by = person_of(ctx.author());
    let guild = GuildId::from(binding.guild_id);
    // The team that worked with the original works with the fork: its owner becomes a sharer.
    let mut shared_users = binding.shared_users.clone();
    if binding.owner_id != who.user_id && !shared_users.contains(&binding.owner_id) {
        shared_users.insert(0, binding.owner_id);
    }
    shared_users.retain(|user| *user != who.user_id);
    // The binding first, as at a start: a fork stored and then cut short by a crash is started
    // at the next start of the bot, in its own thread.
    data.app.store.save_binding(&ThreadBinding {
        agent_id: id.clone(),
        guild_id: binding.guild_id,
        parent_channel_id: binding.parent_channel_id,
        thread_id: thread.id.get(),
        owner_id: who.user_id,
        shared_users,
        shared_roles: binding.shared_roles.clone(),
        card: None,
    })?;
    let fork = data
        .agents
        .fork(&source, cycle, id.clone(), &who, &by, guild.clone())?;
    let memories = match &data.app.memory {
        Some(memory) => memory
            .copy_to_fork(&source.id, cycle, &id, Some(guild))
            .unwrap_or_else(|e| {
                tracing::warn!(agent = %id, error = %e, "the fork's memories could not be copied");
                0
            }),
        None => 0,
    };
    let steps = fork.step_count();
    let files = data.app.store.list_files(&id)?.len();
    let origin = format!(
        "🍴 Forked from **{}** (<#{}>) as it was after cycle {cycle}, by {}: {steps} steps, \
         {memories} memories and {files} files.",
        source.name(),
        binding.thread_id,
        by.name
    );
    let note = CreateMessage::new()
        .content(origin)
        .allowed_mentions(no_mentions());
    thread.id.send_message(ctx.http(), note).await?;
    data.supervisor.start_new(fork).await?;
    let told = CreateMessage::new()
        .content(format!(
            "🍴 {} forked this agent after cycle {cycle}: <#{}>.",
            by.name,
            thread.id.get()
        ))
        .allowed_mentions(no_mentions());
    ChannelId::new(binding.thread_id)
        .send_message(ctx.http(), told)
        .await?;
    reply_privately(
        ctx,
        format!(
            "Forked into <#{}> (agent `{id}`), as it was after cycle {cycle}.",
            thread.id.get()
        ),
    )
    .await
}
