//! `/agent budget show|set`: spend and limits, and changing an agent's, a user's or the server's
//! budget.
//!
//! An agent's budget goes through `AgentService::check_agent_budget` and then `Event::SetBudget` to
//! its actor; a user's or the server's limit through `AgentService::set_limit`.

use crate::surface::discord::people::person_of;
use anyhow::Context as _;
use poise::serenity_prelude::UserId;

use super::spend_chart::budget_chart;
use super::{capitalise, guild_of, thread_agent, Ctx, Error};
use crate::budget::LimitScope;
use crate::core::budget::{format_usd, usd_to_micros, BudgetKind, Micros};
use crate::core::event::Event;
use crate::core::state::{GuildId, Spender};
use crate::service::LimitChange;
use crate::surface::discord::respond::{author, defer_privately, reply_privately};

/// Spend and budgets: see them (and chart them), or change them.
#[poise::command(
    slash_command,
    guild_only,
    subcommands("budget_show", "budget_set", "budget_chart")
)]
pub(super) async fn budget(_ctx: Ctx<'_>) -> Result<(), Error> {
    Ok(())
}

/// Show spend and limits: this thread's agent (if any), yours today, and the server's.
#[poise::command(slash_command, guild_only, rename = "show")]
pub(super) async fn budget_show(ctx: Ctx<'_>) -> Result<(), Error> {
    let data = ctx.data();
    let guild = GuildId::from(guild_of(ctx)?);
    let now = ctx.data().app.clock.now();
    let agent = data.app.store.agent_for_thread(ctx.channel_id().get())?;
    let mut lines = Vec::new();
    let (agent_id, spender, agent_limit, name) = match &agent {
        Some(id) => {
            let state = data.app.store.load_agent(id)?.context("agent vanished")?;
            let limit = data.app.budgets.agent_limit(&state);
            (
                state.id.clone(),
                state.money.spender.clone(),
                limit,
                Some(state.name().to_string()),
            )
        }
        // Outside an agent's thread: the caller's own day and the server.
        None => (
            String::new(),
            Spender {
                user: Some(ctx.author().id.get().to_string()),
                guild: Some(guild.clone()),
            },
            Micros::ZERO,
            None,
        ),
    };
    for line in data
        .app
        .budgets
        .lines(&agent_id, &spender, agent_limit, now)?
        .into_iter()
        .skip(usize::from(name.is_none()))
    {
        let label = match (&name, line.kind) {
            (Some(name), BudgetKind::Agent) => format!("**{name}**"),
            (None, BudgetKind::OwnerDaily) => "**You, today**".to_string(),
            (_, other) => format!("**{}**", capitalise(other.label())),
        };
        let limit = line
            .limit
            .map(format_usd)
            .unwrap_or_else(|| "no limit".into());
        let reserved = if !line.account.reserved.is_zero() {
            format!(" (+{} reserved)", format_usd(line.account.reserved))
        } else {
            String::new()
        };
        lines.push(format!(
            "{label}: {} of {limit}{reserved}",
            format_usd(line.account.spent)
        ));
    }
    reply_privately(ctx, lines.join("\n")).await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, poise::ChoiceParameter)]
enum BudgetScope {
    #[name = "this agent"]
    Agent,
    #[name = "each user per day"]
    UserDaily,
    #[name = "the server per day"]
    GuildDaily,
    #[name = "the server per month"]
    GuildMonthly,
}

/// Change this agent's budget, or (server admins) a user's daily or the server's budget.
#[poise::command(slash_command, guild_only, rename = "set")]
pub(super) async fn budget_set(
    ctx: Ctx<'_>,
    #[description = "Which budget"] scope: BudgetScope,
    #[description = "Dollars (0 removes a user or server limit)"]
    #[min = 0.0]
    usd: f64,
    #[description = "For a daily user budget: only this user"] user: Option<UserId>,
) -> Result<(), Error> {
    defer_privately(ctx).await?;
    let data = ctx.data();
    let who = author(ctx);
    let micros = usd_to_micros(usd);
    let limit_scope = match scope {
        BudgetScope::Agent => {
            let (binding, state) = thread_agent(ctx).await?;
            data.agents.check_agent_budget(&binding, &who, micros)?;
            let by = person_of(ctx.author());
            data.supervisor
                .send(&state.id, Event::SetBudget { budget: micros, by })?;
            return reply_privately(
                ctx,
                format!("The agent's budget is now {}.", format_usd(micros)),
            )
            .await;
        }
        BudgetScope::UserDaily => LimitScope::UserDaily,
        BudgetScope::GuildDaily => LimitScope::GuildDaily,
        BudgetScope::GuildMonthly => LimitScope::GuildMonthly,
    };
    let by = person_of(ctx.author());
    let user = user
        .filter(|_| limit_scope == LimitScope::UserDaily)
        .map(|u| u.get());
    let change = LimitChange {
        scope: limit_scope,
        guild_id: guild_of(ctx)?,
        user,
        micros,
    };
    let resumed = data.agents.set_limit(&data.supervisor, &who, &by, change)?;
    let what = match (limit_scope, &user) {
        (LimitScope::UserDaily, Some(u)) => format!("<@{u}>'s daily budget"),
        (LimitScope::UserDaily, None) => "Each user's daily budget".into(),
        (LimitScope::GuildDaily, _) => "The server's daily budget".into(),
        (LimitScope::GuildMonthly, _) => "The server's monthly budget".into(),
    };
    let amount = if micros.is_zero() {
        "no limit".to_string()
    } else {
        format_usd(micros)
    };
    let resumed = match resumed {
        0 => String::new(),
        1 => " 1 agent paused for budget is trying again.".into(),
        n => format!(" {n} agents paused for budget are trying again."),
    };
    reply_privately(ctx, format!("{what} is now {amount}.{resumed}")).await
}
