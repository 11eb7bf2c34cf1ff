//! The `/agent …` slash commands, one file per group: each parses its options, asks the service
//! (`crate::service`) for the rules and the supervisor for the agent, and renders the answer.
//!
//! `Data` is what every command reaches: the `App`, the `AgentService`, the `Supervisor`, the
//! surface and the agents' runtime (slow work goes there, off the gateway's thread). `all()` lists
//! the registered commands: `/agent`, whose `subcommands(...)` names every group, and `/memory`.
//! `thread_agent` finds the thread's agent and its binding, or answers with a `UserError`.

pub(super) mod audit;
mod budget;
mod confirm;
mod control;
pub(super) mod delete;
mod export;
mod fork;
mod help;
mod list;
pub(super) mod memory;
mod models;
mod policy;
pub(super) mod rewind;
pub(super) mod rules;
mod share;
mod spend_chart;
mod start;
mod status;

use anyhow::Context as _;

pub use super::data::{Ctx, Data, Error};
use crate::core::state::AgentState;
use crate::service::UserError;
use crate::store::ThreadBinding;

/// Every command the bot registers.
pub fn all() -> Vec<poise::Command<Data, Error>> {
    vec![agent(), memory::memory()]
}

/// Agent commands. Use them in a channel to start an agent, and in its thread for the rest.
#[poise::command(
    slash_command,
    guild_only,
    subcommands(
        "start::start",
        "status::status",
        "audit::audit",
        "rules::rules",
        "control::pause",
        "control::resume",
        "control::finish",
        "control::stop",
        "control::archive",
        "delete::delete",
        "list::list",
        "share::share",
        "share::unshare",
        "export::export",
        "fork::fork",
        "rewind::rewind",
        "budget::budget",
        "policy::policy",
        "models::models",
        "help::help"
    )
)]
async fn agent(_ctx: Ctx<'_>) -> Result<(), Error> {
    Ok(())
}

/// The agent of the thread this command is used in; elsewhere a `UserError` saying so.
async fn thread_agent(ctx: Ctx<'_>) -> Result<(ThreadBinding, AgentState), Error> {
    let store = &ctx.data().app.store;
    let Some(agent) = store.agent_for_thread(ctx.channel_id().get())? else {
        return Err(UserError::new("Use this in an agent's thread.").into());
    };
    let binding = store.binding(&agent)?.context("binding vanished")?;
    let state = store.load_agent(&agent)?.context("agent vanished")?;
    Ok((binding, state))
}

/// The server a guild-only command runs in.
fn guild_of(ctx: Ctx<'_>) -> Result<u64, Error> {
    Ok(ctx.guild_id().context("guild only")?.get())
}

/// Capitalises the first letter, for labels that start a line.
pub(super) fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().collect::<String>() + chars.as_str())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use crate::core::decision::APPROVE_N_MAX;

    /// `/agent` as it is registered with Discord.
    fn registered() -> serde_json::Value {
        super::agent()
            .create_as_slash_command()
            .map(|command| serde_json::to_value(command).unwrap_or_default())
            .unwrap_or_default()
    }

    fn option(options: &serde_json::Value, name: &str) -> serde_json::Value {
        options["options"]
            .as_array()
            .and_then(|all| all.iter().find(|o| o["name"] == name).cloned())
            .unwrap_or_default()
    }

    #[test]
    fn the_policy_command_offers_every_risk_class() {
        let class = option(&option(&option(&registered(), "policy"), "set"), "class");
        let offered: Vec<&str> = class["choices"]
            .as_array()
            .map(|choices| choices.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        let classes: Vec<&str> = crate::core::policy::ALL_RISKS
            .iter()
            .map(|r| r.title())
            .collect();
        assert_eq!(offered, classes, "{class}");
    }

    #[test]
    fn continuous_is_capped_at_the_approve_n_maximum() {
        let continuous = option(&option(&registered(), "start"), "continuous");
        assert_eq!(
            continuous["max_value"].as_f64(),
            Some(f64::from(APPROVE_N_MAX)),
            "the slash option's maximum differs from APPROVE_N_MAX: {continuous}"
        );
    }
}
