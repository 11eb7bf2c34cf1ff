//! `/agent status`: the agent's state, last action, spend, policy and sub-agents, with its budget
//! burn-down as a chart, privately.
//!
//! The burn-down chart comes from `Store::spend_after_each_cycle` and is drawn on the agents'
//! runtime, off the gateway's thread.

use poise::serenity_prelude::CreateAttachment;

use super::{thread_agent, Ctx, Error};
use crate::budget::Budgets;
use crate::charts::{burn_down_png, BurnDown};
use crate::core::budget::{format_usd, soft_cap};
use crate::core::state::Phase;
use crate::surface::discord::respond::{defer_privately, send_privately};

/// Show the agent's state, cycle, last action and approvals left, and a chart of its spend.
#[poise::command(slash_command, guild_only)]
pub(super) async fn status(ctx: Ctx<'_>) -> Result<(), Error> {
    // Reading every step and drawing the chart may take longer than an interaction may wait.
    defer_privately(ctx).await?;
    let (_, state) = thread_agent(ctx).await?;
    let last = state
        .last_episode()
        .map(|e| format!("`{}` ({})", e.command.name, e.outcome.status()))
        .unwrap_or_else(|| "none yet".into());
    let data = ctx.data();
    let now = ctx.data().app.clock.now();
    let limit = data.app.budgets.agent_limit(&state);
    let spent = data
        .app
        .budgets
        .ledger()
        .account(&Budgets::agent_account(&state.id))?;
    let waiting = state
        .progress
        .paced
        .as_ref()
        .filter(|p| p.until > now && state.progress.phase == Phase::Thinking)
        .map(|p| format!("\nRate limited: {}", p.describe()))
        .unwrap_or_default();
    let policy = data
        .agents
        .agent_server_policy(&state)?
        .describe(&state.brief.settings.policy)
        .join(", ");
    let subagents = data.app.store.subagents(&state.id)?;
    let subagents = if subagents.is_empty() {
        String::new()
    } else {
        let listed: Vec<String> = subagents
            .iter()
            .map(|r| {
                format!(
                    "{}: {} ({} messages, {})",
                    r.key,
                    r.name,
                    r.messages.len().saturating_sub(1),
                    format_usd(r.spent)
                )
            })
            .collect();
        format!("\nSub-agents: {}", listed.join("; "))
    };
    let memory = match data.app.memory.as_ref().map(|m| m.off()) {
        None => "\nMemory: disabled in the config".to_string(),
        Some(Some(off)) => format!("\nMemory: {}", off.describe()),
        Some(None) => String::new(),
    };
    let taint = state
        .safety
        .tainted
        .as_ref()
        .map_or(String::new(), |taint| {
            format!(
                "\nRead untrusted content in {}: commands that can send data out ask a person",
                taint.describe()
            )
        });
    let text = format!(
        "**{}** — {} — cycle {}\nLast action: {last}\nApprovals left: {}\nSpend: {} of {} ({} reserved for calls in flight){waiting}\nTokens: {} prompt + {} completion in {} calls\nPolicy: {policy}{subagents}{memory}{taint}",
        state.name(),
        match &state.progress.phase {
            Phase::Paused(reason) => reason.describe(),
            other => other.label().to_string(),
        },
        state.progress.cycle,
        state.safety.auto_approvals_left,
        format_usd(spent.spent),
        format_usd(limit),
        format_usd(spent.reserved),
        state.money.usage.prompt_tokens,
        state.money.usage.completion_tokens,
        state.money.usage.calls
    );
    let store = data.app.store.clone();
    let agent = state.id.clone();
    let chart = BurnDown {
        agent_name: state.name().to_string(),
        starts_after: state.progress.history_from.unwrap_or(0),
        spent_after_cycle: Vec::new(),
        budget: limit,
        soft_cap: soft_cap(limit, data.app.budgets.soft_cap_percent()),
    };
    let (cycle, spent_now, from) = (
        state.progress.cycle,
        spent.spent,
        state.progress.history_from.unwrap_or(0),
    );
    let png = data
        .agents_runtime
        .spawn_blocking(move || -> Result<Vec<u8>, Error> {
            let mut chart = chart;
            chart.spent_after_cycle = store.spend_after_each_cycle(&agent, from)?;
            // The cycle under way has spent too (its model call), though no step records it yet.
            let recorded = chart.spent_after_cycle.last().copied();
            if recorded.is_none_or(|(last, so_far)| last < cycle && so_far < spent_now) {
                chart.spent_after_cycle.push((cycle, spent_now));
            }
            Ok(burn_down_png(&chart)?)
        })
        .await??;
    send_privately(
        ctx,
        text,
        vec![CreateAttachment::bytes(
            png,
            format!("{}-spend.png", state.id),
        )],
    )
    .await
}
