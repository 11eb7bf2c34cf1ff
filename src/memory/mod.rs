//! Long-term memory: embedded memories kept in sled (the truth: text, vector, agent, guild, cycle,
//! source, time, pinned, forgotten) and a per-agent vector index derived from them on demand, held
//! in a bounded cache (see `cache`). Every embedding call is reserved and settled in the spend
//! ledger (see `paid`); a memory whose embedding fails is queued in `memory_pending` and written
//! when the endpoint answers again (`flush_pending`).
//!
//! The trees are `memories`, `memory_vectors`, `memory_pending`, `memory_pins` and `memory_notes`.
//! An agent's index is built only from its own key prefix (`<agent>/`), so a search cannot reach
//! another agent's memories; forgotten records are skipped when the index is built and filtered at
//! search time. `recall` never fails a cycle: an error finds nothing. The agent's record keeps
//! recalled memories by reference only; `with_texts` reads the texts back when an actor starts.
//!
//! `forget` and `pin` (and their `_stamped` forms, which record who and when) change one memory; at
//! most `team::MAX_PINS` are pinned in a place, counted under a lock, and a pin or unpin that
//! changes nothing is `MemoryError::Unchanged`. `remove_agent` removes all of a deleted agent's
//! memories, its cached index and its saved graph. A graph is saved again when it has grown by
//! `SAVE_AFTER_NEW_MEMORIES` (or a tenth of its saved size, whichever is more), when it leaves the
//! cache, and at shutdown (`save_indexes`).

pub mod breaker;
mod cache;
mod fork;
pub mod index;
mod joined;
mod paid;
pub mod saved;
mod search;
mod source;
pub mod team;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::budget::Budgets;
pub use crate::budget::Payer;
use crate::clock::{Clock, SystemClock};
use crate::config::MemoryConfig;
use crate::core::memory::{MemoryScope, MemorySource};
use crate::core::message::TokenCounter;
use crate::core::state::{AgentState, GuildId};
use crate::llm::embed::{EmbedPurpose, Embedder};
use crate::locks::{LockRecovered, RwLockRecovered};
use crate::store::{decode, encode, Store, StoreError};
use breaker::{Breaker, BreakerRules, MemoryOff, Transition};
use cache::{Cache, Cached, LoadingGuard, SharedIndex};
use index::{GraphOrigin, HnswParams, VectorIndex};
pub use joined::{JoinedMemory, PreparedJoined};
pub use paid::{PreparedRecall, PreparedRemember};
use saved::SavedIndexes;
use source::{make_graph, save_graph, GraphToMake, IndexSource};
pub use team::{MemoryPlace, Stamp};

/// Whether `Memory::pin` pins a memory (recalled in every cycle) or unpins it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pin {
    On,
    Off,
}

/// A cached graph is saved again once it has grown by this many memories (or a tenth, if more)
/// since its last save, so a restart after a crash has little to add to what it loads.
const SAVE_AFTER_NEW_MEMORIES: usize = 1_000;

/// A memory as stored; its vector lives beside it in its own tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryRecord {
    pub id: u64,
    pub agent: String,
    pub guild: Option<GuildId>,
    pub cycle: u64,
    pub source: MemorySource,
    pub text: String,
    pub created_at: DateTime<Utc>,
    pub pinned: bool,
    pub forgotten: bool,
    /// Who shares it; memories stored before scopes are the agent's own.
    #[serde(default, skip_serializing_if = "is_agent_scope")]
    pub scope: MemoryScope,
    /// The person who added it (`None`: the agent, at `cycle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_by: Option<Stamp>,
    /// Who pinned it, while it is pinned by a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_by: Option<Stamp>,
    /// Who last unpinned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unpinned_by: Option<Stamp>,
    /// Who forgot it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forgotten_by: Option<Stamp>,
}

fn is_agent_scope(scope: &MemoryScope) -> bool {
    *scope == MemoryScope::Agent
}

impl From<crate::store::kv::Error> for MemoryError {
    fn from(e: crate::store::kv::Error) -> Self {
        MemoryError::Store(e.into())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the embeddings endpoint failed: {0}")]
    Embedding(String),
    #[error("no budget for the embedding call: {0}")]
    Budget(String),
    #[error("no memory {0} for this agent")]
    Unknown(u64),
    #[error("the embedding has {got} dimensions but this agent's memories have {want}; the embedding model changed")]
    Dimension { got: usize, want: usize },
    #[error("{0} memories are pinned here already, the most allowed; unpin one first")]
    TooManyPins(usize),
    #[error("{0} notes are kept here already, the most allowed; forget some first")]
    TooManyNotes(usize),
    #[error("{0}")]
    Unchanged(&'static str),
    #[error("the agent was deleted meanwhile")]
    PlaceGone,
    #[error("memory is {}", .0.describe())]
    Off(MemoryOff),
}

pub struct Memory {
    db: crate::store::kv::Db,
    records: crate::store::kv::Tree,
    vectors: crate::store::kv::Tree,
    pending: crate::store::kv::Tree,
    pins: crate::store::kv::Tree,
    /// The live notes people added, by place (`team::MAX_NOTES` bounds them per place).
    notes: crate::store::kv::Tree,
    /// Held while a pin is counted and made, so simultaneous clicks cannot pass `team::MAX_PINS`.
    pin_lock: Mutex<()>,
    embedder: Arc<dyn Embedder>,
    budgets: Arc<Budgets>,
    counter: Arc<dyn TokenCounter>,
    config: MemoryConfig,
    cache: Mutex<Cache>,
    clock: Arc<dyn Clock>,
    breaker: Breaker,
    /// Where graphs are saved between runs; `None` keeps them in memory only.
    saved: Option<Arc<SavedIndexes>>,
    /// For tests of what happens during a load: met twice by every load, after its read from
    /// the store and before its index is cached (see `with_load_rendezvous`).
    load_rendezvous: Option<Arc<tokio::sync::Barrier>>,
}

/// `Config::validate` keeps the breaker's durations within a day; the clamp keeps a date
/// computed from them in range whatever the caller passed.
fn seconds(secs: u64) -> chrono::Duration {
    chrono::Duration::seconds(secs.min(86_400) as i64)
}

fn key(agent: &str, id: u64) -> Vec<u8> {
    format!("{agent}/{id:016x}").into_bytes()
}

fn prefix(agent: &str) -> Vec<u8> {
    format!("{agent}/").into_bytes()
}

/// A vector as stored: little-endian floats, compressed when that makes them smaller (sparse
/// vectors shrink; a real model's dense ones mostly do not).
fn to_bytes(vector: &[f32]) -> Vec<u8> {
    crate::store::packed::pack(vector.iter().flat_map(|x| x.to_le_bytes()).collect())
}

/// A stored vector; one that cannot be read comes back empty, which no search matches.
fn from_bytes(stored: &[u8]) -> Vec<f32> {
    let bytes = crate::store::packed::unpack(stored).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "a stored vector cannot be read");
        std::borrow::Cow::Borrowed(&[][..])
    });
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

impl Memory {
    pub fn new(
        store: &Store,
        embedder: Arc<dyn Embedder>,
        budgets: Arc<Budgets>,
        counter: Arc<dyn TokenCounter>,
        config: &MemoryConfig,
    ) -> Result<Memory, StoreError> {
        let db = store.db().clone();
        Ok(Memory {
            records: db.open_tree("memories")?,
            vectors: db.open_tree("memory_vectors")?,
            pending: db.open_tree("memory_pending")?,
            pins: db.open_tree("memory_pins")?,
            notes: db.open_tree("memory_notes")?,
            pin_lock: Mutex::new(()),
            db,
            embedder,
            budgets,
            counter,
            config: config.clone(),
            cache: Mutex::new(Cache::default()),
            clock: Arc::new(SystemClock),
            breaker: Breaker::new(BreakerRules {
                failures_to_open: config.failures_to_open,
                first_cooldown: seconds(config.cooldown_secs),
                probe_interval: seconds(config.probe_interval_secs),
            }),
            saved: Some(Arc::new(SavedIndexes::new(store.dir().join("hnsw")))),
            load_rendezvous: None,
        })
    }

    /// Reads time (the ledger's day, a memory's date) from `clock` instead of the system's.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Makes every load of an index wait at `barrier` (of two) twice between its read from the
    /// store and its caching: a test meets it once to know the read is done, changes memories,
    /// and meets it again to let the load finish. A race that depends on the scheduler is then
    /// the same on every run.
    #[doc(hidden)]
    pub fn with_load_rendezvous(mut self, barrier: Arc<tokio::sync::Barrier>) -> Self {
        self.load_rendezvous = Some(barrier);
        self
    }

    /// The memory service the config asks for: `None` when memory is off.
    pub fn from_config(
        store: &Store,
        config: &crate::config::Config,
        budgets: Arc<Budgets>,
        counter: Arc<dyn TokenCounter>,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Option<Arc<Memory>>> {
        if !config.memory.enabled {
            return Ok(None);
        }
        let embedder = crate::llm::embed::OpenAiEmbedder::new(&config.llm, &config.memory)?;
        Ok(Some(Arc::new(
            Memory::new(store, Arc::new(embedder), budgets, counter, &config.memory)?
                .with_clock(clock),
        )))
    }

    pub fn payer(&self, agent: &AgentState) -> Payer {
        self.budgets.payer(agent)
    }

    /// Who pays for a person's note to a server (see `Budgets::person_payer`).
    pub fn person_payer(&self, account: &str, user: u64, guild: GuildId) -> Payer {
        self.budgets.person_payer(account, user, guild)
    }

    /// Why memory is off now (the embeddings endpoint refused or keeps failing), if it is.
    pub fn off(&self) -> Option<MemoryOff> {
        self.breaker.off()
    }

    /// Counts a failed embeddings call; memory turning off is logged once, as a warning.
    fn note_failure(&self, error: &crate::llm::LlmError) {
        match self.breaker.record_failure(error, self.clock.now()) {
            Transition::TurnedOff(off) => tracing::warn!(
                endpoint = self
                    .config
                    .base_url
                    .as_deref()
                    .unwrap_or("the chat endpoint"),
                "memory is {}; agents run without recalled memories until then",
                off.describe()
            ),
            Transition::StillOff(off) => {
                tracing::debug!(
                    "the embeddings endpoint still fails; memory is {}",
                    off.describe()
                )
            }
            Transition::Counted => {}
        }
    }

    /// Writes this agent's queued memories, in batches; stops at the first failure.
    pub async fn flush_pending(&self, payer: &Payer) -> Result<usize, MemoryError> {
        let queued: Vec<MemoryRecord> = self
            .pending
            .scan_prefix(prefix(&payer.agent))
            .map(|item| {
                let (k, raw) = item?;
                decode(&k, &raw)
            })
            .collect::<Result<_, StoreError>>()?;
        let mut written = 0;
        for batch in queued.chunks(self.config.batch_size.max(1)) {
            let texts: Vec<String> = batch.iter().map(|r| r.text.clone()).collect();
            let vectors = self.embed(payer, &texts, EmbedPurpose::Passage).await?;
            for (record, vector) in batch.iter().zip(vectors) {
                self.store(record, &vector)?;
                self.pending.remove(key(&record.agent, record.id))?;
                written += 1;
            }
        }
        Ok(written)
    }

    /// Keeps a memory for `flush_pending`; past `max_queued_per_agent` the oldest waiting ones are
    /// dropped, so an endpoint that stays down cannot grow the queue without bound.
    fn queue(&self, record: &MemoryRecord) -> Result<(), MemoryError> {
        self.pending
            .insert(key(&record.agent, record.id), encode(record)?)?;
        let waiting = self.pending_count(&record.agent);
        let excess = waiting.saturating_sub(self.config.max_queued_per_agent);
        if excess > 0 {
            // Keys are the agent and an increasing id, so the scan meets the oldest first.
            for item in self.pending.scan_prefix(prefix(&record.agent)).take(excess) {
                let (k, _) = item?;
                self.pending.remove(k)?;
            }
            tracing::debug!(agent = %record.agent, dropped = excess, "oldest queued memories dropped");
        }
        Ok(())
    }

    pub fn pending_count(&self, agent: &str) -> usize {
        self.pending.scan_prefix(prefix(agent)).count()
    }

    fn store(&self, record: &MemoryRecord, vector: &[f32]) -> Result<(), MemoryError> {
        let mut cache = self.cache.lock_recovered();
        if let Some(cached) = cache.agents.get(&record.agent) {
            let index = cached.index.read_recovered();
            if index.dim() != vector.len() && !index.is_empty() {
                return Err(MemoryError::Dimension {
                    got: vector.len(),
                    want: index.dim(),
                });
            }
        }
        let k = key(&record.agent, record.id);
        self.records.insert(&k, encode(record)?)?;
        self.vectors.insert(&k, to_bytes(vector))?;
        // A loaded index learns the memory at once; one not loaded reads it from the store later,
        // and one being read gets it when the read is done.
        if let Some(cached) = cache.agents.get(&record.agent) {
            self.add_to_index(&record.agent, &cached.index, record.id, vector);
        } else if let Some(changed) = cache.loading.get_mut(&record.agent) {
            changed.stored.push((record.id, vector.to_vec()));
        }
        Ok(())
    }

    /// Adds a stored memory to a cached index, and saves a graph that has grown enough.
    fn add_to_index(&self, agent: &str, shared: &SharedIndex, id: u64, vector: &[f32]) {
        let mut index = shared.write_recovered();
        if index.is_empty() {
            *index = VectorIndex::build(
                vector.len(),
                vec![(id, vector.to_vec())],
                self.params(),
                self.config.exact_below,
            );
        } else if index.dim() == vector.len() {
            index.insert(id, vector);
        }
        let grown = index.len().saturating_sub(index.saved_len());
        if index.is_graph() && grown >= SAVE_AFTER_NEW_MEMORIES.max(index.saved_len() / 10) {
            // Counted as saved now, so the memories stored meanwhile don't start more saves.
            index.set_saved_len(index.len());
            drop(index);
            self.save_in_background(agent, shared.clone());
        }
    }

    /// Saves a graph on the blocking pool, off the caller's path.
    fn save_in_background(&self, agent: &str, index: SharedIndex) {
        let (Some(saved), Ok(runtime)) =
            (self.saved.clone(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let agent = agent.to_string();
        runtime.spawn_blocking(move || save_graph(&saved, &agent, &index));
    }

    /// Saves every cached graph that has memories its saved files lack, so the next start loads
    /// them instead of rebuilding; called when the process stops.
    pub fn save_indexes(&self) {
        let Some(saved) = &self.saved else {
            return;
        };
        let unsaved: Vec<(String, SharedIndex)> = {
            let cache = self.cache.lock_recovered();
            cache
                .agents
                .iter()
                .filter(|(_, cached)| has_unsaved_graph(&cached.index))
                .map(|(agent, cached)| (agent.clone(), cached.index.clone()))
                .collect()
        };
        for (agent, index) in unsaved {
            save_graph(saved, &agent, &index);
        }
    }

    fn params(&self) -> HnswParams {
        HnswParams {
            m: self.config.hnsw_m,
            ef_construction: self.config.hnsw_ef_construction,
            ef_search: self.config.hnsw_ef_search,
        }
    }

    /// The agent's index: from the cache, or built from the store (on the blocking pool, since a
    /// graph build is CPU work), evicting the least recently used agents beyond the bound.
    async fn index_of(&self, agent: &str) -> Result<(SharedIndex, HashSet<u64>), MemoryError> {
        {
            let mut cache = self.cache.lock_recovered();
            cache.clock += 1;
            let now = cache.clock;
            if let Some(cached) = cache.agents.get_mut(agent) {
                cached.last_used = now;
                return Ok((cached.index.clone(), cached.forgotten.clone()));
            }
        }
        let (records, vectors) = (self.records.clone(), self.vectors.clone());
        let (params, exact_below) = (self.params(), self.config.exact_below);
        let (agent_key, saved) = (agent.to_string(), self.saved.clone());
        // Registered before the read starts, so nothing stored or forgotten during it is missed.
        let loading = LoadingGuard::start(&self.cache, agent);
        let loaded = tokio::task::spawn_blocking(move || {
            let source = IndexSource {
                records: &records,
                vectors: &vectors,
                saved: saved.as_deref(),
            };
            source.load(&agent_key, params, exact_below)
        })
        .await
        .map_err(|e| StoreError::Corrupt(format!("the index build failed: {e}")))??;
        if let Some(barrier) = &self.load_rendezvous {
            barrier.wait().await;
            barrier.wait().await;
        }
        let mut cache = self.cache.lock_recovered();
        let changed = loading.finish(&mut cache);
        cache.clock += 1;
        let now = cache.clock;
        if let Some(cached) = cache.agents.get_mut(agent) {
            // Another load finished first and has been kept up to date since: it stays.
            cached.last_used = now;
            return Ok((cached.index.clone(), cached.forgotten.clone()));
        }
        let mut skip = loaded.skip;
        skip.extend(changed.forgotten);
        let index = Arc::new(RwLock::new(loaded.index));
        for (id, vector) in changed.stored {
            let known = index.read_recovered().contains(id);
            if !known {
                self.add_to_index(agent, &index, id, &vector);
            }
        }
        cache.agents.insert(
            agent.to_string(),
            Cached {
                index: index.clone(),
                forgotten: skip.clone(),
                last_used: now,
            },
        );
        if loaded.graph != GraphToMake::Nothing {
            // Searches are exact (and correct) until the graph is attached.
            let (saved, agent, index) = (self.saved.clone(), agent.to_string(), index.clone());
            tokio::task::spawn_blocking(move || {
                make_graph(loaded.graph, saved.as_deref(), &agent, &index)
            });
        }
        for (evicted, index) in evict(&mut cache, self.config.max_cached_vectors, agent) {
            self.save_in_background(&evicted, index);
        }
        Ok((index, skip))
    }

    pub fn record(&self, agent: &str, id: u64) -> Result<Option<MemoryRecord>, StoreError> {
        let k = key(agent, id);
        match self.records.get(&k)? {
            Some(raw) => decode(&k, &raw).map(Some),
            None => Ok(None),
        }
    }

    fn update(
        &self,
        agent: &str,
        id: u64,
        change: impl Fn(&mut MemoryRecord),
    ) -> Result<MemoryRecord, MemoryError> {
        let mut record = self
            .record(agent, id)?
            .filter(|r| !r.forgotten)
            .ok_or(MemoryError::Unknown(id))?;
        change(&mut record);
        self.records.insert(key(agent, id), encode(&record)?)?;
        Ok(record)
    }

    /// Forgets a memory: searches skip it at once, and the next rebuild leaves it out.
    pub fn forget(&self, agent: &str, id: u64) -> Result<MemoryRecord, MemoryError> {
        self.forget_stamped(agent, id, None)
    }

    /// `forget`, recording who did it and when.
    pub fn forget_stamped(
        &self,
        agent: &str,
        id: u64,
        stamp: Option<Stamp>,
    ) -> Result<MemoryRecord, MemoryError> {
        let record = self.update(agent, id, |r| {
            r.forgotten = true;
            r.pinned = false;
            r.pinned_by = None;
            r.forgotten_by = stamp.clone();
        })?;
        self.pins.remove(key(agent, id))?;
        self.notes.remove(key(agent, id))?;
        let mut cache = self.cache.lock_recovered();
        if let Some(cached) = cache.agents.get_mut(agent) {
            cached.forgotten.insert(id);
        } else if let Some(changed) = cache.loading.get_mut(agent) {
            changed.forgotten.push(id);
        }
        Ok(record)
    }

    /// Pins (or unpins) a memory: pinned memories are recalled in every cycle.
    pub fn pin(&self, agent: &str, id: u64, pin: Pin) -> Result<MemoryRecord, MemoryError> {
        self.pin_stamped(agent, id, pin, None)
    }

    /// `pin`, recording who did it and when. Each place keeps at most `team::MAX_PINS` pinned
    /// memories, since every one of them is recalled in every cycle.
    pub fn pin_stamped(
        &self,
        agent: &str,
        id: u64,
        pin: Pin,
        stamp: Option<Stamp>,
    ) -> Result<MemoryRecord, MemoryError> {
        let pinned = pin == Pin::On;
        let _counted_and_made = self.pin_lock.lock_recovered();
        let current = self
            .record(agent, id)?
            .filter(|r| !r.forgotten)
            .ok_or(MemoryError::Unknown(id))?;
        if current.pinned == pinned {
            return Err(MemoryError::Unchanged(if pinned {
                "it is pinned already"
            } else {
                "it is not pinned"
            }));
        }
        if pinned && self.pins.scan_prefix(prefix(agent)).count() >= team::MAX_PINS {
            return Err(MemoryError::TooManyPins(team::MAX_PINS));
        }
        let record = self.update(agent, id, |r| {
            r.pinned = pinned;
            if pinned {
                r.pinned_by = stamp.clone();
            } else {
                r.pinned_by = None;
                r.unpinned_by = stamp.clone();
            }
        })?;
        if pinned {
            self.pins.insert(key(agent, id), &[])?;
        } else {
            self.pins.remove(key(agent, id))?;
        }
        Ok(record)
    }

    /// How many memories the agent has (forgotten ones included until a rebuild).
    pub fn count(&self, agent: &str) -> usize {
        self.records.scan_prefix(prefix(agent)).count()
    }

    /// Removes every memory of `agent` (records, vectors, the embedding queue, pins), its cached
    /// index and its saved graph, for an agent deleted for good; returns the memories removed.
    pub fn remove_agent(&self, agent: &str) -> Result<usize, MemoryError> {
        self.cache.lock_recovered().agents.remove(agent);
        let mut removed = 0;
        for (n, tree) in [
            &self.records,
            &self.vectors,
            &self.pending,
            &self.pins,
            &self.notes,
        ]
        .into_iter()
        .enumerate()
        {
            for key in tree.scan_prefix(prefix(agent)).keys() {
                tree.remove(key.map_err(StoreError::from)?)
                    .map_err(StoreError::from)?;
                removed += usize::from(n == 0);
            }
        }
        self.db.flush().map_err(StoreError::from)?;
        if let Some(saved) = &self.saved {
            if let Err(e) = saved.remove(agent) {
                tracing::warn!(%agent, error = %e, "a deleted agent's saved graph could not be removed");
            }
        }
        Ok(removed)
    }

    /// Drops every cached index (tests use it to prove the store alone is enough).
    pub fn clear_cache(&self) {
        self.cache.lock_recovered().agents.clear();
    }

    pub fn is_cached(&self, agent: &str) -> bool {
        self.cache.lock_recovered().agents.contains_key(agent)
    }

    /// Whether the agent's index is being read from the store now.
    pub fn is_loading(&self, agent: &str) -> bool {
        self.cache.lock_recovered().loading.contains_key(agent)
    }

    /// Where the agent's cached graph came from; `None` while it is being made, or when the
    /// agent has too few memories for one (or none cached).
    pub fn graph_origin(&self, agent: &str) -> Option<GraphOrigin> {
        let index = self.cache.lock_recovered().agents.get(agent)?.index.clone();
        let origin = index.read_recovered().origin();
        origin
    }
}

/// Whether the index has a graph with points its saved files lack.
fn has_unsaved_graph(index: &SharedIndex) -> bool {
    let index = index.read_recovered();
    index.is_graph() && index.len() > index.saved_len()
}

/// Drops least recently used indexes (never `keep`) until the cached vectors fit the bound, and
/// returns the dropped graphs that have memories their saved files lack.
fn evict(cache: &mut Cache, max_vectors: usize, keep: &str) -> Vec<(String, SharedIndex)> {
    let mut unsaved = Vec::new();
    loop {
        let total: usize = cache
            .agents
            .values()
            .map(|c| c.index.read().map_or(0, |i| i.len()))
            .sum();
        if total <= max_vectors {
            return unsaved;
        }
        let oldest = cache
            .agents
            .iter()
            .filter(|(agent, _)| agent.as_str() != keep)
            .min_by_key(|(_, c)| c.last_used)
            .map(|(agent, _)| agent.clone());
        let Some(agent) = oldest else {
            return unsaved;
        };
        if let Some(dropped) = cache.agents.remove(&agent) {
            if has_unsaved_graph(&dropped.index) {
                unsaved.push((agent, dropped.index));
            }
        }
    }
}
