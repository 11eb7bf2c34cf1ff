//! A server's command policy as its admins set it (`/agent policy server-set|server-reset`): who
//! may (Manage Server, read from the member's permissions), how far (the operator's config is the
//! ceiling: `Policy::check_admin_choice` with the config's `AdminLeeway`), where it is kept
//! (`Store::change_server_policy`, one record per server), and the trail: each change is written to
//! the server's own trail and to the trail of each of its agents not finished, all on disk before
//! the admin is told.
//!
//! Agents read their server's policy at each step (`PolicyConfig::for_agent` with the store's
//! record), so a change applies from an agent's next proposal on; a card already shown keeps what
//! it offered, and an approval is still checked against the policy in force when it comes.

use super::rights::Requester;
use super::{AgentService, ServiceResult, UserError};
use crate::core::audit::{AuditEntry, AuditEvent};
use crate::core::commands::Risk;
use crate::core::person::Person;
use crate::core::policy::{AdminChoice, ClassAction, Policy};
use crate::core::state::{AgentState, GuildId, Phase};

/// What a server admin does to one class of their server's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerPolicyChange {
    /// The class does this in the server (within what the operator allows).
    Set(ClassAction),
    /// The class goes back to what the operator's config says.
    Reset,
}

/// Why a member may not change a server's policy; names the right they lack.
pub const NOT_A_SERVER_ADMIN: &str = "Only server admins can change this server's command policy: it needs the Manage Server permission, which you do not have here. Nothing changed.";

impl AgentService {
    /// The policy of a server (`None`: the console), its admins' choices laid over the
    /// operator's.
    pub fn server_policy(&self, guild: Option<&GuildId>) -> ServiceResult<Policy> {
        let choices = match guild {
            Some(guild) => self.store.server_policy(guild)?,
            None => Default::default(),
        };
        Ok(self.config.policy.for_server(guild, &choices))
    }

    /// The policy of the server an agent lives in, before the agent's own narrowing.
    pub fn agent_server_policy(&self, state: &AgentState) -> ServiceResult<Policy> {
        self.server_policy(state.money.spender.guild.as_ref())
    }

    /// One line per class saying what it does in the server and who decided it, then what its
    /// admins may choose.
    pub fn describe_server_policy(&self, guild: &GuildId) -> ServiceResult<Vec<String>> {
        let operator = self.config.policy.for_guild(Some(guild));
        let leeway = &self.config.policy.admin_leeway;
        let choices = self.store.server_policy(guild)?;
        let mut lines = operator.describe_server(&choices, leeway);
        let looser: Vec<String> = leeway
            .actions()
            .map(|a| format!("`{}`", a.label()))
            .collect();
        lines.push(match looser.is_empty() {
            true => "Server admins (Manage Server) may make any class stricter; the operator lets them loosen none.".to_string(),
            false => format!(
                "Server admins (Manage Server) may make any class stricter, and loosen one to {} (never one the operator denies).",
                looser.join(" or ")
            ),
        });
        Ok(lines)
    }

    /// A server admin's change to one class of their server's policy; returns the class's action
    /// in the server afterwards. Refused, with nothing changed, for anyone without Manage Server
    /// and for a choice the operator does not allow.
    pub async fn change_server_policy(
        &self,
        guild: &GuildId,
        who: &Requester,
        by: &Person,
        risk: Risk,
        change: ServerPolicyChange,
    ) -> ServiceResult<ClassAction> {
        if !who.manage_guild {
            return Err(UserError::new(NOT_A_SERVER_ADMIN).into());
        }
        let operator = self.config.policy.for_guild(Some(guild));
        let leeway = &self.config.policy.admin_leeway;
        let now = self.clock.now();
        let choice = match change {
            ServerPolicyChange::Set(action) => {
                operator
                    .check_admin_choice(risk, action, leeway)
                    .map_err(|refused| UserError(format!("{refused} Nothing changed.")))?;
                Some(AdminChoice {
                    action,
                    by: by.clone(),
                    at: now,
                })
            }
            ServerPolicyChange::Reset => None,
        };
        let choices = self.store.change_server_policy(guild, risk, choice)?;
        let (in_force, _) = operator.server_action(&choices, leeway, risk);
        let entry = AuditEntry {
            at: now,
            by: by.into(),
            event: AuditEvent::ServerPolicyChanged {
                class: risk.label().to_string(),
                chosen: match change {
                    ServerPolicyChange::Set(action) => Some(action.label().to_string()),
                    ServerPolicyChange::Reset => None,
                },
                in_force: in_force.label().to_string(),
            },
        };
        self.store.append_server_audit(guild, &entry)?;
        for agent in self.agents_to_tell(guild)? {
            self.store.append_audit(&agent, &entry)?;
        }
        self.store.flush().await?;
        Ok(in_force)
    }

    /// The server's agents that are not finished: their next proposals follow the change, so
    /// their trails say so. A server runs a bounded number of agents (the caps), so this is too.
    fn agents_to_tell(&self, guild: &GuildId) -> ServiceResult<Vec<String>> {
        let Ok(guild_id) = guild.as_str().parse::<u64>() else {
            return Ok(Vec::new());
        };
        let mut agents = Vec::new();
        for (owner, agent) in self.store.live_agents(guild_id)? {
            match self.store.load_agent_record(&agent)? {
                // The live index keeps a finished agent until someone meets it: this drops it.
                Some(state) if matches!(state.progress.phase, Phase::Finished { .. }) => {
                    self.store.forget_live(guild_id, owner, &agent)?
                }
                None => self.store.forget_live(guild_id, owner, &agent)?,
                Some(_) => agents.push(agent),
            }
        }
        Ok(agents)
    }
}
