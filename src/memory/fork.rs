//! Memories across forks and rewinds: a fork's copy of the memories of the cycles it starts from
//! (`copy_to_fork`, with their vectors and pins, so nothing is embedded again), and the forgetting
//! of what undone cycles remembered (`forget_after`, queued memories included).

use super::{decode, encode, key, prefix, Memory, MemoryError, MemoryRecord};
use crate::core::state::GuildId;
use crate::store::StoreError;

impl Memory {
    /// Copies `source`'s memories from cycles up to `cycle` to the new agent `fork` (forgotten
    /// ones left out, pins kept), with their vectors: nothing is embedded again. Memories still
    /// waiting for the embeddings endpoint stay with the source. Returns how many were copied.
    pub fn copy_to_fork(
        &self,
        source: &str,
        cycle: u64,
        fork: &str,
        guild: Option<GuildId>,
    ) -> Result<usize, MemoryError> {
        let mut copied = 0;
        for item in self.records.scan_prefix(prefix(source)) {
            let (k, raw) = item.map_err(StoreError::from)?;
            let record: MemoryRecord = decode(&k, &raw)?;
            if record.forgotten || record.cycle > cycle {
                continue;
            }
            let Some(vector) = self.vectors.get(&k).map_err(StoreError::from)? else {
                continue;
            };
            let copy = MemoryRecord {
                id: self.db.generate_id().map_err(StoreError::from)?,
                agent: fork.to_string(),
                guild: guild.clone(),
                ..record
            };
            let new_key = key(fork, copy.id);
            self.records.insert(&new_key, encode(&copy)?)?;
            self.vectors.insert(&new_key, vector)?;
            if copy.pinned {
                self.pins.insert(&new_key, &[])?;
            }
            if copy.added_by.is_some() {
                self.notes.insert(&new_key, &[])?;
            }
            copied += 1;
        }
        self.db.flush().map_err(StoreError::from)?;
        Ok(copied)
    }

    /// Forgets every memory `agent` made after `cycle` (its steps since were rewound); returns
    /// how many.
    pub fn forget_after(&self, agent: &str, cycle: u64) -> Result<usize, MemoryError> {
        let mut later = Vec::new();
        for item in self.records.scan_prefix(prefix(agent)) {
            let (k, raw) = item.map_err(StoreError::from)?;
            let record: MemoryRecord = decode(&k, &raw)?;
            if !record.forgotten && record.cycle > cycle {
                later.push(record.id);
            }
        }
        for id in &later {
            self.forget(agent, *id)?;
        }
        // Memories of those cycles still waiting for the embeddings endpoint go too.
        for item in self.pending.scan_prefix(prefix(agent)) {
            let (k, raw) = item.map_err(StoreError::from)?;
            let record: MemoryRecord = decode(&k, &raw)?;
            if record.cycle > cycle {
                self.pending.remove(&k).map_err(StoreError::from)?;
            }
        }
        self.db.flush().map_err(StoreError::from)?;
        Ok(later.len())
    }
}
