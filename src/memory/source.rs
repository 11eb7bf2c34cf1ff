//! Where an agent's vector index comes from (`IndexSource::load`): the store's memories, laid out
//! in the order of the agent's saved graph when there is one (plus the memories stored since,
//! without those forgotten since), searchable at once by exact search; then, on the blocking pool
//! (`make_graph`), the graph itself, loaded from its saved files or built and then saved, and
//! attached. A first search after a restart is thus answered at once instead of waiting for the
//! graph.

use std::collections::HashSet;

use super::index::{GraphOrigin, HnswParams, VectorIndex};
use super::saved::SavedIndexes;
use super::{from_bytes, key, prefix, MemoryRecord, SharedIndex};
use crate::locks::RwLockRecovered;
use crate::store::{decode, StoreError};

/// Writes a graph's files, logging rather than failing: the store still holds every memory.
pub(super) fn save_graph(saved: &SavedIndexes, agent: &str, index: &SharedIndex) {
    let index = index.read_recovered();
    match saved.save(agent, &index) {
        Ok(0) => {}
        Ok(points) => tracing::debug!(agent, points, "saved the vector index"),
        Err(why) => tracing::warn!(agent, "could not save the vector index: {why}"),
    }
}

/// What an index still needs after it is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GraphToMake {
    /// Below the graph threshold: exact search is the index.
    Nothing,
    /// The saved graph covers the first `points` positions.
    Load {
        points: usize,
    },
    Build,
}

pub(super) struct LoadedIndex {
    pub(super) index: VectorIndex,
    /// Memories in the saved graph that were forgotten since it was saved.
    pub(super) skip: HashSet<u64>,
    pub(super) graph: GraphToMake,
}

/// The stored memories an index is made of: ids and vectors by position, and the ids to skip.
struct Items {
    dim: usize,
    items: Vec<(u64, Vec<f32>)>,
    skip: HashSet<u64>,
}

/// Where an agent's index comes from: its saved graph, else its stored memories.
pub(super) struct IndexSource<'a> {
    pub(super) records: &'a crate::store::kv::Tree,
    pub(super) vectors: &'a crate::store::kv::Tree,
    pub(super) saved: Option<&'a SavedIndexes>,
}

impl IndexSource<'_> {
    /// The agent's memories as an index that can search now (exactly, until its graph comes),
    /// and what graph it still needs.
    pub(super) fn load(
        &self,
        agent: &str,
        params: HnswParams,
        exact_below: usize,
    ) -> Result<LoadedIndex, StoreError> {
        if let Some(saved) = self.saved {
            match saved.saved_ids(agent, params) {
                Ok(Some(saved_ids)) => match self.in_saved_order(agent, &saved_ids)? {
                    Some(Items { dim, items, skip }) => {
                        let index = VectorIndex::waiting_for_graph(dim, items, params, exact_below);
                        index.set_saved_len(saved_ids.len());
                        let graph = GraphToMake::Load {
                            points: saved_ids.len(),
                        };
                        return Ok(LoadedIndex { index, skip, graph });
                    }
                    None => tracing::warn!(
                        agent,
                        "the saved vector index names memories the store lacks; rebuilding it"
                    ),
                },
                Ok(None) => {}
                Err(why) => tracing::warn!(
                    agent,
                    "the saved vector index can't be used ({why}); rebuilding it from the store"
                ),
            }
        }
        let Items { dim, items, skip } = self.live(agent)?;
        let (index, graph) = if items.len() >= exact_below {
            let index = VectorIndex::waiting_for_graph(dim, items, params, exact_below);
            (index, GraphToMake::Build)
        } else {
            let index = VectorIndex::build(dim, items, params, exact_below);
            (index, GraphToMake::Nothing)
        };
        Ok(LoadedIndex { index, skip, graph })
    }

    /// The saved graph's memories in its order (forgotten ones included, to be skipped), then
    /// the memories stored since; `None` if the store lacks a saved memory's vector.
    fn in_saved_order(&self, agent: &str, saved_ids: &[u64]) -> Result<Option<Items>, StoreError> {
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
        let skip = in_graph;
        let mut items = Vec::with_capacity(saved_ids.len() + added.len());
        let mut dim = 0;
        for id in saved_ids {
            let Some(bytes) = self.vectors.get(key(agent, *id))? else {
                return Ok(None);
            };
            let vector = from_bytes(&bytes);
            if dim == 0 {
                dim = vector.len();
            }
            if vector.is_empty() || vector.len() != dim {
                return Ok(None);
            }
            items.push((*id, vector));
        }
        items.extend(added.into_iter().filter(|(_, v)| v.len() == dim));
        Ok(Some(Items { dim, items, skip }))
    }

    /// The live memories in the store's order.
    fn live(&self, agent: &str) -> Result<Items, StoreError> {
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
                if vector.is_empty() {
                    continue;
                }
                if dim == 0 {
                    dim = vector.len();
                }
                if vector.len() == dim {
                    items.push((record.id, vector));
                }
            }
        }
        Ok(Items {
            dim,
            items,
            skip: HashSet::new(),
        })
    }
}

/// Gives a loaded index its graph (its saved one, else one built from its vectors while inserts
/// go on), then saves a built one. Runs on the blocking pool; the index searches exactly
/// meanwhile.
pub(super) fn make_graph(
    to_make: GraphToMake,
    saved: Option<&SavedIndexes>,
    agent: &str,
    index: &SharedIndex,
) {
    let (dim, params) = {
        let index = index.read_recovered();
        (index.dim(), index.params())
    };
    if let (GraphToMake::Load { points }, Some(saved)) = (to_make, saved) {
        let started = std::time::Instant::now();
        match saved.load_graph(agent, points, dim) {
            Ok(graph) => {
                let mut index = index.write_recovered();
                index.attach_graph(graph, points, GraphOrigin::Loaded);
                tracing::info!(
                    agent,
                    points,
                    seconds = started.elapsed().as_secs_f64(),
                    "loaded the saved vector index"
                );
                return;
            }
            Err(why) => tracing::warn!(
                agent,
                "the saved vector index can't be used ({why}); rebuilding it from the store"
            ),
        }
    }
    if to_make == GraphToMake::Nothing {
        return;
    }
    let (vectors, covers) = {
        let index = index.read_recovered();
        (index.vectors_for_graph(), index.len())
    };
    let started = std::time::Instant::now();
    let graph = VectorIndex::build_graph(dim, &vectors, params);
    drop(vectors);
    index
        .write_recovered()
        .attach_graph(graph, covers, GraphOrigin::Built);
    tracing::info!(
        agent,
        points = covers,
        seconds = started.elapsed().as_secs_f64(),
        "built the vector index"
    );
    if let Some(saved) = saved {
        save_graph(saved, agent, index);
    }
}
