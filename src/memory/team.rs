//! Team memory: notes people add for one agent, for a thread or for a whole server, kept beside the
//! agents' own memories with who added them and when; the places an agent recalls from (its own,
//! its thread's, its server's, never another server's); and the paged list of a place.
//!
//! A `MemoryPlace` is the key memories are kept under: an agent's id, `thread-<id>` or
//! `server-<id>`; `recalled_by` gives an agent its own, its thread's and its server's. `add_note`
//! embeds a person's note at once, bounded in length (`NOTE_MAX_CHARS`) and in live notes per place
//! (`MAX_NOTES`, counted in the `memory_notes` tree); `list` gives a place's page, newest first. A
//! `MemoryRecord` carries its scope and its `Stamp`s (added, pinned, unpinned, forgotten by whom
//! and when); a recalled `MemoryHit` carries its `MemoryOrigin`, which names it in the prompt.

use crate::core::person::Person;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{decode, key, prefix, Memory, MemoryError, MemoryRecord, Payer};
use crate::core::memory::{MemoryScope, MemorySource};
use crate::core::state::GuildId;
use crate::llm::embed::EmbedPurpose;
use crate::store::StoreError;

/// The most memories pinned in one place: every pinned memory is recalled in every cycle.
pub const MAX_PINS: usize = 25;

/// The most live notes people may keep in one place (an agent's own memories are bounded by its
/// budget; a server's notes only by this); forgetting one makes room.
pub const MAX_NOTES: usize = 10_000;

/// The longest note, in characters.
pub const NOTE_MAX_CHARS: usize = 1_000;

/// Who did something to a memory, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub by: crate::core::person::Person,
    pub at: DateTime<Utc>,
}

/// Where memories are kept: under an agent's id, or a thread's or server's key, which cannot be
/// mistaken for an agent's id (those are hexadecimal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlace {
    pub key: String,
    pub scope: MemoryScope,
}

const THREAD_PREFIX: &str = "thread-";
const SERVER_PREFIX: &str = "server-";

impl MemoryPlace {
    pub fn agent(agent: &str) -> MemoryPlace {
        MemoryPlace {
            key: agent.to_string(),
            scope: MemoryScope::Agent,
        }
    }

    pub fn thread(thread: u64) -> MemoryPlace {
        MemoryPlace {
            key: format!("{THREAD_PREFIX}{thread}"),
            scope: MemoryScope::Thread,
        }
    }

    pub fn server(guild: &GuildId) -> MemoryPlace {
        MemoryPlace {
            key: format!("{SERVER_PREFIX}{guild}"),
            scope: MemoryScope::Server,
        }
    }

    /// The place a stored key names (a button carries the key).
    pub fn from_key(key: &str) -> MemoryPlace {
        let scope = if key.starts_with(THREAD_PREFIX) {
            MemoryScope::Thread
        } else if key.starts_with(SERVER_PREFIX) {
            MemoryScope::Server
        } else {
            MemoryScope::Agent
        };
        MemoryPlace {
            key: key.to_string(),
            scope,
        }
    }

    /// The thread a thread's place belongs to.
    pub fn thread_id(&self) -> Option<u64> {
        self.key.strip_prefix(THREAD_PREFIX)?.parse().ok()
    }

    /// The server a server's place belongs to.
    pub fn server_id(&self) -> Option<&str> {
        self.key.strip_prefix(SERVER_PREFIX)
    }

    /// Where an agent recalls from: its own memories, its thread's (when it has one) and its
    /// server's (when it runs in one). Nothing of another server is ever among them.
    pub fn recalled_by(agent: &str, thread: Option<u64>, guild: Option<&GuildId>) -> Vec<Self> {
        let mut places = vec![MemoryPlace::agent(agent)];
        places.extend(thread.map(MemoryPlace::thread));
        places.extend(guild.map(MemoryPlace::server));
        places
    }
}

/// A page of a place's memories, newest first.
pub struct MemoryPage {
    pub memories: Vec<MemoryRecord>,
    /// Whether older memories follow.
    pub more: bool,
}

impl Memory {
    /// Adds a person's note at `place`, embedded now and paid by `payer`. An embedding that fails
    /// stores nothing and says why, so the person can try again; `cycle` is the agent's cycle for
    /// a note to one agent (a rewind to before it forgets it), else 0. The caller flushes the
    /// store before telling the person.
    pub async fn add_note(
        &self,
        payer: &Payer,
        place: &MemoryPlace,
        cycle: u64,
        text: &str,
        by: &Person,
    ) -> Result<MemoryRecord, MemoryError> {
        if self.live_notes(place) >= MAX_NOTES {
            return Err(MemoryError::TooManyNotes(MAX_NOTES));
        }
        let text = crate::core::text::truncate_chars(text.trim(), NOTE_MAX_CHARS);
        let vector = self.embed_one(payer, &text, EmbedPurpose::Passage).await?;
        let now = self.clock.now();
        let record = MemoryRecord {
            id: self.db.generate_id()?,
            agent: place.key.clone(),
            guild: payer.spender.guild.clone(),
            cycle,
            source: MemorySource::Human,
            text,
            created_at: now,
            pinned: false,
            forgotten: false,
            scope: place.scope,
            added_by: Some(Stamp {
                by: by.clone(),
                at: now,
            }),
            pinned_by: None,
            unpinned_by: None,
            forgotten_by: None,
        };
        self.store(&record, &vector)?;
        self.notes.insert(key(&place.key, record.id), &[])?;
        Ok(record)
    }

    /// How many notes people added at `place` are not forgotten.
    pub fn live_notes(&self, place: &MemoryPlace) -> usize {
        self.notes.scan_prefix(prefix(&place.key)).count()
    }

    /// Page `page` (0 is the newest) of the memories kept at `place`, `per_page` at a time;
    /// forgotten ones are left out.
    pub fn list(
        &self,
        place: &MemoryPlace,
        page: usize,
        per_page: usize,
    ) -> Result<MemoryPage, StoreError> {
        let skip = page.saturating_mul(per_page);
        let mut memories = Vec::with_capacity(per_page);
        let mut more = false;
        // Keys end in increasing ids, so the reversed scan meets the newest first.
        let live = self
            .records
            .scan_prefix(prefix(&place.key))
            .rev()
            .map(|item| -> Result<MemoryRecord, StoreError> {
                let (k, raw) = item?;
                decode(&k, &raw)
            })
            .filter(|record| !matches!(record, Ok(r) if r.forgotten));
        for (at, record) in live.enumerate().skip(skip) {
            if at >= skip.saturating_add(per_page) {
                more = true;
                break;
            }
            memories.push(record?);
        }
        Ok(MemoryPage { memories, more })
    }

    /// A memory kept at `place`, forgotten or not.
    pub fn record_at(
        &self,
        place: &MemoryPlace,
        id: u64,
    ) -> Result<Option<MemoryRecord>, StoreError> {
        let k = key(&place.key, id);
        match self.records.get(&k)? {
            Some(raw) => decode(&k, &raw).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_and_recalled_hits_stored_before_scopes_are_the_agents_own() {
        let raw = br#"{"v":1,"data":{"id":7,"agent":"abc","guild":"1","cycle":3,"source":"cycle","text":"t","created_at":"2026-01-01T00:00:00Z","pinned":true,"forgotten":false}}"#;
        let record: MemoryRecord = decode(b"abc/7", raw).unwrap();
        assert_eq!(record.scope, MemoryScope::Agent);
        assert!(record.added_by.is_none() && record.pinned_by.is_none());
        let hit: crate::core::memory::MemoryHit = serde_json::from_str(
            r#"{"id":7,"cycle":3,"source":"cycle","score":0.5,"pinned":true}"#,
        )
        .unwrap();
        assert_eq!(hit.kept_under("abc"), "abc");
    }

    #[test]
    fn a_place_is_read_back_from_its_key() {
        let guild = GuildId::from(42u64);
        for place in [
            MemoryPlace::agent("0a1b2c3d4e5f"),
            MemoryPlace::thread(900),
            MemoryPlace::server(&guild),
        ] {
            assert_eq!(MemoryPlace::from_key(&place.key), place);
        }
        assert_eq!(MemoryPlace::thread(900).thread_id(), Some(900));
        assert_eq!(MemoryPlace::server(&guild).server_id(), Some("42"));
        assert_eq!(MemoryPlace::agent("0a1b").server_id(), None);
    }

    #[test]
    fn an_agent_recalls_its_own_its_threads_and_its_servers_memories_only() {
        let guild = GuildId::from(7u64);
        let keys: Vec<String> = MemoryPlace::recalled_by("abc", Some(5), Some(&guild))
            .into_iter()
            .map(|p| p.key)
            .collect();
        assert_eq!(keys, ["abc", "thread-5", "server-7"]);
        // The console's agents have neither.
        assert_eq!(MemoryPlace::recalled_by("abc", None, None).len(), 1);
    }
}
