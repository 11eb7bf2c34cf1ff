//! `/agent policy show|set`: what each risk class of command does for this agent, and making it
//! stricter.
//!
//! The classes come from `ALL_RISKS`; a change is checked by `check_narrowing` and sent as
//! `Event::SetPolicy`, which the core audits.

use super::{capitalise, thread_agent, Ctx, Error};
use crate::core::commands::Risk;
use crate::core::event::Event;
use crate::core::policy::{ClassAction, ALL_RISKS};
use crate::service::rights::may_share;
use crate::service::UserError;
use crate::surface::discord::people::person_of;
use crate::surface::discord::respond::{author, defer_privately, reply_privately};

/// What each risk class of command does for this agent: show it, or make it stricter.
#[poise::command(slash_command, guild_only, subcommands("policy_show", "policy_set"))]
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

/// Show what each class of command does for this agent (only you see it).
#[poise::command(slash_command, guild_only, rename = "show")]
pub(super) async fn policy_show(ctx: Ctx<'_>) -> Result<(), Error> {
    let (_, state) = thread_agent(ctx).await?;
    let server = ctx.data().app.config.policy.for_agent(&state);
    let lines = server.describe(&state.brief.settings.policy);
    reply_privately(ctx,
        format!(
            "Command policy for **{}**:\n{}\nauto: runs without a card under Approve ×N and continuous mode; ask: always a card; deny: never runs.",
            state.name(),
            lines.iter().map(|l| format!("- {l}")).collect::<Vec<_>>().join("\n")
        ))
    .await
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
    let server = ctx.data().app.config.policy.for_agent(&state);
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
