//! `[approvals]`: the quorum each risk class needs and how long its cards wait, bot-wide and per
//! server.
//!
//! Card deadlines (`expiry_for`): a card waits `default_expiry_secs` (a day unless set) and then
//! parks its agent, unless its class has a rule of its own, bot-wide or in its server; a deadline
//! of 0 waits for ever, any other lies between a second and a week, checked at load. A server's
//! `approvers_role`, when set, is the role whose members' approvals count toward a quorum of more
//! than one and whom an escalated deadline mentions.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::core::expiry::{
    Expiry, ExpiryAction, ExpiryRule, DEFAULT_DEADLINE_SECS, MAX_EXPIRY_SECS,
};
use crate::core::state::GuildId;

use super::{invalid, ConfigError};

/// `[approvals]`: how many distinct people must approve a class's commands, bot-wide and per
/// server (`[approvals.guilds."<id>"]`). A class left out needs one approval.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    pub quorum: BTreeMap<crate::core::commands::Risk, u32>,
    /// How long a card of a class without a rule of its own waits before its agent is parked
    /// (0: for ever), so that an agent nobody answers does not stay running for good.
    pub default_expiry_secs: u64,
    /// How long each class's cards wait for a decision, and what happens then.
    pub expiry: BTreeMap<crate::core::commands::Risk, ExpiryRule>,
    pub guilds: BTreeMap<String, GuildApprovals>,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        ApprovalsConfig {
            quorum: BTreeMap::new(),
            default_expiry_secs: DEFAULT_DEADLINE_SECS,
            expiry: BTreeMap::new(),
            guilds: BTreeMap::new(),
        }
    }
}

/// One server's `[approvals]`: its quorums, over the bot-wide ones, and the role whose members
/// alone count toward them (anyone who may decide, when unset).
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct GuildApprovals {
    pub quorum: BTreeMap<crate::core::commands::Risk, u32>,
    pub expiry: BTreeMap<crate::core::commands::Risk, ExpiryRule>,
    pub approvers_role: Option<u64>,
}

impl ApprovalsConfig {
    /// The quorums of one server (`None`: the console, or an agent outside any server).
    pub fn for_guild(&self, guild: Option<&GuildId>) -> crate::core::quorum::Quorum {
        let bot_wide = crate::core::quorum::Quorum::default().with_all(&self.quorum);
        match guild.and_then(|g| self.guilds.get(g.as_str())) {
            Some(server) => bot_wide.with_all(&server.quorum),
            None => bot_wide,
        }
    }

    /// The card deadlines in one server: the bot-wide rules, with the server's over them.
    pub fn expiry_for(&self, guild: &GuildId) -> Expiry {
        let default = ExpiryRule {
            after_secs: self.default_expiry_secs,
            action: ExpiryAction::Park,
        };
        let bot_wide = Expiry::for_every_class(default).with_all(&self.expiry);
        match self.guilds.get(guild.as_str()) {
            Some(server) => bot_wide.with_all(&server.expiry),
            None => bot_wide,
        }
    }

    /// The role whose members count toward a quorum in `guild`, if the server names one.
    pub fn approvers_role(&self, guild: u64) -> Option<u64> {
        self.guilds.get(&guild.to_string())?.approvers_role
    }

    /// Every quorum named, with where: a quorum of 0 or above `MAX_QUORUM` is a mistake. The
    /// problem names its place itself, so the field reported is the whole section.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let all = self
            .quorum
            .iter()
            .map(|q| ("approvals.quorum".to_string(), q))
            .chain(self.guilds.iter().flat_map(|(guild, server)| {
                server
                    .quorum
                    .iter()
                    .map(move |q| (format!("approvals.guilds.\"{guild}\".quorum"), q))
            }));
        for (place, (risk, n)) in all {
            if !(1..=crate::core::quorum::MAX_QUORUM).contains(n) {
                return Err(invalid(
                    "approvals",
                    format!(
                        "{place}.{} = {n}: a quorum is from 1 to {}",
                        risk.label(),
                        crate::core::quorum::MAX_QUORUM
                    ),
                ));
            }
        }
        let deadlines = self
            .expiry
            .iter()
            .map(|rule| ("approvals.expiry".to_string(), rule))
            .chain(self.guilds.iter().flat_map(|(guild, server)| {
                server
                    .expiry
                    .iter()
                    .map(move |rule| (format!("approvals.guilds.\"{guild}\".expiry"), rule))
            }));
        if self.default_expiry_secs > MAX_EXPIRY_SECS {
            return Err(invalid(
                "approvals.default_expiry_secs",
                format!(
                    "a card's deadline is 0 (none) or from 1 second to {MAX_EXPIRY_SECS} (a week)"
                ),
            ));
        }
        for (place, (risk, rule)) in deadlines {
            if rule.after_secs > MAX_EXPIRY_SECS {
                return Err(invalid("approvals", format!(
                    "{place}.{}.after_secs = {}: a card's deadline is 0 (none) or from 1 second to {MAX_EXPIRY_SECS} (a week)",
                    risk.label(),
                    rule.after_secs
                )));
            }
        }
        Ok(())
    }
}
