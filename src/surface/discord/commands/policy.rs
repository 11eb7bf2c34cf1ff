//! `/agent policy show|set|server-set|server-reset`: what each risk class of command does, for this
//! thread's agent and for the server; an agent made stricter by its owner; the server's policy
//! changed by its admins.
//!
//! The classes come from `ALL_RISKS`. An agent's change is checked by `check_narrowing` and sent as
//! `Event::SetPolicy`, which the core audits. A server's change goes through
//! `AgentService::change_server_policy` (see `service::server_policy`), which needs Manage Server,
//! read from the member's permissions, and keeps the operator's config as the ceiling: an admin may
//! make any class stricter, and loosen one only to what `[policy] server_admins_may_loosen_to`
//! lists (`remember` by default), never a class the operator denies; `server-reset` gives the class
//! back to the operator's config. `show` says, privately, what each class does and where that comes
//! from (the operator's config or which admin, and when).

use super::{capitalise, guild_of, thread_agent, Ctx, Error};
use crate::core::commands::Risk;
use crate::core::event::Event;
use crate::core::policy::{ClassAction, ALL_RISKS};
use crate::core::state::GuildId;
use crate::service::rights::may_share;
use crate::service::server_policy::ServerPolicyChange;
use crate::service::UserError;
use crate::surface::discord::people::person_of;
use crate::surface::discord::respond::{author, defer_privately, reply_privately};

/// What each class of command does here: show it, narrow it for an agent, or change it server-wide.
#[poise::command(
    slash_command,
    guild_only,
    subcommands(
        "policy_show",
        "policy_set",
        "policy_server_set",
        "policy_server_reset"
    )
)]
pub(super) async fn policy(_ctx: Ctx<'_>) -> Result<(), Error> {
    Ok(())
}

/// A risk class as a slash-command choice: the choices are `ALL_RISKS`, named by
/// `Risk::title`, so a new class appears here without a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RiskChoice(Risk);

impl poise::ChoiceParameter for RiskChoice {
    fn list() -> std::borrow::Cow<'static, [poise::CommandParameterChoice]> {
        ALL_RISKS
            .iter()
            .map(|risk| poise::CommandParameterChoice {
                name: risk.title().into(),
                localizations: Default::default(),
                __non_exhaustive: (),
            })
            .collect::<Vec<_>>()
            .into()
    }

    fn from_index(index: usize) -> Option<Self> {
        ALL_RISKS.get(index).copied().map(RiskChoice)
    }

    fn from_name(name: &str) -> Option<Self> {
        ALL_RISKS
            .into_iter()
            .find(|risk| risk.title() == name)
            .map(RiskChoice)
    }

    fn name(&self) -> &'static str {
        self.0.title()
    }

    fn localized_name(&self, _locale: &str) -> Option<&'static str> {
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, poise::ChoiceParameter)]
enum ActionChoice {
    #[name = "auto: runs under Approve ×N"]
    Auto,
    #[name = "ask: always a card"]
    Ask,
    #[name = "deny: never runs"]
    Deny,
    #[name = "server default"]
    ServerDefault,
    // Last, so that the choices people and scripts already use keep their values.
    #[name = "remember: a card; exact approvals may be remembered"]
    Remember,
}

/// The actions a server admin may choose, loosest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, poise::ChoiceParameter)]
enum ServerActionChoice {
    #[name = "auto: runs under Approve ×N"]
    Auto,
    #[name = "remember: a card; exact approvals may be remembered"]
    Remember,
    #[name = "ask: always a card"]
    Ask,
    #[name = "deny: never runs"]
    Deny,
}

/// What the actions mean, under every listing.
const LEGEND: &str = "auto: runs without a card under Approve ×N and continuous mode; remember: a card, on which a person may also approve and remember the exact command; ask: always a card; deny: never runs.";

/// Show what each class of command does here, for this thread's agent and the server (only you see it).
#[poise::command(slash_command, guild_only, rename = "show")]
pub(super) async fn policy_show(ctx: Ctx<'_>) -> Result<(), Error> {
    let data = ctx.data();
    let guild = GuildId::from(guild_of(ctx)?);
    let bullets = |lines: &[String]| {
        lines
            .iter()
            .map(|l| format!("- {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut text = String::new();
    if data
        .app
        .store
        .agent_for_thread(ctx.channel_id().get())?
        .is_some()
    {
        let (_, state) = thread_agent(ctx).await?;
        let server = data.agents.agent_server_policy(&state)?;
        text.push_str(&format!(
            "Command policy for **{}**:\n{}\n\n",
            state.name(),
            bullets(&server.describe(&state.brief.settings.policy))
        ));
    }
    let mut server = data.agents.describe_server_policy(&guild)?;
    let admins = server.pop().unwrap_or_default();
    text.push_str(&format!(
        "This server's command policy:\n{}\n{admins}\n{LEGEND}",
        bullets(&server)
    ));
    reply_privately(ctx, text).await
}

/// Make a class of command stricter for this agent (owner or moderators; never looser than the server).
#[poise::command(slash_command, guild_only, rename = "set")]
pub(super) async fn policy_set(
    ctx: Ctx<'_>,
    #[description = "Which class of command"] class: RiskChoice,
    #[description = "What it does for this agent"] action: ActionChoice,
) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let (binding, state) = thread_agent(ctx).await?;
    if !may_share(&binding, &author(ctx)) {
        return Err(UserError::new(
            "Only the agent's owner and moderators (Manage Threads) can change its policy.",
        )
        .into());
    }
    let RiskChoice(risk) = class;
    let action = match action {
        ActionChoice::Auto => Some(ClassAction::Auto),
        ActionChoice::Remember => Some(ClassAction::Remember),
        ActionChoice::Ask => Some(ClassAction::Ask),
        ActionChoice::Deny => Some(ClassAction::Deny),
        ActionChoice::ServerDefault => None,
    };
    ctx.data().agents.check_narrowing(&state, risk, action)?;
    let server = ctx.data().agents.agent_server_policy(&state)?;
    let by = person_of(ctx.author());
    ctx.data()
        .supervisor
        .send(&state.id, Event::SetPolicy { risk, action, by })?;
    let now = match action {
        Some(action) => action.max(server.action(risk)),
        None => server.action(risk),
    };
    reply_privately(
        ctx,
        format!(
            "{} commands are now `{}` for this agent.",
            capitalise(risk.label()),
            now.label()
        ),
    )
    .await
}

/// Change what a class of command does in this whole server (server admins, Manage Server).
#[poise::command(slash_command, guild_only, rename = "server-set")]
pub(super) async fn policy_server_set(
    ctx: Ctx<'_>,
    #[description = "Which class of command"] class: RiskChoice,
    #[description = "What it does in this server"] action: ServerActionChoice,
) -> Result<(), Error> {
    let action = match action {
        ServerActionChoice::Auto => ClassAction::Auto,
        ServerActionChoice::Remember => ClassAction::Remember,
        ServerActionChoice::Ask => ClassAction::Ask,
        ServerActionChoice::Deny => ClassAction::Deny,
    };
    change_server(ctx, class.0, ServerPolicyChange::Set(action)).await
}

/// Give a class of command back to the operator's config in this server (server admins, Manage Server).
#[poise::command(slash_command, guild_only, rename = "server-reset")]
pub(super) async fn policy_server_reset(
    ctx: Ctx<'_>,
    #[description = "Which class of command"] class: RiskChoice,
) -> Result<(), Error> {
    change_server(ctx, class.0, ServerPolicyChange::Reset).await
}

async fn change_server(ctx: Ctx<'_>, risk: Risk, change: ServerPolicyChange) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let guild = GuildId::from(guild_of(ctx)?);
    let by = person_of(ctx.author());
    let in_force = ctx
        .data()
        .agents
        .change_server_policy(&guild, &author(ctx), &by, risk, change)
        .await?;
    let what = match change {
        ServerPolicyChange::Set(_) => "now",
        ServerPolicyChange::Reset => "back to the operator's config:",
    };
    reply_privately(
        ctx,
        format!(
            "{} commands are {what} `{}` in this server, from each agent's next proposal on (an agent's owner may still make them stricter for their agent).",
            capitalise(risk.label()),
            in_force.label()
        ),
    )
    .await
}
