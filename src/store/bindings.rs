//! The Discord tree: where each agent lives (its `ThreadBinding`, found by agent or by thread, and
//! the `CardRef` of the card it shows), the index of a server's live agents by owner
//! (`live/<guild>/<owner>/<agent>`, written with each binding and built once for an older store at
//! open), the message showing each agent's live status, the threads to archive when their agent has
//! finished (`archive_when_finished`, `take_archive_mark`), the models a server's admins allow,
//! the roles that may write its memories, and its admins' command policy (`server_policy`: one
//! record per server holding at most one choice per class, changed in place by
//! `change_server_policy` so that two admins changing two classes at once both land).
//!
//! `/agent start` reads only its server's live agents (`live_agents`) and drops the finished ones
//! it meets (`forget_live`), so checking the caps on running agents does not read every agent ever
//! made. A card moving on is the usual save and writes one key; a sled transaction, which writes
//! and syncs about three log buffers, is used only when the thread or the live index changes.

use serde::{Deserialize, Serialize};

use super::{decode, encode, kv, Store, StoreError};
use crate::core::commands::Risk;
use crate::core::policy::{AdminChoice, AdminChoices};
use crate::core::state::GuildId;

/// The card currently shown for an agent, so it can be edited after a decision and re-posted
/// after a restart only when it is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardRef {
    pub cycle: u64,
    pub message_id: u64,
}

/// An agent's home in Discord: its thread, its owner and who it is shared with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadBinding {
    pub agent_id: String,
    pub guild_id: u64,
    pub parent_channel_id: u64,
    pub thread_id: u64,
    pub owner_id: u64,
    pub shared_users: Vec<u64>,
    pub shared_roles: Vec<u64>,
    pub card: Option<CardRef>,
}

impl Store {
    /// Stores a binding under the agent and under its thread, and indexes the agent as live in
    /// its server: in one transaction when the thread or the live index lacks it, else as the
    /// agent's key alone. A binding is saved whenever the agent shows a card, so an agent given a
    /// follow-up after finishing is indexed again.
    pub fn save_binding(&self, binding: &ThreadBinding) -> Result<(), StoreError> {
        let record = encode(binding)?;
        let agent_key = format!("agent/{}", binding.agent_id);
        let thread_key = format!("thread/{}", binding.thread_id);
        let live_key = live_key(binding.guild_id, binding.owner_id, &binding.agent_id);
        // Most saves only move the agent's card on (each cycle on Discord): when the thread and
        // the live index already say the same, the agent's record is one key, atomic by itself.
        // A sled transaction writes and syncs about three log buffers whatever its size, which
        // was the larger part of what a Discord cycle wrote to disk.
        let thread_known = self
            .discord
            .get(thread_key.as_bytes())?
            .is_some_and(|agent| agent.as_ref() == binding.agent_id.as_bytes());
        if thread_known && self.discord.contains_key(live_key.as_bytes())? {
            self.discord.insert(agent_key.as_bytes(), record)?;
            return Ok(());
        }
        let mut batch = kv::Batch::default();
        batch.put(&self.discord, agent_key.as_bytes(), record);
        batch.put(
            &self.discord,
            thread_key.as_bytes(),
            binding.agent_id.as_bytes(),
        );
        batch.put(&self.discord, live_key.as_bytes(), Vec::new());
        Ok(self.db.write_batch(&batch)?)
    }

    /// The record kept under `key` in the Discord tree, if there is one.
    fn discord_record<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        self.discord
            .get(key.as_bytes())?
            .map(|raw| decode(key.as_bytes(), &raw))
            .transpose()
    }

    pub fn binding(&self, agent: &str) -> Result<Option<ThreadBinding>, StoreError> {
        self.discord_record(&format!("agent/{agent}"))
    }

    pub fn agent_for_thread(&self, thread_id: u64) -> Result<Option<String>, StoreError> {
        let key = format!("thread/{thread_id}");
        Ok(self
            .discord
            .get(key.as_bytes())?
            .map(|raw| String::from_utf8_lossy(&raw).into_owned()))
    }

    /// Forgets where a deleted agent lived: its binding, its thread, its place in the live index
    /// and an archive mark.
    pub(super) fn forget_binding(&self, binding: &ThreadBinding) -> Result<(), StoreError> {
        let agent = &binding.agent_id;
        self.discord.remove(format!("agent/{agent}").as_bytes())?;
        self.discord
            .remove(format!("thread/{}", binding.thread_id).as_bytes())?;
        self.forget_live(binding.guild_id, binding.owner_id, agent)?;
        self.discord
            .remove(format!("{ARCHIVE}{agent}").as_bytes())?;
        self.forget_status_message(agent)?;
        Ok(())
    }

    /// The message that shows the agent's live status in its thread, once posted.
    pub fn status_message(&self, agent: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .discord
            .get(format!("{STATUS}{agent}").as_bytes())?
            .and_then(|raw| <[u8; 8]>::try_from(raw.as_ref()).ok())
            .map(u64::from_be_bytes))
    }

    /// Saves which message shows the agent's live status. It rides on the next durable point: a
    /// crash before it makes the next run search the thread for the message.
    pub fn save_status_message(&self, agent: &str, message: u64) -> Result<(), StoreError> {
        self.discord.insert(
            format!("{STATUS}{agent}").as_bytes(),
            &message.to_be_bytes(),
        )?;
        // Once per agent: on disk at once, so a restart never has to search the thread for it.
        self.durable.flush_blocking()?;
        Ok(())
    }

    /// Forgets the status message (it was deleted in Discord, or the agent was).
    pub fn forget_status_message(&self, agent: &str) -> Result<(), StoreError> {
        self.discord.remove(format!("{STATUS}{agent}").as_bytes())?;
        Ok(())
    }

    /// Marks the agent's thread to be archived once the agent has finished and said so
    /// (`/agent archive`), on disk before the person is told.
    pub fn archive_when_finished(&self, agent: &str) -> Result<(), StoreError> {
        self.discord
            .insert(format!("{ARCHIVE}{agent}").as_bytes(), &[])?;
        self.discord.flush()?;
        Ok(())
    }

    /// Whether the agent's thread is to be archived now that it has finished; the mark is taken
    /// away, so a follow-up task's next finish leaves the thread open.
    pub fn take_archive_mark(&self, agent: &str) -> Result<bool, StoreError> {
        Ok(self
            .discord
            .remove(format!("{ARCHIVE}{agent}").as_bytes())?
            .is_some())
    }

    /// The models a server's admins let its members choose, when they have set a list.
    pub fn guild_models(&self, guild_id: u64) -> Result<Option<Vec<String>>, StoreError> {
        self.discord_record(&format!("models/{guild_id}"))
    }

    /// Saves a server's list of models, on disk before the admin is told.
    pub fn set_guild_models(&self, guild_id: u64, models: &[String]) -> Result<(), StoreError> {
        let key = format!("models/{guild_id}");
        self.discord.insert(key.as_bytes(), encode(&models)?)?;
        self.discord.flush()?;
        Ok(())
    }

    /// The roles a server's admins let write its shared memories (admins always may).
    pub fn memory_writers(&self, guild_id: u64) -> Result<Vec<u64>, StoreError> {
        Ok(self
            .discord_record(&format!("memory-writers/{guild_id}"))?
            .unwrap_or_default())
    }

    /// Saves the roles that may write a server's shared memories, on disk before the admin is told.
    pub fn set_memory_writers(&self, guild_id: u64, roles: &[u64]) -> Result<(), StoreError> {
        let key = format!("memory-writers/{guild_id}");
        self.discord.insert(key.as_bytes(), encode(&roles)?)?;
        self.discord.flush()?;
        Ok(())
    }

    /// What a server's admins chose for its command policy (nothing chosen: the operator's
    /// config alone).
    pub fn server_policy(&self, guild: &GuildId) -> Result<AdminChoices, StoreError> {
        Ok(self
            .discord_record(&server_policy_key(guild))?
            .unwrap_or_default())
    }

    /// Sets (`Some`) or takes back (`None`) a server admin's choice for one class, in place, and
    /// returns the server's choices as they now are. The caller flushes before telling anyone.
    pub fn change_server_policy(
        &self,
        guild: &GuildId,
        risk: Risk,
        choice: Option<AdminChoice>,
    ) -> Result<AdminChoices, StoreError> {
        let key = server_policy_key(guild);
        let mut failure = None;
        let mut changed = AdminChoices::default();
        self.discord.update_and_fetch(key.as_bytes(), |raw| {
            // sled calls this again when another write got in first: only the last call counts.
            failure = None;
            let mut choices: AdminChoices = match raw.map(|raw| decode(key.as_bytes(), raw)) {
                Some(Ok(choices)) => choices,
                None => AdminChoices::default(),
                Some(Err(e)) => {
                    // An unreadable record is left as it is, and the change refused.
                    failure = Some(e);
                    return raw.map(<[u8]>::to_vec);
                }
            };
            choices.set(risk, choice.clone());
            changed = choices.clone();
            if choices.is_empty() {
                return None;
            }
            match encode(&choices) {
                Ok(record) => Some(record),
                Err(e) => {
                    failure = Some(e);
                    raw.map(<[u8]>::to_vec)
                }
            }
        })?;
        failure.map_or(Ok(changed), Err)
    }

    pub fn bindings(&self) -> Result<Vec<ThreadBinding>, StoreError> {
        let mut list = Vec::new();
        for item in self.discord.scan_prefix(b"agent/") {
            let (key, raw) = item?;
            list.push(decode(&key, &raw)?);
        }
        Ok(list)
    }

    /// The (owner, agent) of every agent indexed as live in a server: a prefix scan, so starting
    /// an agent costs the same with ten agents in the store or a million. An agent that finished
    /// since stays listed until `forget_live`; the caller checks each one.
    pub fn live_agents(&self, guild_id: u64) -> Result<Vec<(u64, String)>, StoreError> {
        let prefix = format!("{LIVE}{guild_id}/");
        let mut live = Vec::new();
        for item in self.discord.scan_prefix(prefix.as_bytes()) {
            let (key, _) = item?;
            let rest = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            let parsed = rest
                .split_once('/')
                .and_then(|(owner, agent)| Some((owner.parse().ok()?, agent.to_string())));
            match parsed {
                Some(entry) => live.push(entry),
                None => return Err(StoreError::Corrupt(format!("a live-index key {rest:?}"))),
            }
        }
        Ok(live)
    }

    /// Drops an agent that is no longer running from its server's live index.
    pub fn forget_live(&self, guild_id: u64, owner_id: u64, agent: &str) -> Result<(), StoreError> {
        self.discord
            .remove(live_key(guild_id, owner_id, agent).as_bytes())?;
        Ok(())
    }

    /// Builds the live index of a store written before it existed, once: every bound agent is
    /// indexed, and `/agent start` drops the finished ones as it meets them.
    pub(super) fn index_live_agents_once(&self) -> Result<(), StoreError> {
        if self.discord.contains_key(LIVE_INDEXED)? {
            return Ok(());
        }
        for binding in self.bindings()? {
            let key = live_key(binding.guild_id, binding.owner_id, &binding.agent_id);
            self.discord.insert(key.as_bytes(), &[])?;
        }
        self.discord.insert(LIVE_INDEXED, &[])?;
        Ok(())
    }
}

/// The live index's keys: `live/<guild>/<owner>/<agent>`, with no value.
const LIVE: &str = "live/";
/// `archive/<agent>`, with no value: archive the agent's thread when it has finished.
const ARCHIVE: &str = "archive/";
/// `status/<agent>`: the message (big-endian id) that shows the agent's live status.
const STATUS: &str = "status/";
/// Present once the live index covers every binding.
const LIVE_INDEXED: &[u8] = b"meta/live-indexed";

/// The key of a server's admins' command policy.
fn server_policy_key(guild: &GuildId) -> String {
    format!("policy/{}", guild.as_str())
}

fn live_key(guild_id: u64, owner_id: u64, agent: &str) -> String {
    format!("{LIVE}{guild_id}/{owner_id}/{agent}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::kv::Backend;
    use crate::store::test_backends::{on_both_backends, TestStore};

    fn binding(agent: &str, guild_id: u64, owner_id: u64) -> ThreadBinding {
        ThreadBinding {
            agent_id: agent.into(),
            guild_id,
            parent_channel_id: 1,
            thread_id: guild_id * 100 + owner_id,
            owner_id,
            shared_users: Vec::new(),
            shared_roles: Vec::new(),
            card: None,
        }
    }

    fn the_live_index_lists_one_servers_agents_and_forgets_on_request(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        store.save_binding(&binding("a1", 7, 1)).unwrap();
        store.save_binding(&binding("a2", 7, 2)).unwrap();
        store.save_binding(&binding("b1", 70, 1)).unwrap();
        // Saving again (each card does) indexes once.
        store.save_binding(&binding("a1", 7, 1)).unwrap();
        assert_eq!(
            store.live_agents(7).unwrap(),
            vec![(1, "a1".to_string()), (2, "a2".to_string())]
        );
        assert_eq!(store.live_agents(70).unwrap(), vec![(1, "b1".to_string())]);
        store.forget_live(7, 1, "a1").unwrap();
        assert_eq!(store.live_agents(7).unwrap(), vec![(2, "a2".to_string())]);
        assert_eq!(store.binding("a1").unwrap().unwrap().agent_id, "a1");
        // A new card on an agent still indexed is saved; one no longer indexed is indexed again.
        let mut with_card = binding("a2", 7, 2);
        with_card.card = Some(CardRef {
            cycle: 4,
            message_id: 44,
        });
        store.save_binding(&with_card).unwrap();
        assert_eq!(store.binding("a2").unwrap().unwrap().card, with_card.card);
        let mut back = binding("a1", 7, 1);
        back.card = with_card.card;
        store.save_binding(&back).unwrap();
        assert_eq!(store.binding("a1").unwrap().unwrap(), back);
        assert_eq!(
            store.live_agents(7).unwrap(),
            vec![(1, "a1".to_string()), (2, "a2".to_string())]
        );
    }

    fn a_store_written_before_the_live_index_is_indexed_once_at_open(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        {
            let store = test.open();
            store.save_binding(&binding("old", 7, 3)).unwrap();
            // As an older build left it: the binding without its index entry or the marker.
            store.forget_live(7, 3, "old").unwrap();
            store.discord.remove(LIVE_INDEXED).unwrap();
            store.flush_blocking().unwrap();
        }
        let store = test.open();
        assert_eq!(store.live_agents(7).unwrap(), vec![(3, "old".to_string())]);
        // Once indexed, a forgotten agent stays forgotten across opens.
        store.forget_live(7, 3, "old").unwrap();
        store.flush_blocking().unwrap();
        drop(store);
        let store = test.open();
        assert!(store.live_agents(7).unwrap().is_empty());
    }

    on_both_backends!(
        the_live_index_lists_one_servers_agents_and_forgets_on_request,
        a_store_written_before_the_live_index_is_indexed_once_at_open,
    );
}
