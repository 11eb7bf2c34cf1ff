//! The policy an agent's actor applies: its server's, with the admins' choices read from the
//! store at each step, or every class asking at least when those cannot be read.

use crate::config::Config;
use crate::core::policy::{ClassAction, Policy};
use crate::core::state::AgentState;
use crate::store::Store;

/// The operator's policy with every class asking at least: what an agent starts with when its
/// server's admins' choices cannot be read, since they might have made a class stricter.
pub(super) fn asking(config: &Config, state: &AgentState) -> Policy {
    let operator = config.policy.for_agent(state, &Default::default());
    crate::core::policy::ALL_RISKS
        .into_iter()
        .fold(operator.clone(), |policy, risk| {
            policy.with(risk, operator.action(risk).max(ClassAction::Ask))
        })
}

/// The policy of the server `state` lives in, with its admins' choices from the store; `None`
/// (logged) when the store cannot say.
pub(super) fn server_policy(config: &Config, store: &Store, state: &AgentState) -> Option<Policy> {
    let choices = match &state.money.spender.guild {
        Some(guild) => match store.server_policy(guild) {
            Ok(choices) => choices,
            Err(e) => {
                tracing::error!(agent = %state.id, error = %e, "cannot read the server's policy");
                return None;
            }
        },
        None => Default::default(),
    };
    Some(config.policy.for_agent(state, &choices))
}
