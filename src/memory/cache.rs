//! The cache of agents' vector indexes: each cached index (`Cached`: the index, its forgotten
//! memories, when it was last used), and the loads under way with what changed during them
//! (`ChangedWhileLoading`, registered by a `LoadingGuard` before the load reads the store, handed
//! over when the index is cached, dropped if the load fails), so a memory added or forgotten during
//! a load is not lost.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use super::index::VectorIndex;
use crate::locks::LockRecovered;

/// An index shared by searches (read) and new memories (write; hnsw_rs inserts in place).
pub(super) type SharedIndex = Arc<RwLock<VectorIndex>>;

pub(super) struct Cached {
    pub(super) index: SharedIndex,
    pub(super) forgotten: HashSet<u64>,
    pub(super) last_used: u64,
}

#[derive(Default)]
pub(super) struct Cache {
    pub(super) agents: HashMap<String, Cached>,
    /// Agents whose index is being read from the store, with what was stored and forgotten
    /// meanwhile: the read may have passed those keys already, so the index is brought up to date
    /// with them when it is cached.
    pub(super) loading: HashMap<String, ChangedWhileLoading>,
    pub(super) clock: u64,
}

#[derive(Default)]
pub(super) struct ChangedWhileLoading {
    /// How many loads of this agent's index are under way.
    pub(super) loads: usize,
    pub(super) stored: Vec<(u64, Vec<f32>)>,
    pub(super) forgotten: Vec<u64>,
}

/// A load of one agent's index under way, registered in the cache's `loading` while it lasts
/// (also when the load fails or its caller gives up).
pub(super) struct LoadingGuard<'m> {
    cache: &'m Mutex<Cache>,
    agent: String,
    finished: bool,
}

impl<'m> LoadingGuard<'m> {
    pub(super) fn start(cache: &'m Mutex<Cache>, agent: &str) -> Self {
        let mut locked = cache.lock_recovered();
        locked.loading.entry(agent.to_string()).or_default().loads += 1;
        LoadingGuard {
            cache,
            agent: agent.to_string(),
            finished: false,
        }
    }

    /// Ends the load (with the cache locked by the caller) and hands over what changed during
    /// it; another load still under way finds this one's index cached and needs none of it.
    pub(super) fn finish(mut self, cache: &mut Cache) -> ChangedWhileLoading {
        self.finished = true;
        let Some(changed) = cache.loading.get_mut(&self.agent) else {
            return ChangedWhileLoading::default();
        };
        changed.loads = changed.loads.saturating_sub(1);
        let taken = ChangedWhileLoading {
            loads: 0,
            stored: std::mem::take(&mut changed.stored),
            forgotten: std::mem::take(&mut changed.forgotten),
        };
        if changed.loads == 0 {
            cache.loading.remove(&self.agent);
        }
        taken
    }
}

impl Drop for LoadingGuard<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut cache = self.cache.lock_recovered();
        if let Some(changed) = cache.loading.get_mut(&self.agent) {
            changed.loads = changed.loads.saturating_sub(1);
            if changed.loads == 0 {
                cache.loading.remove(&self.agent);
            }
        }
    }
}
