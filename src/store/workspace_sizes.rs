//! Each agent's workspace size, kept in memory so that checking a write against the per-agent cap
//! reads no files: added up once from the workspace tree, then updated as workspace writes land
//! (`ahead::apply_write`).
//!
//! The adding-up does not hold the lock that workspace writes take; it is kept only if no write
//! landed meanwhile (`WorkspaceSizes::writes` counts them). At most `WORKSPACE_SIZES_AT_MOST`
//! agents are remembered.

use std::collections::HashMap;
use std::sync::MutexGuard;

use super::{agent_prefix, file_key, Store, StoreError};
use crate::locks::LockRecovered;

/// The remembered workspace sizes, and how many workspace writes have landed (so an adding-up
/// made without the lock knows whether a write came in between).
#[derive(Default)]
pub(crate) struct WorkspaceSizes {
    pub(crate) sizes: HashMap<String, u64>,
    pub(crate) writes: u64,
}

impl WorkspaceSizes {
    fn remember(&mut self, agent: &str, total: u64) {
        if self.sizes.len() >= WORKSPACE_SIZES_AT_MOST {
            self.sizes.clear();
        }
        self.sizes.insert(agent.to_string(), total);
    }
}

/// At this many agents the remembered workspace sizes start again (each is added up anew when it
/// is next asked for), which bounds them.
const WORKSPACE_SIZES_AT_MOST: usize = 65_536;

impl Store {
    /// The size of one file of an agent, if it exists.
    pub fn file_size(&self, agent: &str, path: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .workspace
            .get(file_key(agent, path))?
            .map(|v| self.file_len(&v)))
    }

    /// The bytes all files of an agent hold together. The files are added up without the lock
    /// every workspace write takes, and kept only if no workspace write landed meanwhile (else
    /// added up again, at worst under the lock), so a large workspace never holds up other
    /// agents' writes and a write made during the count is never missed.
    pub fn workspace_bytes(&self, agent: &str) -> Result<u64, StoreError> {
        let add_up = || -> Result<u64, StoreError> {
            let mut total = 0u64;
            for value in self.workspace.scan_prefix(agent_prefix(agent)).values() {
                total += self.file_len(&value?);
            }
            Ok(total)
        };
        for _ in 0..3 {
            let writes_before = {
                let sizes = self.workspace_sizes();
                if let Some(&total) = sizes.sizes.get(agent) {
                    return Ok(total);
                }
                sizes.writes
            };
            let total = add_up()?;
            let mut sizes = self.workspace_sizes();
            if sizes.writes == writes_before {
                sizes.remember(agent, total);
                return Ok(total);
            }
        }
        let mut sizes = self.workspace_sizes();
        let total = add_up()?;
        sizes.remember(agent, total);
        Ok(total)
    }

    /// Held while a workspace write lands, so a size being added up never misses or counts twice
    /// a write made meanwhile.
    pub(super) fn workspace_sizes(&self) -> MutexGuard<'_, WorkspaceSizes> {
        self.workspace_sizes.lock_recovered()
    }
}
