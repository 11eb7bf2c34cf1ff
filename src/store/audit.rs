//! The audit trail's trees: entries per agent in the order they were written, appended with the
//! step that made them (`Commit::audit`) or on their own (`append_audit`, for changes made outside
//! an agent's loop such as pinning a memory), read newest first a page at a time (`audit_page`,
//! with the total) or oldest first for the export (`audit_trail`), removed only with their agent. A
//! card shown again keeps the trail of the one before.
//!
//! An entry's key is its agent and an id from sled's generator, which only grows, across restarts
//! too. The lock of the agent's records (`audit_lock`, see `chunks`) is held from taking the id to
//! the write, so a fold never passes an entry whose id was taken before it. Once an agent has
//! `CHUNK_LEAST` entries under keys of their own, a commit at a cycle that is a multiple of
//! `FOLD_CHECK_EVERY` folds them (up to `CHUNK_MOST`) into one record of the `audit_chunks` tree
//! (`fold_audit`). A server's own trail (`append_server_audit`, for its admins' policy changes)
//! is kept the same way under a name no agent id can take.

use std::sync::MutexGuard;

use super::ahead::{TreeId, Writes};
use super::chunks::Folding;
use super::{agent_prefix, encode, Store, StoreError};
use crate::core::audit::AuditEntry;
use crate::core::state::GuildId;

/// One page of an agent's trail, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// How many entries the agent's trail holds in all.
    pub total: usize,
}

/// Entries under keys of their own that an agent gathers before they are folded into a chunk.
const CHUNK_LEAST: usize = 64;

/// The most entries one chunk takes, so that a chunk stays a small record however many entries
/// an agent gathered between two folds.
const CHUNK_MOST: usize = 256;

/// Every entry may be folded: a page or the export reads the trail whole or newest first.
const FOLDING: Folding = Folding {
    singles: TreeId::Audit,
    chunks: TreeId::AuditChunks,
    keep_newest: 0,
    least: CHUNK_LEAST,
    most: CHUNK_MOST,
};

/// The name a server's own trail is kept under, beside the agents' trails: no agent id has a
/// `-` in it, so it cannot meet one.
fn server_trail(guild: &GuildId) -> String {
    format!("server-{}", guild.as_str())
}

/// An entry's key: the agent, then an id from sled's generator, which only grows (across restarts
/// too), so a scan returns the trail in the order it was written.
pub(super) fn audit_key(agent: &str, id: u64) -> Vec<u8> {
    let mut key = agent_prefix(agent);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

impl Store {
    /// The lock of `agent`'s records, held from taking an entry's id to writing it: a fold takes
    /// it too, so an entry whose id was taken before a fold is never written after it, behind the
    /// chunk's newer entries.
    pub(super) fn audit_lock(&self, agent: &str) -> MutexGuard<'_, ()> {
        self.records_lock(&agent_prefix(agent))
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

    /// Adds `entries` to `writes` under new keys of `agent`'s trail, and returns the trail's lock
    /// (when there are any), which the caller holds until the writes have landed.
    pub(super) fn put_audit(
        &self,
        writes: &mut Writes,
        agent: &str,
        entries: &[&AuditEntry],
    ) -> Result<Option<MutexGuard<'_, ()>>, StoreError> {
        let held = (!entries.is_empty()).then(|| self.audit_lock(agent));
        for (key, entry) in self
            .new_audit_keys(agent, entries.len())?
            .into_iter()
            .zip(entries)
        {
            writes.put(TreeId::Audit, key, encode(*entry)?);
        }
        Ok(held)
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
    /// `CHUNK_LEAST` of them. Returns how many entries were folded.
    #[cfg(test)]
    pub(super) fn fold_audit(&self, agent: &str) -> Result<usize, StoreError> {
        self.fold_audit_fenced(agent, None)
    }

    /// `fold_audit`, landing only while the agent's lease carries `fence` (none: as `fold_audit`).
    pub(super) fn fold_audit_fenced(
        &self,
        agent: &str,
        fence: Option<super::Fence>,
    ) -> Result<usize, StoreError> {
        self.fold_records::<AuditEntry>(&FOLDING, agent, fence)
    }

    /// Page `page` (0 is the newest) of `agent`'s trail, `per_page` entries to a page.
    pub fn audit_page(
        &self,
        agent: &str,
        page: usize,
        per_page: usize,
    ) -> Result<AuditPage, StoreError> {
        let prefix = agent_prefix(agent);
        Ok(AuditPage {
            entries: self.newest_records(
                &FOLDING,
                &prefix,
                page.saturating_mul(per_page),
                per_page,
            )?,
            total: self.count_records(&FOLDING, &prefix)?,
        })
    }

    /// Appends one entry to a server's own trail, for changes to the server as a whole (its
    /// admins' command policy); the caller flushes.
    pub fn append_server_audit(
        &self,
        guild: &GuildId,
        entry: &AuditEntry,
    ) -> Result<(), StoreError> {
        self.append_audit(&server_trail(guild), entry)
    }

    /// A server's own trail, oldest first.
    pub fn server_audit_trail(&self, guild: &GuildId) -> Result<Vec<AuditEntry>, StoreError> {
        self.audit_trail(&server_trail(guild))
    }

    /// `agent`'s whole trail, oldest first, for the export.
    pub fn audit_trail(&self, agent: &str) -> Result<Vec<AuditEntry>, StoreError> {
        self.all_records(&FOLDING, &agent_prefix(agent))
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::core::audit::AuditEvent;
    use crate::core::state::AgentState;
    use crate::store::chunks::FOLD_CHECK_EVERY;
    use crate::store::kv::Backend;
    use crate::store::test_backends::{on_both_backends, TestStore};
    use crate::store::Commit;

    fn entry(n: u64) -> AuditEntry {
        AuditEntry {
            at: Utc::now(),
            by: format!("person {n}").as_str().into(),
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

    fn older_entries_are_folded_into_chunks_and_read_back_in_order_across_them(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
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

        let store = test.open();
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

    fn a_chunk_takes_at_most_its_most_and_a_commit_folds_when_its_cycle_checks(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        append(&store, "busy", 1..=300);
        assert_eq!(store.fold_audit("busy").unwrap(), CHUNK_MOST);
        assert_eq!(singles(&store, "busy"), 300 - CHUNK_MOST);

        // A commit at a cycle that is no multiple of the check leaves its entries as they are.
        append(&store, "committed", 1..=(CHUNK_LEAST as u64 + 4));
        let mut state = AgentState::for_test("committed");
        state.progress.cycle = FOLD_CHECK_EVERY + 1;
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
        state.progress.cycle = FOLD_CHECK_EVERY * 2;
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

    on_both_backends!(
        older_entries_are_folded_into_chunks_and_read_back_in_order_across_them,
        a_chunk_takes_at_most_its_most_and_a_commit_folds_when_its_cycle_checks,
    );
}
