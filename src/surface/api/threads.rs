//! A task bound to a Discord thread: `additional_input.discord_channel` makes the API's agent an
//! ordinary Discord agent too, when the API runs inside the bot (`run` with `api.listen`).
//!
//! The API reaches Discord only through `ThreadHost`, the port the Discord surface implements
//! (this module names nothing of Discord's, so the two surfaces do not import each other). A
//! bound start (`start_bound`) does what `/agent start` does, in the same order, and refuses
//! with a 422 saying why before anything is created or reserved: the API must run inside the
//! bot, the caller's token must name a `discord_user` (the agent's owner on Discord), the channel
//! must be a text channel of a server this process serves where the bot may post an agent's
//! cards (`ThreadHost::prepare`, the same permission check as `/agent start`), the owner must be
//! a member there, and the server's checks apply to the owner (`AgentService::check_start`: the
//! start role, the budget ceiling and the caps; `check_model`: the server's models). Then the
//! thread is opened, its `ThreadBinding` saved with the owner, and the agent made and started
//! with the owner and the server as its spender, so its rights (sharing, roles, quorum),
//! policy and budgets are those of an agent the owner started; `AgentBrief::api_caller` keeps
//! the caller, who drives it over the API and is named on the trail for what it decides.
//!
//! Its cards are posted by the Discord surface (`ApiSurface` stands in front of it), and a card's
//! button and a step decide the same proposal through `Supervisor::decide`: the actor's claim
//! (`Store::record_decision`, a compare-and-swap) lets the first land and answers the other
//! `DecideError::AlreadyDecided` (the click is told who decided; the step answers with the
//! agent's state and a note).

use async_trait::async_trait;

use super::{Api, ApiError, Caller, TaskOptions};
use crate::core::state::{AgentState, GuildId, Spender};
use crate::service::rights::Requester;
use crate::service::{AgentService, NewAgent, UserError};
use crate::store::ThreadBinding;

/// Where a bound agent's thread would go: the channel's server, and its owner as a member
/// there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPlace {
    pub guild_id: u64,
    pub owner: Requester,
}

/// Why a task cannot be bound to the channel it names; its text is the 422's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindRefusal {
    /// Not a text channel of a server this process serves (a DM, a voice channel, a channel of
    /// another server or shard, or none at all).
    #[error("Channel {0} is not a text channel of a server this bot serves; a task can live only in such a channel.")]
    NotAServerChannel(u64),
    /// The bot may not open the thread or post the agent's cards there: what it lacks.
    #[error("{0}")]
    BotMayNot(String),
    /// The token's Discord user is not a member of the channel's server.
    #[error("Discord user {user} (this token's discord_user) is not a member of channel {channel}'s server.")]
    NotAMember { user: u64, channel: u64 },
    /// Discord could not be asked (an outage, a timeout): trying again may work.
    #[error("Discord did not answer ({0}); try again.")]
    Unreachable(String),
}

/// Discord, as a bound task needs it: implemented by the Discord surface.
#[async_trait]
pub trait ThreadHost: Send + Sync {
    /// Checks that the bot may run an agent's cards in `channel` and that `owner` is a member of
    /// its server; where, and who the owner is there.
    async fn prepare(&self, channel: u64, owner: u64) -> Result<ThreadPlace, BindRefusal>;

    /// Opens the agent's public thread in `channel`, named after `title`; its id.
    async fn open_thread(&self, channel: u64, title: &str) -> Result<u64, BindRefusal>;
}

/// The channel `additional_input.discord_channel` names: a Discord id written as a string (ids
/// do not fit a JSON number exactly everywhere), or why not.
pub(super) fn channel_option(value: &serde_json::Value) -> Result<u64, ApiError> {
    value
        .as_str()
        .map(str::trim)
        .filter(|text| !text.is_empty() && text.len() <= 20 && text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|text| text.parse::<u64>().ok())
        .filter(|id| *id != 0)
        .ok_or_else(|| {
            ApiError::Invalid(
                "additional_input.discord_channel must be a Discord text channel's id, written as a string of digits.".into(),
            )
        })
}

fn refused(refusal: BindRefusal) -> ApiError {
    match refusal {
        BindRefusal::Unreachable(_) => ApiError::Unavailable(refusal.to_string()),
        other => ApiError::Invalid(other.to_string()),
    }
}

/// A service refusal (a cap, a model, a role) as a 422 with its text; anything else is a 500.
fn service_refusal(error: anyhow::Error) -> ApiError {
    match error.downcast::<UserError>() {
        Ok(user) => ApiError::Invalid(user.0),
        Err(other) => ApiError::internal(other),
    }
}

/// Creates and starts an agent in a new thread of `channel`, owned there by the caller's Discord
/// user, after every check `/agent start` makes; nothing is created when one refuses.
pub(super) async fn start_bound(
    api: &Api,
    caller: &Caller,
    task: &str,
    options: TaskOptions,
    channel: u64,
) -> Result<AgentState, ApiError> {
    let host = api.threads.as_ref().ok_or_else(|| {
        ApiError::Invalid(
            "This server runs without Discord (autothread serve), so a task cannot be bound to a Discord channel; run the bot (autothread run) with [api] listen set.".into(),
        )
    })?;
    let owner = caller.discord_user.ok_or_else(|| {
        ApiError::Invalid(format!(
            "The API caller {:?} has no discord_user in [[api.tokens]]: a task bound to a Discord channel needs the Discord person who owns it there.",
            caller.name
        ))
    })?;
    let place = host.prepare(channel, owner).await.map_err(refused)?;
    api.agents
        .check_start(place.guild_id, &place.owner, options.budget)
        .map_err(service_refusal)?;
    if let Some(model) = &options.model {
        api.agents
            .check_model(place.guild_id, model)
            .map_err(service_refusal)?;
    }
    let id = AgentService::new_agent_id();
    let title = options
        .profile
        .as_ref()
        .map(|profile| profile.name.clone())
        .unwrap_or_else(|| format!("agent {id}"));
    let thread = host.open_thread(channel, &title).await.map_err(refused)?;
    api.app.store.save_binding(&ThreadBinding {
        agent_id: id.clone(),
        guild_id: place.guild_id,
        parent_channel_id: channel,
        thread_id: thread,
        owner_id: owner,
        shared_users: Vec::new(),
        shared_roles: Vec::new(),
        card: None,
    })?;
    let mut state = api.agents.new_agent(
        id,
        NewAgent {
            task: task.to_string(),
            profile: options.profile,
            model: options.model,
            budget: options.budget,
            auto_approvals: options.auto_approvals,
            spender: Spender {
                user: Some(owner.to_string()),
                guild: Some(GuildId::from(place.guild_id)),
            },
            ..NewAgent::default()
        },
    );
    state.brief.api_caller = Some(caller.name.clone());
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_channel_is_an_id_written_as_digits_and_anything_else_is_refused() {
        assert_eq!(
            channel_option(&json!("3000000000000000001")).unwrap(),
            3_000_000_000_000_000_001
        );
        for wrong in [
            json!(3),
            json!(""),
            json!("0"),
            json!("12a"),
            json!("-1"),
            json!("123456789012345678901"),
        ] {
            match channel_option(&wrong) {
                Err(ApiError::Invalid(why)) => assert!(why.contains("discord_channel"), "{why}"),
                other => panic!("{wrong} was taken: {other:?}"),
            }
        }
    }
}
