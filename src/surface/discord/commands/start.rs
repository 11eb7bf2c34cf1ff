//! `/agent start`: opens a thread for a new agent and starts it there.
//!
//! It applies `check_start` and `check_model` (a model the server offers, with a price), and reads
//! whom to share with from `share_user`, `share_role` and the mentions in `share_with`
//! (`rights::shares_in`). Before anything is checked or reserved, a channel where the bot could
//! not post an agent's cards is refused, naming the permission it lacks
//! (`refuse_without_card_permissions`, from `permissions`). It defers privately, because Discord
//! gives the first follow-up the deferral's visibility and a later refusal must stay private. Then
//! it opens the thread (`threads::open_thread`; a refusal for want of a permission is a `UserError` naming
//! it), saves the `ThreadBinding`, makes the agent (`AgentService::new_agent`) and starts it
//! (`Supervisor::start_new`).

use poise::serenity_prelude as serenity;
use serenity::{ChannelId, Permissions, RoleId, UserId};

use super::{guild_of, Ctx, Error};
use crate::core::budget::usd_to_micros;
use crate::core::state::{GuildId, Profile, Spender};
use crate::service::rights::{shares_in, MAX_SHARES};
use crate::service::{AgentService, NewAgent, UserError};
use crate::store::ThreadBinding;
use crate::surface::discord::permissions;
use crate::surface::discord::respond::{author, defer_privately, reply_privately};
use crate::surface::discord::threads::open_thread;

/// Start an agent on a task, in a new thread.
// poise takes every slash option as a parameter.
#[allow(clippy::too_many_arguments)]
#[poise::command(slash_command, guild_only)]
pub(super) async fn start(
    ctx: Ctx<'_>,
    #[description = "What the agent should do"]
    #[max_length = 4000]
    task: String,
    #[description = "The agent's name (otherwise generated from the task)"]
    #[max_length = 64]
    name: Option<String>,
    #[description = "Model to use (one this server offers; see /agent models show)"]
    #[max_length = 100]
    #[autocomplete = "super::models::complete_model"]
    model: Option<String>,
    #[description = "Share the agent with this user"] share_user: Option<UserId>,
    #[description = "Share the agent with this role"] share_role: Option<RoleId>,
    #[description = "Share it with more people and roles: @mentions"]
    #[max_length = 1000]
    share_with: Option<String>,
    #[description = "Approve this many commands without asking"]
    #[min = 1]
    // poise takes only a literal here; a test holds it equal to `APPROVE_N_MAX`.
    #[max = 100]
    continuous: Option<u32>,
    #[description = "The agent's budget in dollars (default from the bot's config)"]
    #[min = 0.01]
    budget: Option<f64>,
) -> Result<(), Error> {
    let data = ctx.data();
    let guild_id = guild_of(ctx)?;
    refuse_without_card_permissions(ctx, ctx.channel_id())?;
    let owner = author(ctx);
    let budget = budget.map(usd_to_micros);
    data.agents.check_start(guild_id, &owner, budget)?;
    let (mut shared_users, mut shared_roles) =
        shares_in(share_with.as_deref().unwrap_or("")).map_err(|e| UserError(e.to_string()))?;
    if let Some(user) = share_user.map(UserId::get) {
        if !shared_users.contains(&user) {
            shared_users.insert(0, user);
        }
    }
    if let Some(role) = share_role.map(RoleId::get) {
        if !shared_roles.contains(&role) {
            shared_roles.insert(0, role);
        }
    }
    if shared_users.len() + shared_roles.len() > MAX_SHARES {
        return Err(UserError(format!(
            "An agent can be shared with at most {MAX_SHARES} users and roles at its start."
        ))
        .into());
    }
    if let Some(model) = &model {
        data.agents.check_model(guild_id, model)?;
    }
    // Deferred privately: Discord gives the first follow-up the deferral's visibility, so after
    // a public deferral a refusal that comes later (no right to create threads) would be shown
    // to everyone. The channel sees the new thread anyway.
    defer_privately(ctx).await?;
    let id = AgentService::new_agent_id();
    let title = name.clone().unwrap_or_else(|| format!("agent {id}"));
    let thread = open_thread(ctx.http(), ctx.channel_id(), &title).await?;
    data.app.store.save_binding(&ThreadBinding {
        agent_id: id.clone(),
        guild_id,
        parent_channel_id: ctx.channel_id().get(),
        thread_id: thread.id.get(),
        owner_id: owner.user_id,
        shared_users,
        shared_roles,
        card: None,
    })?;
    let state = data.agents.new_agent(
        id.clone(),
        NewAgent {
            task,
            profile: name.map(|name| Profile {
                name,
                ..Profile::fallback()
            }),
            model,
            budget,
            auto_approvals: continuous.unwrap_or(0),
            spender: Spender {
                user: Some(owner.user_id.to_string()),
                guild: Some(GuildId::from(guild_id)),
            },
            ..NewAgent::default()
        },
    );
    data.supervisor.start_new(state).await?;
    reply_privately(
        ctx,
        format!("Started agent `{id}` in <#{}>.", thread.id.get()),
    )
    .await
}

/// Refuses (privately, as every `UserError`) to run an agent from `channel` where the bot could
/// not open its thread or post its cards there, naming each missing permission and what it
/// breaks; nothing is started or reserved before this.
pub(super) fn refuse_without_card_permissions(
    ctx: Ctx<'_>,
    channel: ChannelId,
) -> Result<(), Error> {
    match bot_permissions_in(ctx, channel).and_then(permissions::refusal) {
        Some(refusal) => Err(UserError(refusal).into()),
        None => Ok(()),
    }
}

/// The bot's permissions in `channel`, from the gateway's cache; where the cache does not hold
/// the server, the channel or the bot's member yet, those Discord computed for this interaction
/// in its own channel.
fn bot_permissions_in(ctx: Ctx<'_>, channel: ChannelId) -> Option<Permissions> {
    let cache = ctx.cache();
    let bot = cache.current_user().id;
    let cached = ctx.guild_id().and_then(|id| {
        let guild = cache.guild(id)?;
        let member = guild.members.get(&bot)?;
        permissions::in_cached_channel(&guild, channel, member)
    });
    cached.or(match ctx {
        poise::Context::Application(command) if command.interaction.channel_id == channel => {
            command.interaction.app_permissions
        }
        _ => None,
    })
}
