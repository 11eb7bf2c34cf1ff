//! The audit trail's trees: entries per agent in the order they were written, appended with the
//! step that made them (`Commit::audit`) or on their own (`append_audit`, for changes made outside
//! an agent's loop such as pinning a memory), read newest first a page at a time, removed only
//! with their agent.
//!
//! Why chunks: sled keeps a few dozen bytes of memory for every key a store holds (its page table
//! and the log positions of each B-tree page), so an entry kept under a key of its own for every
//! cycle grew the bot's memory with its cycles. Once an agent has `CHUNK_LEAST` entries of its
//! own, they are folded into one record of the `audit_chunks` tree, which also compresses them
//! together; new entries start under keys of their own again.

use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::ahead::{TreeId, Writes};
use super::{agent_prefix, decode, encode, Store, StoreError};
use crate::core::audit::AuditEntry;

/// One page of an agent's trail, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// How many entries the agent's trail holds in all.
    pub total: usize,
}

/// Entries under keys of their own that an agent gathers before they are folded into a chunk.
pub(super) const CHUNK_LEAST: usize = 64;

/// The most entries one chunk takes, so that a chunk stays a small record however many entries
/// an agent gathered between two folds.
const CHUNK_MOST: usize = 256;

/// Commits check whether their agent's entries are due to be folded every this many cycles.
pub(super) const FOLD_CHECK_EVERY: u64 = 16;

/// How many locks the agents' trails are spread over (see `Store::audit_lock`).
pub(super) const AUDIT_LOCKS: usize = 16;

/// Several entries of one agent's trail, oldest first.
#[derive(Debug, Serialize, Deserialize)]
struct AuditChunk {
    entries: Vec<AuditEntry>,
}

/// An entry's key: the agent, then an id from sled's generator, which only grows (across restarts
/// too), so a scan returns the trail in the order it was written.
pub(super) fn audit_key(agent: &str, id: u64) -> Vec<u8> {
    let mut key = agent_prefix(agent);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

/// A chunk's key: its newest entry's key, then how many entries it holds, so that a page is
/// found without reading the chunks before it.
fn chunk_key(newest_entry_key: &[u8], count: usize) -> Vec<u8> {
    let mut key = newest_entry_key.to_vec();
    key.extend_from_slice(&(count as u32).to_be_bytes());
    key
}

fn chunk_count(key: &[u8]) -> Result<usize, StoreError> {
    key.last_chunk::<4>()
        .map(|count| u32::from_be_bytes(*count) as usize)
        .ok_or_else(|| StoreError::Corrupt("an audit chunk has a malformed key".into()))
}

/// The locks that keep an agent's new entries in the order of their ids: a key is taken and its
/// entry written under the lock of its agent, and a fold reads and replaces that agent's entries
/// under it. Without them an entry whose id was taken before a fold but written after it would
/// come after the chunk's newer entries.
pub(super) fn audit_locks() -> std::sync::Arc<[Mutex<()>]> {
    (0..AUDIT_LOCKS).map(|_| Mutex::new(())).collect()
}

impl Store {
    /// The lock of `agent`'s trail (see `audit_locks`).
    pub(super) fn audit_lock(&self, agent: &str) -> MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        agent.hash(&mut hasher);
        let lock = &self.audit_locks[hasher.finish() as usize % self.audit_locks.len()];
        // The lock guards no data of its own, so one a panic left poisoned is still good.
        lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keys for `count` new entries of `agent`'s trail; the caller holds `audit_lock` until they
    /// are written.
    pub(super) fn new_audit_keys(
        &self,
        agent: &str,
        count: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        (0..count)
            .map(|_| Ok(audit_key(agent, self.db.generate_id()?)))
            .collect()
    }

    /// Appends one entry to `agent`'s trail on its own (the caller flushes when it must be durable
    /// before it answers).
    pub fn append_audit(&self, agent: &str, entry: &AuditEntry) -> Result<(), StoreError> {
        let _held = self.audit_lock(agent);
        let key = audit_key(agent, self.db.generate_id()?);
        self.audit.insert(key, encode(entry)?)?;
        Ok(())
    }

    /// Folds `agent`'s entries kept under keys of their own into a chunk, once there are at least
    /// `CHUNK_LEAST` of them (the oldest `CHUNK_MOST` at most); the chunk and the removal of the
    /// keys land together. Returns how many entries were folded.
    pub(super) fn fold_audit(&self, agent: &str) -> Result<usize, StoreError> {
        let _held = self.audit_lock(agent);
        let singles = self
            .audit
            .scan_prefix(agent_prefix(agent))
            .take(CHUNK_MOST)
            .collect::<Result<Vec<_>, _>>()?;
        let Some((newest, _)) = singles.last().filter(|_| singles.len() >= CHUNK_LEAST) else {
            return Ok(0);
        };
        let chunk = AuditChunk {
            entries: singles
                .iter()
                .map(|(key, raw)| decode(key, raw))
                .collect::<Result<_, _>>()?,
        };
        let mut writes = Writes::default();
        writes.put(
            TreeId::AuditChunks,
            chunk_key(newest, singles.len()),
            encode(&chunk)?,
        );
        for (key, _) in &singles {
            writes.remove(TreeId::Audit, key.to_vec());
        }
        self.write_together(&writes)?;
        Ok(singles.len())
    }

    /// `fold_audit` after a commit, which has landed whatever the fold does: a failure is logged
    /// and the entries stay where they are, to be folded at a later check.
    pub(super) fn fold_audit_after_commit(&self, agent: &str) {
        if let Err(error) = self.fold_audit(agent) {
            tracing::warn!(agent, %error, "could not fold the audit trail's entries into a chunk");
        }
    }

    /// Page `page` (0 is the newest) of `agent`'s trail, `per_page` entries to a page. Only the
    /// chunks the page draws on are read.
    pub fn audit_page(
        &self,
        agent: &str,
        page: usize,
        per_page: usize,
    ) -> Result<AuditPage, StoreError> {
        let prefix = agent_prefix(agent);
        let singles = self.audit.scan_prefix(&prefix).keys().count();
        let chunk_keys = self
            .audit_chunks
            .scan_prefix(&prefix)
            .keys()
            .collect::<Result<Vec<_>, _>>()?;
        let mut total = singles;
        for key in &chunk_keys {
            total += chunk_count(key)?;
        }
        let mut skip = page.saturating_mul(per_page);
        let mut entries = self
            .audit
            .scan_prefix(&prefix)
            .rev()
            .skip(skip)
            .take(per_page)
            .map(|item| {
                let (key, raw) = item?;
                decode(&key, &raw)
            })
            .collect::<Result<Vec<_>, _>>()?;
        skip = skip.saturating_sub(singles);
        for key in chunk_keys.iter().rev() {
            if entries.len() >= per_page {
                break;
            }
            let count = chunk_count(key)?;
            if skip >= count {
                skip -= count;
                continue;
            }
            let chunk = self.read_chunk(key)?;
            let wanted = per_page - entries.len();
            entries.extend(chunk.entries.into_iter().rev().skip(skip).take(wanted));
            skip = 0;
        }
        Ok(AuditPage { entries, total })
    }

    /// `agent`'s whole trail, oldest first, for the export.
    pub fn audit_trail(&self, agent: &str) -> Result<Vec<AuditEntry>, StoreError> {
        let prefix = agent_prefix(agent);
        let mut trail = Vec::new();
        for key in self.audit_chunks.scan_prefix(&prefix).keys() {
            trail.extend(self.read_chunk(&key?)?.entries);
        }
        for item in self.audit.scan_prefix(&prefix) {
            let (key, raw) = item?;
            trail.push(decode(&key, &raw)?);
        }
        Ok(trail)
    }

    fn read_chunk(&self, key: &[u8]) -> Result<AuditChunk, StoreError> {
        let raw = self.audit_chunks.get(key)?.ok_or_else(|| {
            StoreError::Corrupt("an audit chunk vanished while it was read".into())
        })?;
        decode(key, &raw)
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::core::audit::AuditEvent;
    use crate::core::state::AgentState;
    use crate::store::Commit;

    fn entry(n: u64) -> AuditEntry {
        AuditEntry {
            at: Utc::now(),
            by: format!("person {n}"),
            event: AuditEvent::MemoryPinned { memory: n },
        }
    }

    fn numbers(entries: &[AuditEntry]) -> Vec<u64> {
        entries
            .iter()
            .map(|e| match e.event {
                AuditEvent::MemoryPinned { memory } => memory,
                ref other => panic!("an entry this test did not write: {other:?}"),
            })
            .collect()
    }

    fn singles(store: &Store, agent: &str) -> usize {
        store.audit.scan_prefix(agent_prefix(agent)).count()
    }

    fn chunks(store: &Store, agent: &str) -> usize {
        store.audit_chunks.scan_prefix(agent_prefix(agent)).count()
    }

    fn append(store: &Store, agent: &str, numbers: std::ops::RangeInclusive<u64>) {
        for n in numbers {
            store.append_audit(agent, &entry(n)).unwrap();
        }
    }

    /// Entries `newest` down to `oldest`, as a page shows them.
    fn newest_first(newest: u64, oldest: u64) -> Vec<u64> {
        (oldest..=newest).rev().collect()
    }

    #[test]
    fn older_entries_are_folded_into_chunks_and_read_back_in_order_across_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        append(&store, "folded", 1..=63);
        // An agent whose id extends this one's keeps its own trail.
        append(&store, "folded2", 1000..=1069);
        assert_eq!(store.fold_audit("folded").unwrap(), 0, "below the least");
        append(&store, "folded", 64..=70);
        assert_eq!(store.fold_audit("folded").unwrap(), 70);
        assert_eq!(
            (singles(&store, "folded"), chunks(&store, "folded")),
            (0, 1)
        );
        append(&store, "folded", 71..=140);
        assert_eq!(store.fold_audit("folded").unwrap(), 70);
        append(&store, "folded", 141..=150);
        assert_eq!(
            (singles(&store, "folded"), chunks(&store, "folded")),
            (10, 2)
        );
        drop(store);

        let store = Store::open(dir.path()).unwrap();
        let page = |n: usize| store.audit_page("folded", n, 7).unwrap();
        assert_eq!(page(0).total, 150);
        assert_eq!(numbers(&page(0).entries), newest_first(150, 144));
        // From the entries of its own into the newer chunk.
        assert_eq!(numbers(&page(1).entries), newest_first(143, 137));
        // Across the two chunks.
        assert_eq!(numbers(&page(11).entries), newest_first(73, 67));
        assert_eq!(numbers(&page(21).entries), newest_first(3, 1));
        assert!(page(22).entries.is_empty());
        assert_eq!(
            numbers(&store.audit_trail("folded").unwrap()),
            (1..=150).collect::<Vec<_>>()
        );
        assert_eq!(
            numbers(&store.audit_trail("folded2").unwrap()),
            (1000..=1069).collect::<Vec<_>>()
        );

        store.delete_agent("folded").unwrap();
        assert_eq!(
            (singles(&store, "folded"), chunks(&store, "folded")),
            (0, 0)
        );
        assert_eq!(store.audit_page("folded", 0, 7).unwrap().total, 0);
        assert_eq!(store.audit_page("folded2", 0, 7).unwrap().total, 70);
    }

    #[test]
    fn a_chunk_takes_at_most_its_most_and_a_commit_folds_when_its_cycle_checks() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        append(&store, "busy", 1..=300);
        assert_eq!(store.fold_audit("busy").unwrap(), CHUNK_MOST);
        assert_eq!(singles(&store, "busy"), 300 - CHUNK_MOST);

        // A commit at a cycle that is no multiple of the check leaves its entries as they are.
        append(&store, "committed", 1..=(CHUNK_LEAST as u64 + 4));
        let mut state = AgentState::for_test("committed");
        state.cycle = FOLD_CHECK_EVERY + 1;
        let last = entry(CHUNK_LEAST as u64 + 5);
        let commit = |state: &AgentState| {
            store
                .commit(&Commit {
                    state: Some(state),
                    audit: vec![&last],
                    ..Default::default()
                })
                .unwrap()
        };
        commit(&state);
        assert_eq!(chunks(&store, "committed"), 0);
        state.cycle = FOLD_CHECK_EVERY * 2;
        commit(&state);
        assert_eq!(
            (singles(&store, "committed"), chunks(&store, "committed")),
            (0, 1)
        );
        let trail = numbers(&store.audit_trail("committed").unwrap());
        let mut expected: Vec<u64> = (1..=CHUNK_LEAST as u64 + 5).collect();
        expected.push(CHUNK_LEAST as u64 + 5);
        assert_eq!(trail, expected);
    }
}
