//! The sled store. Trees: `agents` and `agent_briefs` (see `agent_records`), `episodes` and
//! `episode_chunks` (see `steps`), `decisions`, `journal`, `workspace` and `workspace_undo` (see
//! `snapshots`), `discord` (see `bindings`), `subagents`, `audit` and `audit_chunks` (see `audit`),
//! `rules`, `leases` (which process runs each agent, see `leases`), and the ledger's trees.
//! Records are versioned `{v, data}` JSON, packed by `packed`.
//!
//! The write path. `Store::commit` takes a `Commit` (the agent's state, its new episodes, the
//! command whose result it stores, the workspace changes, the trail entries, a server rule) and
//! lands it all or none through `ahead`: the set is stored under one key, the agent's record
//! written first, the rest applied, the key removed. `Commit::finished_command` removes that
//! command's journal entry in the same write, so the journal holds only commands under way; a
//! commit holding a cycle's episode also removes that cycle's decision record, whose `by` the
//! episode keeps as `decided_by`. Both matter because sled keeps 40 to 50 bytes of memory per key
//! it holds, so a record kept per cycle grew the bot's memory with its cycles. `record_executing`
//! and `journal_executing` write a command's start, `record_decision` is the compare-and-swap on
//! `decisions/<agent>/<cycle>` that makes the first click win, `clear_decision` removes it when a
//! proposal is shown again (both fenced by the agent's lease in their `_fenced` forms, as the
//! commits and the folds that follow them are), and `decided_by` reads who decided, from the record while the cycle is
//! open and from the episode after.
//!
//! Durability is separate from writing: a commit is not flushed by itself. The caller flushes
//! through `durable`, which shares one sled flush among the callers that need one at about the same
//! time; `share_flushes_within` sets the bot's window (`store.flush_window_ms`, `BOT_FLUSH_WINDOW`
//! by default) and `flush_in_place` makes the console's flushes run on the calling thread.
//! `disk_report` (flushes made, bytes written, size on disk) is logged when the console or the bot
//! stops.
//!
//! Memory use. sled's page cache is `store.cache_mb` (`DEFAULT_CACHE_BYTES`, 8 MiB, against sled's
//! 1 GiB; sled counts it in compressed log bytes, and the pages take several times that in memory).
//! A new store is created without sled's compression, since `packed` compresses each value itself.
//! Each agent's workspace size is kept by `workspace_sizes`, so a per-agent cap costs no scan. The
//! card reference is saved without a flush of its own.
//!
//! `delete_agent` removes an agent's record, steps, decisions, journal, workspace, sub-agents,
//! audit trail and binding; the ledger keeps its spend.

mod agent_records;
mod ahead;
use ahead::{TreeId, Writes};
mod audit;
mod bindings;
mod chunks;
mod durable;
pub(crate) use durable::Durable;
mod opening;
use opening::open_waiting_for_lock;
#[cfg(test)]
use opening::{created_setting, LOCK_WAIT, SEGMENT_BYTES};
mod files;
pub mod kv;
mod leases;
pub use leases::{Acquired, Fence, Lease, LeaseOwner, Renewal};
pub mod migrate;
pub(crate) mod packed;
mod rules;
pub mod snapshots;
mod spend_series;
mod started;
mod steps;
#[cfg(test)]
pub(crate) mod test_backends;
mod workspace_sizes;

pub use audit::AuditPage;
pub use bindings::{CardRef, ThreadBinding};

use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::core::audit::AuditEntry;
use crate::core::decision::Decision;
use crate::core::history::Episode;
use crate::core::reply::CommandCall;
use crate::core::state::AgentState;
use crate::locks::LockRecovered;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage error: {0}")]
    Backend(#[from] kv::Error),
    #[error("{0}")]
    Connect(#[from] kv::ConnectError),
    #[error("the store was written by a newer autothread (schema {found}; this build reads up to {supported}); upgrade autothread to open it")]
    TooNew { found: u32, supported: u32 },
    #[error("store migration failed: {0}")]
    Migration(String),
    #[error("the store holds an unreadable record: {0}")]
    Corrupt(String),
    #[error("record encoding failed: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("the store in {0} is in use by another autothread process; stop it or choose another --data-dir")]
    Locked(std::path::PathBuf),
    #[error("no agent matches {0:?}")]
    UnknownAgent(String),
    #[error("{0:?} matches several agents; give more of the id")]
    AmbiguousAgent(String),
    /// The agent's lease carries another fencing token: another process runs it now, and this
    /// write was refused whole (see `leases`).
    #[error("agent {agent} is run by another process now (its lease was taken over); nothing was written")]
    LeaseLost { agent: String },
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        StoreError::Backend(kv::Error::Sled(e))
    }
}

/// Every record carries the record layout version it was written with.
#[derive(Serialize, Deserialize)]
struct Record<T> {
    v: u32,
    data: T,
}

const RECORD_VERSION: u32 = 1;

/// A record as stored: versioned JSON, compressed when large (see `packed`).
pub(crate) fn encode<T: Serialize>(data: &T) -> Result<Vec<u8>, StoreError> {
    Ok(packed::pack(serde_json::to_vec(&Record {
        v: RECORD_VERSION,
        data,
    })?))
}

pub(crate) fn decode<T: DeserializeOwned>(key: &[u8], raw: &[u8]) -> Result<T, StoreError> {
    let corrupt = |e: String| StoreError::Corrupt(format!("{}: {e}", String::from_utf8_lossy(key)));
    let json = packed::unpack(raw).map_err(|e| corrupt(e.to_string()))?;
    let record: Record<T> = serde_json::from_slice(&json).map_err(|e| corrupt(e.to_string()))?;
    Ok(record.data)
}

/// Builds the live index of Discord agents once per database (by one process at a time).
fn db_exclusively_index(store: &Store) -> Result<(), StoreError> {
    store.db.exclusively(|| store.index_live_agents_once())
}

fn cycle_key(agent: &str, cycle: u64) -> Vec<u8> {
    format!("{agent}/{cycle:016x}").into_bytes()
}

fn agent_prefix(agent: &str) -> Vec<u8> {
    format!("{agent}/").into_bytes()
}

/// The first key after every key of `agent`'s in a tree keyed by text (no UTF-8 byte is 0xff).
fn agent_end(agent: &str) -> Vec<u8> {
    let mut end = agent_prefix(agent);
    end.push(0xff);
    end
}

fn file_key(agent: &str, path: &str) -> Vec<u8> {
    format!("{agent}/{path}").into_bytes()
}

/// A sub-agent: a helper chat an agent started with `start_agent`, with its own history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubAgentRecord {
    pub key: String,
    pub name: String,
    pub task: String,
    /// The chat so far: the opening prompt, then alternating replies and messages.
    pub messages: Vec<crate::core::message::Message>,
    /// What its replies cost the parent, in micro-dollars.
    pub spent: crate::core::budget::Micros,
    /// The parent's cycles that started it and that last talked to it: a command re-approved
    /// after a crash finds its own exchange here instead of paying for it twice.
    #[serde(default)]
    pub started_cycle: u64,
    #[serde(default)]
    pub last_cycle: u64,
    pub created_at: DateTime<Utc>,
}

fn subagent_key(agent: &str, key: &str) -> Vec<u8> {
    format!("{agent}/agent/{key}").into_bytes()
}

fn subagent_counter(agent: &str) -> Vec<u8> {
    format!("{agent}/next").into_bytes()
}

/// What the journal knows about a cycle's command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum JournalEntry {
    /// The command in full is the agent's pending proposal, flushed with this entry, so the entry
    /// names it only; one written before that kept a copy, which is still read.
    Executing {
        #[serde(default)]
        command: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call: Option<CommandCall>,
        started_at: DateTime<Utc>,
        /// For a start stored without the agent's record (see `started`): the digest of the
        /// record it was stored beside, which says that the record awaits the decision this
        /// entry started. Any later write of the record makes the entry stale.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_record: Option<u64>,
    },
    /// Written by stores before the journal let finished commands go (the cycle's episode
    /// records the command and its outcome, in the same write that removes the entry); still
    /// read, and a record written before that kept a copy of the command.
    Done {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call: Option<CommandCall>,
        status: String,
        finished_at: DateTime<Utc>,
    },
}

impl JournalEntry {
    /// The record of `call` starting at `at`, beside the agent's stored record of digest
    /// `on_record` when it stands for the step's state (see `started`).
    fn executing(call: &CommandCall, at: DateTime<Utc>, on_record: Option<u64>) -> JournalEntry {
        JournalEntry::Executing {
            command: call.name.clone(),
            call: None,
            started_at: at,
            on_record,
        }
    }
}

/// A change to an agent's files, staged by a command and committed with its journal entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceOp {
    Put { path: String, contents: Vec<u8> },
    Delete { path: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub decision: Decision,
    /// Who decided: the person who clicked, with everyone who approved before them when the
    /// click reached a quorum.
    pub by: crate::core::person::ActedBy,
    pub at: DateTime<Utc>,
}

/// Which of an agent's records a write added to, and so may be due to be folded.
#[derive(Debug, Clone, Copy)]
struct Folds {
    audit: bool,
    steps: bool,
}

/// Everything one step changes, written together (all or nothing, see `ahead`).
#[derive(Debug, Default)]
pub struct Commit<'a> {
    pub state: Option<&'a AgentState>,
    pub episodes: Vec<&'a Episode>,
    /// The cycle whose command finished with this write: its journal entry goes, since the
    /// cycle's episode (in the same write) now says what the command did. The journal holds only
    /// commands under way, a record less kept for every cycle.
    pub finished_command: Option<u64>,
    pub workspace: Vec<WorkspaceOp>,
    /// Entries for the agent's audit trail, written with the state they record.
    pub audit: Vec<&'a AuditEntry>,
    /// A rule for every agent of the state's server, made by the step.
    pub server_rule: Option<&'a crate::core::rules::ApprovalRule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSummary {
    pub id: String,
    pub name: String,
    pub phase: String,
    pub cycle: u64,
    pub task: String,
    pub updated_at: DateTime<Utc>,
}

/// sled's page cache unless `store.cache_mb` says otherwise. sled's own default is 1 GiB, which
/// a busy bot fills over hours whatever its number of agents (RSS grew with cycles, not agents);
/// the working set of a cycle is a few records per agent. sled counts a cached page at its size
/// in the log, compressed, while the page in memory takes several times that: with 64 MiB, 300
/// agents cycling for 30 minutes never filled the cache and RSS grew by 200 MiB.
pub const DEFAULT_CACHE_BYTES: u64 = 8 << 20;

/// The bot's flush window by default (`store.flush_window_ms`; see `durable`): at most one flush
/// every this long. 300 agents cycling flushed 1.8 times a cycle, each flush writing at least a
/// page of disk for a few hundred bytes of records: 120 KB written a cycle in a two-minute run.
/// With 5 ms, 0.63 flushes and 41 KB; with 10 ms, 0.28 flushes and 37 KB, and more cycles a
/// second (the disk synced less often). Over a 15-minute soak with the store at its full size,
/// 25 ms made 0.18 flushes a cycle at 207 cycles a second (37.3 KB in `write_bytes`), and 10 ms
/// 0.46 at 199 (39.1 KB), with the same acks. A step waits at most this long for its flush,
/// against the model call every cycle makes.
pub const BOT_FLUSH_WINDOW: std::time::Duration = std::time::Duration::from_millis(25);

/// Durable flushes since the process started, by every store handle: the figure the cycle
/// benchmark divides by the cycles run.
static FLUSHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts a durable flush of the store's database; every one goes through `Durable`, so the
/// per-cycle figure covers the ledger's too.
fn count_durable_flush() {
    FLUSHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

#[derive(Clone)]
pub struct Store {
    dir: std::path::PathBuf,
    db: kv::Db,
    agents: kv::Tree,
    /// What each agent was given and rarely changes, apart from its record (see `agent_records`).
    agent_briefs: kv::Tree,
    episodes: kv::Tree,
    /// Older steps, folded together (see `steps`).
    episode_chunks: kv::Tree,
    decisions: kv::Tree,
    journal: kv::Tree,
    workspace: kv::Tree,
    /// What each recent cycle's workspace changes replaced (see `snapshots`).
    workspace_undo: kv::Tree,
    /// The digest of each workspace file a person put there from outside, by the file's key (see
    /// `files`): while the file still holds those bytes, the agent did not write it.
    uploads: kv::Tree,
    discord: kv::Tree,
    subagents: kv::Tree,
    audit: kv::Tree,
    /// Older entries of the audit trail, folded together (see `audit`).
    audit_chunks: kv::Tree,
    /// Keep folds and the readers of folded records apart, agent by agent (see `chunks`).
    record_locks: Arc<[Mutex<()>]>,
    rules: kv::Tree,
    /// Sets of writes stored whole before they are applied (see `ahead`).
    ahead: kv::Tree,
    /// Which process runs each agent (see `leases`).
    leases: kv::Tree,
    /// Flushes shared by every clone of this store and by the ledger (see `durable`).
    durable: Durable,
    /// In-memory state a component keeps over its own trees here (the spend ledger's books), read
    /// once and shared by every clone of this store; typed by its owner, not by the store.
    books: Arc<Mutex<Option<Arc<dyn std::any::Any + Send + Sync>>>>,
    /// Each agent's workspace size in bytes, added up from its files the first time it is asked
    /// for and kept up to date as workspace writes land (see `ahead::apply_write`), so checking a
    /// write against the workspace limit does not read every file again each time.
    workspace_sizes: Arc<Mutex<workspace_sizes::WorkspaceSizes>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (or creates) the store with the default page cache.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Store::open_with_cache(dir, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the store with a page cache of `cache_bytes` and brings it to the
    /// current schema.
    pub fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::from(sled::Error::Io(std::io::Error::new(
                e.kind(),
                format!("cannot create {}: {e}", dir.display()),
            )))
        })?;
        let db = open_waiting_for_lock(dir, cache_bytes)?;
        Store::open_on(db, dir)
    }

    /// Opens the store in the PostgreSQL database at `url` (see `kv::postgres`), shared with every
    /// other process that opens it; `dir` holds only what each process keeps for itself (saved
    /// vector indexes, rebuilt from the database when missing).
    pub fn open_postgres(url: &str, dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::from(sled::Error::Io(std::io::Error::new(
                e.kind(),
                format!("cannot create {}: {e}", dir.display()),
            )))
        })?;
        Store::open_on(kv::Db::connect_postgres(url)?, dir)
    }

    /// The store over `db`, brought to the current schema (by one process at a time).
    fn open_on(db: kv::Db, dir: &Path) -> Result<Store, StoreError> {
        db.exclusively(|| migrate::run(&db))?;
        let store = Store {
            agents: db.open_tree("agents")?,
            agent_briefs: db.open_tree("agent_briefs")?,
            episodes: db.open_tree("episodes")?,
            episode_chunks: db.open_tree("episode_chunks")?,
            decisions: db.open_tree("decisions")?,
            journal: db.open_tree("journal")?,
            workspace: db.open_tree("workspace")?,
            workspace_undo: db.open_tree("workspace_undo")?,
            uploads: db.open_tree("uploads")?,
            discord: db.open_tree("discord")?,
            subagents: db.open_tree("subagents")?,
            audit: db.open_tree("audit")?,
            audit_chunks: db.open_tree("audit_chunks")?,
            record_locks: chunks::record_locks(),
            rules: db.open_tree("rules")?,
            ahead: db.open_tree("ahead")?,
            leases: db.open_tree("leases")?,
            durable: Durable::new(db.clone()),
            books: Arc::default(),
            workspace_sizes: Arc::default(),
            dir: dir.to_path_buf(),
            db,
        };
        store.finish_writes_cut_short()?;
        db_exclusively_index(&store)?;
        Ok(store)
    }

    /// Which database holds the store.
    pub fn backend(&self) -> kv::Backend {
        self.db.backend()
    }

    /// The store's folder; files that live beside sled's (saved vector indexes) go in it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The books of the one component that keeps in-memory state over its own trees in this store
    /// (the spend ledger): read by `load` the first time, then the same for every clone of the
    /// store, because two copies over the same trees would each think they held all of it.
    pub(crate) fn shared_books<T: std::any::Any + Send + Sync>(
        &self,
        load: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<Arc<T>, StoreError> {
        let mut slot = self.books.lock_recovered();
        if let Some(books) = slot.as_ref() {
            return Arc::clone(books).downcast::<T>().map_err(|_| {
                StoreError::Corrupt("the store's books are held by another kind of owner".into())
            });
        }
        let books = Arc::new(load()?);
        *slot = Some(books.clone());
        Ok(books)
    }

    /// The underlying database, for components that keep their own trees in it (the spend ledger).
    pub(crate) fn db(&self) -> &kv::Db {
        &self.db
    }

    pub fn schema_version(&self) -> Result<Option<u32>, StoreError> {
        migrate::schema_version(&self.db)
    }

    /// Waits until everything written so far is on disk (a durability point).
    pub async fn flush(&self) -> Result<(), StoreError> {
        // sled's flush_async can stall when many tasks flush at once (seen here with 50 agents
        // starting together), so its blocking flush runs on the blocking pool instead.
        self.durable.flush().await?;
        Ok(())
    }

    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        self.durable.flush_blocking()?;
        Ok(())
    }

    /// Makes the store's flushes start at most once per `window` (see `durable`): for a process
    /// serving many agents, which trades a few milliseconds on a step for flushes shared by many.
    pub fn share_flushes_within(&self, window: std::time::Duration) {
        self.durable.share_within(window);
    }

    /// Makes the store's async flushes wait for the disk on the calling thread (see
    /// `Durable::flush_in_place`): for the console's one agent on its runtime of one thread.
    pub fn flush_in_place(&self) {
        self.durable.flush_in_place();
    }

    /// The store's shared flush, for components that keep their own trees in its database.
    pub(crate) fn durable(&self) -> Durable {
        self.durable.clone()
    }

    /// What this process did to the disk, for the log line at exit: durable flushes, the bytes
    /// the process wrote (when the caller could read them) and the store's size.
    pub fn disk_report(&self, bytes_written: Option<u64>) -> String {
        let flushes = FLUSHES.load(std::sync::atomic::Ordering::Relaxed);
        let written =
            bytes_written.map_or(String::new(), |bytes| format!(", {bytes} bytes written"));
        let size = self.db.size_on_disk().unwrap_or(0);
        format!("{flushes} durable flushes{written}, store {size} bytes on disk")
    }

    pub fn commit(&self, commit: &Commit<'_>) -> Result<(), StoreError> {
        self.commit_with(commit, None)
    }

    /// `commit`, with the writes fenced by the agent's lease when `fence` is given.
    fn commit_with(&self, commit: &Commit<'_>, fence: Option<Fence>) -> Result<(), StoreError> {
        let Some(state) = commit.state else {
            return Ok(());
        };
        let mut writes = Writes::default();
        self.put_agent(&mut writes, state)?;
        if let (Some(rule), Some(guild)) = (commit.server_rule, &state.money.spender.guild) {
            writes.put(
                TreeId::Rules,
                rules::rule_key(guild, &rule.id),
                encode(rule)?,
            );
        }
        let audit_held = self.put_audit(&mut writes, &state.id, &commit.audit)?;
        for episode in &commit.episodes {
            writes.put(
                TreeId::Episodes,
                cycle_key(&state.id, episode.cycle),
                encode(*episode)?,
            );
        }
        if let Some(cycle) = commit.finished_command {
            writes.remove(TreeId::Journal, cycle_key(&state.id, cycle));
        }
        if !commit.workspace.is_empty() {
            let cycle = commit.finished_command.unwrap_or(state.progress.cycle);
            self.record_undo(&mut writes, &state.id, cycle, &commit.workspace)?;
        }
        for op in &commit.workspace {
            match op {
                WorkspaceOp::Put { path, contents } => {
                    writes.put(
                        TreeId::Workspace,
                        file_key(&state.id, path),
                        contents.clone(),
                    );
                }
                WorkspaceOp::Delete { path } => {
                    writes.remove(TreeId::Workspace, file_key(&state.id, path));
                }
            }
        }
        // A closed cycle's decision lives on in its episode, so its record goes. sled's memory
        // grows with the keys a store holds (about 40 to 50 bytes a key: see the README's memory
        // figures), so a record kept for every cycle made the bot's grow with its cycles. Unfenced
        // it goes after the write rather than in it: a crash in between leaves a record nothing
        // reads as pending, since its cycle is closed, and a cycle decided by no one has none to
        // remove (sled skips removing a missing key without writing). Fenced, the write is one
        // transaction anyway, and a process whose lease was taken over must not remove the new
        // owner's records: the removal is in it.
        if fence.is_some() {
            for episode in &commit.episodes {
                writes.remove(TreeId::Decisions, cycle_key(&state.id, episode.cycle));
            }
        }
        self.write_together_fenced(&writes, &state.id, fence)?;
        drop(audit_held);
        if fence.is_none() {
            for episode in &commit.episodes {
                self.decisions.remove(cycle_key(&state.id, episode.cycle))?;
            }
        }
        self.fold_when_due(
            &state.id,
            state.progress.cycle,
            Folds {
                audit: !commit.audit.is_empty(),
                steps: !commit.episodes.is_empty(),
            },
            fence,
        );
        Ok(())
    }

    /// Every `FOLD_CHECK_EVERY` cycles, after a write that added audit entries or steps, folds
    /// the agent's older ones into chunks, fenced by the agent's lease like the write (a process
    /// whose lease was taken over folds nothing). The write has landed whatever a fold does: a
    /// failure is logged, and the records stay where they are until a later check folds them.
    fn fold_when_due(&self, agent: &str, cycle: u64, due: Folds, fence: Option<Fence>) {
        if !cycle.is_multiple_of(chunks::FOLD_CHECK_EVERY) {
            return;
        }
        let folds = [
            due.audit
                .then(|| ("audit entries", self.fold_audit_fenced(agent, fence))),
            due.steps
                .then(|| ("steps", self.fold_steps_fenced(agent, fence))),
        ];
        for (records, folded) in folds.into_iter().flatten() {
            if let Err(error) = folded {
                tracing::warn!(%agent, %error, "could not fold {records} into a chunk");
            }
        }
    }

    /// Records that a command is about to run; must be on disk before the command starts.
    pub async fn journal_executing(
        &self,
        agent: &str,
        cycle: u64,
        call: &CommandCall,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.record_executing(agent, cycle, call, at)?;
        self.flush().await
    }

    /// `journal_executing` for a caller that flushes before the command starts.
    pub fn record_executing(
        &self,
        agent: &str,
        cycle: u64,
        call: &CommandCall,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.journal.insert(
            cycle_key(agent, cycle),
            encode(&JournalEntry::executing(call, at, None))?,
        )?;
        Ok(())
    }

    pub fn journal_entry(
        &self,
        agent: &str,
        cycle: u64,
    ) -> Result<Option<JournalEntry>, StoreError> {
        let key = cycle_key(agent, cycle);
        self.journal
            .get(&key)?
            .map(|raw| decode(&key, &raw))
            .transpose()
    }

    /// The first decision on (agent, cycle) wins; a later one gets the winner back.
    pub fn record_decision(
        &self,
        agent: &str,
        cycle: u64,
        record: &DecisionRecord,
    ) -> Result<Result<(), DecisionRecord>, StoreError> {
        self.record_decision_fenced(agent, cycle, record, None)
    }

    /// `record_decision`, landing only while the agent's lease carries `fence` (none: as
    /// `record_decision`); a stale owner's decision fails with `LeaseLost` and writes nothing.
    pub fn record_decision_fenced(
        &self,
        agent: &str,
        cycle: u64,
        record: &DecisionRecord,
        fence: Option<Fence>,
    ) -> Result<Result<(), DecisionRecord>, StoreError> {
        let key = cycle_key(agent, cycle);
        let winner = |current: Option<kv::Bytes>| -> Result<DecisionRecord, StoreError> {
            let existing = current
                .ok_or_else(|| StoreError::Corrupt("decision vanished during CAS".into()))?;
            decode(&key, &existing)
        };
        let Some(fence) = fence else {
            return match self.decisions.compare_and_swap(
                &key,
                None as Option<&[u8]>,
                Some(encode(record)?),
            )? {
                Ok(()) => Ok(Ok(())),
                Err(conflict) => Ok(Err(winner(conflict.current)?)),
            };
        };
        let mut batch = kv::Batch::default();
        batch.expect(&self.decisions, key.clone(), None);
        batch.put(&self.decisions, key.clone(), encode(record)?);
        let guard = self.lease_guard(agent, fence);
        match self.db.write_batch_checked(&batch, Some(&guard))? {
            kv::Checked::Landed => Ok(Ok(())),
            kv::Checked::Differs { current, .. } => Ok(Err(winner(current)?)),
            kv::Checked::FenceMoved => Err(StoreError::LeaseLost {
                agent: agent.to_owned(),
            }),
        }
    }

    /// Who decided (agent, cycle), if anyone: the decision's record while the cycle is open, then
    /// the cycle's episode, which keeps it (`decided_by`) once the cycle has closed and its
    /// record is gone (see `commit`).
    pub fn decided_by(
        &self,
        agent: &str,
        cycle: u64,
    ) -> Result<Option<crate::core::person::ActedBy>, StoreError> {
        let key = cycle_key(agent, cycle);
        if let Some(raw) = self.decisions.get(&key)? {
            return Ok(Some(decode::<DecisionRecord>(&key, &raw)?.by));
        }
        // Every click on a closed card asks, and a recent cycle's step is under a key of its own:
        // one lookup, without the lock and the range `steps_in` takes for a folded one.
        if let Some(raw) = self.episodes.get(&key)? {
            return Ok(decode::<Episode>(&key, &raw)?.decided_by);
        }
        let folded = self.steps_in::<Episode>(agent, cycle, cycle)?;
        Ok(folded.into_iter().next().and_then(|step| step.decided_by))
    }

    /// Forgets the decision for a cycle, so an interrupted command can be decided again.
    pub fn clear_decision(&self, agent: &str, cycle: u64) -> Result<(), StoreError> {
        self.clear_decision_fenced(agent, cycle, None)
    }

    /// `clear_decision`, landing only while the agent's lease carries `fence` (none: as
    /// `clear_decision`).
    pub fn clear_decision_fenced(
        &self,
        agent: &str,
        cycle: u64,
        fence: Option<Fence>,
    ) -> Result<(), StoreError> {
        match fence {
            None => {
                self.decisions.remove(cycle_key(agent, cycle))?;
                Ok(())
            }
            Some(fence) => {
                let mut writes = Writes::default();
                writes.remove(TreeId::Decisions, cycle_key(agent, cycle));
                self.write_together_fenced(&writes, agent, Some(fence))
            }
        }
    }

    /// The agent with its newest steps whole and the older ones as Progress lines, bounded
    /// however long it has run: read newest first, so older steps are only counted.
    pub fn load_agent(&self, id: &str) -> Result<Option<AgentState>, StoreError> {
        let Some(raw) = self.agents.get(id.as_bytes())? else {
            return Ok(None);
        };
        let Some(mut state) = self.decode_agent(id.as_bytes(), &raw)? else {
            return Ok(None);
        };
        self.load_steps(&mut state)?;
        Ok(Some(state))
    }

    /// Removes an agent for good: its record, steps, decisions, journal, workspace, sub-agents
    /// and audit trail, and where it lived in Discord. Its spend stays in the ledger, where the
    /// owner's and the server's budgets count it. Memories are the memory service's to remove.
    pub fn delete_agent(&self, agent: &str) -> Result<(), StoreError> {
        let binding = self.binding(agent)?;
        let prefix = agent_prefix(agent);
        for tree in [
            &self.episodes,
            &self.episode_chunks,
            &self.decisions,
            &self.journal,
            &self.workspace,
            &self.uploads,
            &self.subagents,
            &self.audit,
            &self.audit_chunks,
        ] {
            for key in tree.scan_prefix(&prefix).keys() {
                tree.remove(key?)?;
            }
        }
        self.remove_undo(agent)?;
        self.workspace_sizes().sizes.remove(agent);
        if let Some(binding) = binding {
            self.forget_binding(&binding)?;
        }
        self.agents.remove(agent.as_bytes())?;
        self.agent_briefs.remove(agent.as_bytes())?;
        self.durable.flush_blocking()?;
        Ok(())
    }

    /// The agent's record without its episodes: cheap, for checks on every click.
    pub fn load_agent_record(&self, id: &str) -> Result<Option<AgentState>, StoreError> {
        self.agents
            .get(id.as_bytes())?
            .map_or(Ok(None), |raw| self.decode_agent(id.as_bytes(), &raw))
    }

    pub fn list_agents(&self) -> Result<Vec<AgentSummary>, StoreError> {
        let mut list = Vec::new();
        for item in self.agents.iter() {
            let (key, raw) = item?;
            let Some(state) = self.decode_agent(&key, &raw)? else {
                continue;
            };
            list.push(AgentSummary {
                name: state.name().to_string(),
                phase: state.progress.phase.label().to_string(),
                cycle: state.progress.cycle,
                task: state.brief.task.clone(),
                updated_at: state.updated_at,
                id: state.id,
            });
        }
        list.sort_by_key(|a| std::cmp::Reverse(a.updated_at));
        Ok(list)
    }

    /// Accepts a full id or a unique prefix of one, as users type them.
    pub fn resolve_agent(&self, prefix: &str) -> Result<String, StoreError> {
        let mut matches = self
            .agents
            .scan_prefix(prefix.as_bytes())
            .keys()
            .collect::<Result<Vec<_>, _>>()?;
        match matches.len() {
            0 => Err(StoreError::UnknownAgent(prefix.to_string())),
            1 => Ok(String::from_utf8_lossy(&matches.remove(0)).into_owned()),
            _ => {
                if matches.iter().any(|k| k.as_ref() == prefix.as_bytes()) {
                    Ok(prefix.to_string())
                } else {
                    Err(StoreError::AmbiguousAgent(prefix.to_string()))
                }
            }
        }
    }

    /// Hands out the next sub-agent key of an agent ("1", "2", …); keys are never reused, so a
    /// message for a deleted sub-agent cannot reach a new one.
    pub fn next_subagent_key(&self, agent: &str) -> Result<String, StoreError> {
        let next = self
            .subagents
            .update_and_fetch(subagent_counter(agent), |old| {
                let n = old
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map_or(0, u64::from_be_bytes);
                Some((n + 1).to_be_bytes().to_vec())
            })?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(1, u64::from_be_bytes);
        Ok(next.to_string())
    }

    pub fn save_subagent(&self, agent: &str, record: &SubAgentRecord) -> Result<(), StoreError> {
        self.subagents
            .insert(subagent_key(agent, &record.key), encode(record)?)?;
        Ok(())
    }

    pub fn subagent(&self, agent: &str, key: &str) -> Result<Option<SubAgentRecord>, StoreError> {
        let id = subagent_key(agent, key);
        self.subagents
            .get(&id)?
            .map(|raw| decode(&id, &raw))
            .transpose()
    }

    /// An agent's sub-agents, oldest first.
    pub fn subagents(&self, agent: &str) -> Result<Vec<SubAgentRecord>, StoreError> {
        let mut list: Vec<SubAgentRecord> = Vec::new();
        for item in self.subagents.scan_prefix(format!("{agent}/agent/")) {
            let (key, raw) = item?;
            list.push(decode(&key, &raw)?);
        }
        list.sort_by_key(|r| r.key.parse::<u64>().unwrap_or(u64::MAX));
        Ok(list)
    }

    /// Removes a sub-agent; `false` when there was none under that key.
    pub fn delete_subagent(&self, agent: &str, key: &str) -> Result<bool, StoreError> {
        Ok(self.subagents.remove(subagent_key(agent, key))?.is_some())
    }
}

#[cfg(test)]
mod store_tests;
