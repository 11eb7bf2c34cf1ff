//! The audit trail's tree: entries per agent in the order they were written, appended with the
//! step that made them (`Commit::audit`) or on their own (`append_audit`, for changes made outside
//! an agent's loop such as pinning a memory), read newest first a page at a time, never removed.

use super::{agent_prefix, decode, encode, Store, StoreError};
use crate::core::audit::AuditEntry;

/// One page of an agent's trail, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// How many entries the agent's trail holds in all.
    pub total: usize,
}

/// An entry's key: the agent, then an id from sled's generator, which only grows (across restarts
/// too), so a scan returns the trail in the order it was written.
pub(super) fn audit_key(agent: &str, id: u64) -> Vec<u8> {
    let mut key = agent_prefix(agent);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

impl Store {
    /// Keys for `count` new entries of `agent`'s trail, taken before a transaction writes them.
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
        let key = audit_key(agent, self.db.generate_id()?);
        self.audit.insert(key, encode(entry)?)?;
        Ok(())
    }

    /// Page `page` (0 is the newest) of `agent`'s trail, `per_page` entries to a page.
    pub fn audit_page(
        &self,
        agent: &str,
        page: usize,
        per_page: usize,
    ) -> Result<AuditPage, StoreError> {
        let prefix = agent_prefix(agent);
        let total = self.audit.scan_prefix(&prefix).keys().count();
        let entries = self
            .audit
            .scan_prefix(&prefix)
            .rev()
            .skip(page.saturating_mul(per_page))
            .take(per_page)
            .map(|item| {
                let (key, raw) = item?;
                decode(&key, &raw)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AuditPage { entries, total })
    }

    /// `agent`'s whole trail, oldest first, for the export.
    pub fn audit_trail(&self, agent: &str) -> Result<Vec<AuditEntry>, StoreError> {
        self.audit
            .scan_prefix(agent_prefix(agent))
            .map(|item| {
                let (key, raw) = item?;
                decode(&key, &raw)
            })
            .collect()
    }
}
