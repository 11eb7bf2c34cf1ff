//! Where an agent's vector index comes from: its saved graph topped up from the store, or a
//! build from the store's memories; and saving a graph without failing the caller.

use std::collections::HashSet;

use super::index::{HnswParams, VectorIndex};
use super::saved::SavedIndexes;
use super::{from_bytes, prefix, MemoryRecord, SharedIndex};
use crate::store::{decode, StoreError};

/// Writes a graph's files, logging rather than failing: the store still holds every memory.
pub(super) fn save_graph(saved: &SavedIndexes, agent: &str, index: &SharedIndex) {
    let index = index.read().unwrap_or_else(|e| e.into_inner());
    match saved.save(agent, &index) {
        Ok(0) => {}
        Ok(points) => tracing::debug!(agent, points, "saved the vector index"),
        Err(why) => tracing::warn!(agent, "could not save the vector index: {why}"),
    }
}

type Changes = (Vec<(u64, Vec<f32>)>, HashSet<u64>);

/// Where an agent's index comes from: its saved graph, else its stored memories.
pub(super) struct IndexSource<'a> {
    pub(super) records: &'a sled::Tree,
    pub(super) vectors: &'a sled::Tree,
    pub(super) saved: Option<&'a SavedIndexes>,
}

pub(super) struct LoadedIndex {
    pub(super) index: VectorIndex,
    /// Memories in the graph that were forgotten since it was saved.
    pub(super) skip: HashSet<u64>,
    pub(super) saved_len: usize,
    /// Whether the graph came from its saved files rather than a build.
    pub(super) from_saved_graph: bool,
}

impl IndexSource<'_> {
    /// The saved graph topped up with the memories stored since it was saved; or, with no usable
    /// saved graph, an index built from the store (and saved, when it is a graph).
    pub(super) fn load_or_build(
        &self,
        agent: &str,
        params: HnswParams,
        exact_below: usize,
    ) -> Result<LoadedIndex, StoreError> {
        if let Some(saved) = self.saved {
            match saved.load_with(agent, params, exact_below, |ids| self.changes(agent, ids)) {
                Ok(Some((mut index, changes))) => {
                    let saved_len = index.len();
                    let (added, skip) = changes?;
                    for (id, vector) in added {
                        if vector.len() == index.dim() {
                            index.insert(id, &vector);
                        }
                    }
                    return Ok(LoadedIndex {
                        index,
                        skip,
                        saved_len,
                        from_saved_graph: true,
                    });
                }
                Ok(None) => {}
                Err(why) => tracing::warn!(
                    agent,
                    "the saved vector index can't be used ({why}); rebuilding it from the store"
                ),
            }
        }
        let index = self.build(agent, params, exact_below)?;
        let saved_len = match self.saved {
            Some(saved) if index.is_graph() => saved.save(agent, &index).unwrap_or_else(|why| {
                tracing::warn!(agent, "could not save the vector index: {why}");
                0
            }),
            _ => 0,
        };
        Ok(LoadedIndex {
            index,
            skip: HashSet::new(),
            saved_len,
            from_saved_graph: false,
        })
    }

    /// What changed in the store since a graph of `saved_ids` was saved: the memories stored
    /// since (with their vectors), and the saved ones forgotten (or gone) since, for searches to
    /// skip.
    fn changes(&self, agent: &str, saved_ids: &[u64]) -> Result<Changes, StoreError> {
        let mut in_graph: HashSet<u64> = saved_ids.iter().copied().collect();
        let mut added = Vec::new();
        for item in self.records.scan_prefix(prefix(agent)) {
            let (k, raw) = item?;
            let record: MemoryRecord = decode(&k, &raw)?;
            if record.forgotten || in_graph.remove(&record.id) {
                continue;
            }
            if let Some(bytes) = self.vectors.get(&k)? {
                added.push((record.id, from_bytes(&bytes)));
            }
        }
        // What is left was in the graph but is no longer a live memory.
        Ok((added, in_graph))
    }

    fn build(
        &self,
        agent: &str,
        params: HnswParams,
        exact_below: usize,
    ) -> Result<VectorIndex, StoreError> {
        let mut items = Vec::new();
        let mut dim = 0;
        for item in self.records.scan_prefix(prefix(agent)) {
            let (k, raw) = item?;
            let record: MemoryRecord = decode(&k, &raw)?;
            if record.forgotten {
                continue;
            }
            if let Some(bytes) = self.vectors.get(&k)? {
                let vector = from_bytes(&bytes);
                if dim == 0 {
                    dim = vector.len();
                }
                if vector.len() == dim {
                    items.push((record.id, vector));
                }
            }
        }
        Ok(VectorIndex::build(dim, items, params, exact_below))
    }
}
