//! `/agent status`: the agent's state, last action, spend, policy and sub-agents, privately.

use super::{thread_agent, Ctx, Error};
use crate::budget::Budgets;
use crate::core::budget::format_usd;
use crate::core::state::Phase;
use crate::surface::discord::respond::reply;

/// Show the agent's state, cycle, last action and approvals left.
#[poise::command(slash_command, guild_only)]
pub(super) async fn status(ctx: Ctx<'_>) -> Result<(), Error> {
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
        .paced
        .as_ref()
        .filter(|p| p.until > now && state.phase == Phase::Thinking)
        .map(|p| format!("\nRate limited: {}", p.describe()))
        .unwrap_or_default();
    let policy = data
        .app
        .config
        .policy
        .for_agent(&state)
        .describe(&state.settings.policy)
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
    let taint = state.tainted.as_ref().map_or(String::new(), |taint| {
        format!(
            "\nRead untrusted content in {}: commands that can send data out ask a person",
            taint.describe()
        )
    });
    let text = format!(
        "**{}** — {} — cycle {}\nLast action: {last}\nApprovals left: {}\nSpend: {} of {} ({} reserved for calls in flight){waiting}\nTokens: {} prompt + {} completion in {} calls\nPolicy: {policy}{subagents}{memory}{taint}",
        state.name(),
        match &state.phase {
            Phase::Paused(reason) => reason.describe(),
            other => other.label().to_string(),
        },
        state.cycle,
        state.auto_approvals_left,
        format_usd(spent.spent),
        format_usd(limit),
        format_usd(spent.reserved),
        state.usage.prompt_tokens,
        state.usage.completion_tokens,
        state.usage.calls
    );
    reply(ctx, text, true).await
}
