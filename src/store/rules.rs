//! The server-wide approve-and-remember rules' tree: one record per rule, keyed by server and
//! rule id, written with the step that made it (`Commit::server_rule`), counted on each use, and
//! removed when revoked; expired ones are removed when the server's next rule is saved. An
//! agent's own rules live in its state.

use chrono::{DateTime, Utc};

use super::{agent_prefix, decode, encode, Store, StoreError};
use crate::core::rules::ApprovalRule;
use crate::core::state::GuildId;

pub(super) fn rule_key(guild: &GuildId, id: &str) -> Vec<u8> {
    let mut key = agent_prefix(guild.as_str());
    key.extend_from_slice(id.as_bytes());
    key
}

impl Store {
    /// The rules of `guild`, oldest first, expired ones included (they approve nothing).
    pub fn server_rules(&self, guild: &GuildId) -> Result<Vec<ApprovalRule>, StoreError> {
        self.rules
            .scan_prefix(agent_prefix(guild.as_str()))
            .map(|item| {
                let (key, raw) = item?;
                decode(&key, &raw)
            })
            .collect::<Result<Vec<ApprovalRule>, _>>()
            .map(|mut rules| {
                rules.sort_by_key(|rule| rule.created_at);
                rules
            })
    }

    /// Counts one use of `guild`'s rule `id` at `now` (nothing when it was revoked meanwhile).
    pub fn count_server_rule_use(
        &self,
        guild: &GuildId,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let key = rule_key(guild, id);
        // Several agents of a server may use one rule at once: the count is updated in place.
        let mut failure = None;
        self.rules.update_and_fetch(&key, |raw| {
            let mut rule: ApprovalRule = match decode(&key, raw?) {
                Ok(rule) => rule,
                Err(e) => {
                    failure = Some(e);
                    return raw.map(<[u8]>::to_vec);
                }
            };
            rule.uses += 1;
            rule.last_used = Some(now);
            encode(&rule).ok().or_else(|| raw.map(<[u8]>::to_vec))
        })?;
        failure.map_or(Ok(()), Err)
    }

    /// Removes `guild`'s rule `id`, returning it; `None` when there is no such rule.
    pub fn revoke_server_rule(
        &self,
        guild: &GuildId,
        id: &str,
    ) -> Result<Option<ApprovalRule>, StoreError> {
        match self.rules.remove(rule_key(guild, id))? {
            Some(raw) => Ok(Some(decode(&rule_key(guild, id), &raw)?)),
            None => Ok(None),
        }
    }

    /// Removes `guild`'s rules that expired before `now`, so that the tree holds at most the
    /// live rules a server may have and the few made since the last prune.
    pub fn prune_server_rules(
        &self,
        guild: &GuildId,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        for rule in self.server_rules(guild)? {
            if !rule.live(now) {
                self.rules.remove(rule_key(guild, &rule.id))?;
            }
        }
        Ok(())
    }
}
