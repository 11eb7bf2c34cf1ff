//! The running instances of one MCP server, by whom each serves (`InstanceKey`): started on first
//! use, stopped after `idle_secs` without a call, at most `max_instances` at once.
//!
//! A call takes a `Lease` on its instance for as long as it runs; the lease counts the calls in
//! flight, so that an instance is stopped only when none is. When every place is taken, the
//! instance idle the longest is stopped for the new one; when none is idle, the call fails at once
//! with the reason (`AllBusy`) rather than waiting. A reaper task, started with the first
//! instance and ended with the server, stops instances idle too long; the one instance of a `bot`
//! server is never stopped for being idle, as before instances had scopes.
//!
//! A separate process is not separate state when the program keeps its state in a file (the memory
//! server's graph is read from its file at every call), so each instance has its own directory:
//! the program starts in it, and `{instance_dir}` in its `args` and `env` values names it
//! (`MEMORY_FILE_PATH = "{instance_dir}/memory.jsonl"`). The directories are under
//! `<data_dir>/mcp/<server>/` for the bot, so that a place's state outlives a restart, and under a
//! temporary directory removed with the server otherwise (`autothread check`, tests). An agent's own
//! instance and its directory go when the agent is deleted (`forget`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::config::McpScope;
use crate::core::state::{Home, Spender};

use super::Live;

/// Whom one instance of a server serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InstanceKey {
    /// Every agent of a `bot` server; for a scoped server, the instance its tools are listed from
    /// at start-up (which no agent's call reaches).
    Shared,
    /// The agents started in one place (a Discord server, the console, the Agent Protocol).
    Place(Home),
    /// One agent, by id.
    Agent(String),
}

impl InstanceKey {
    /// The instance's directory's name: only letters, digits, '-' and '_', and distinct for
    /// distinct keys (a name that would need changing is replaced by its digest).
    fn directory_name(&self) -> String {
        let (kind, id) = match self {
            InstanceKey::Shared => return "shared".into(),
            InstanceKey::Place(Home::Console) => return "console".into(),
            InstanceKey::Place(Home::Api) => return "api".into(),
            InstanceKey::Place(Home::Guild(guild)) => ("server", guild.as_str()),
            InstanceKey::Agent(agent) => ("agent", agent.as_str()),
        };
        let plain = !id.is_empty()
            && id.len() <= 64
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if plain {
            format!("{kind}-{id}")
        } else {
            let digest = crate::core::digest::sha256_tagged(id.as_bytes());
            let hex: String = digest.chars().filter(char::is_ascii_alphanumeric).collect();
            format!("{kind}-h{hex}")
        }
    }

    /// The instance an agent's call goes to under `scope`.
    pub fn of(scope: McpScope, agent: &str, spender: &Spender) -> InstanceKey {
        match scope {
            McpScope::Bot => InstanceKey::Shared,
            McpScope::Server => InstanceKey::Place(spender.home()),
            McpScope::Agent => InstanceKey::Agent(agent.to_string()),
        }
    }
}

/// One running (or not yet started) instance: its connection and its program, and the directory
/// its program starts in.
pub(super) struct Instance {
    pub(super) live: tokio::sync::Mutex<Live>,
    pub(super) dir: PathBuf,
}

struct Slot {
    instance: Arc<Instance>,
    in_flight: usize,
    last_used: Instant,
}

/// Why no instance could be had for a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoInstance {
    #[error("the MCP server '{server}' already runs {running} instances (its max_instances), each busy with a call; try again when one ends")]
    AllBusy { server: String, running: usize },
}

/// Where the instances' directories are.
pub enum StateRoot {
    /// Kept: `<dir>/<server>/<instance>` (the bot passes `<data_dir>/mcp`).
    Kept(PathBuf),
    /// A directory of its own under the system's temporary one, removed with the server.
    Temporary,
}

/// The instances of one server.
pub(super) struct Instances {
    server: String,
    /// The directory holding each instance's own.
    root: PathBuf,
    /// Whether `root` is removed with the instances.
    temporary: bool,
    scope: McpScope,
    max: usize,
    idle: Duration,
    slots: std::sync::Mutex<HashMap<InstanceKey, Slot>>,
    reaper: std::sync::Once,
}

/// A call's hold on its instance: while it lives the instance is not stopped for being idle or
/// for another's place.
pub(super) struct Lease {
    instances: Arc<Instances>,
    key: InstanceKey,
    pub(super) instance: Arc<Instance>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut slots = self.instances.lock();
        if let Some(slot) = slots.get_mut(&self.key) {
            if Arc::ptr_eq(&slot.instance, &self.instance) {
                slot.in_flight = slot.in_flight.saturating_sub(1);
                slot.last_used = Instant::now();
            }
        }
    }
}

impl Instances {
    pub(super) fn new(
        server: &str,
        scope: McpScope,
        max: usize,
        idle: Duration,
        state: StateRoot,
    ) -> Instances {
        // A counter besides the process id: one process may hold the same server twice (tests).
        static MADE: AtomicU64 = AtomicU64::new(0);
        let (root, temporary) = match state {
            StateRoot::Kept(dir) => (dir.join(server), false),
            StateRoot::Temporary => (
                std::env::temp_dir().join(format!(
                    "autothread-mcp-{}-{}-{server}",
                    std::process::id(),
                    MADE.fetch_add(1, Ordering::Relaxed)
                )),
                true,
            ),
        };
        Instances {
            server: server.to_string(),
            root,
            temporary,
            scope,
            max: max.max(1),
            idle,
            slots: std::sync::Mutex::new(HashMap::new()),
            reaper: std::sync::Once::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceKey, Slot>> {
        // A panic while the lock was held leaves the counts as they were: taken as left.
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether the instance for `key` is stopped when idle: all but a `bot` server's one.
    fn stops_when_idle(&self, key: &InstanceKey) -> bool {
        !(self.scope == McpScope::Bot && *key == InstanceKey::Shared)
    }

    /// How many instances there are (started or starting).
    pub(super) fn count(&self) -> usize {
        self.lock().len()
    }

    /// A lease on the instance for `key`, made when there is none; the instance idle longest is
    /// stopped first when every place is taken.
    pub(super) async fn lease(self: &Arc<Self>, key: InstanceKey) -> Result<Lease, NoInstance> {
        self.start_reaper();
        let (instance, evicted) = {
            let mut slots = self.lock();
            let mut evicted = None;
            if !slots.contains_key(&key) && slots.len() >= self.max {
                let idlest = slots
                    .iter()
                    .filter(|(_, slot)| slot.in_flight == 0)
                    .min_by_key(|(_, slot)| slot.last_used)
                    .map(|(key, _)| key.clone());
                let Some(idlest) = idlest else {
                    return Err(NoInstance::AllBusy {
                        server: self.server.clone(),
                        running: slots.len(),
                    });
                };
                evicted = slots.remove(&idlest).map(|slot| slot.instance);
            }
            let dir = self.root.join(key.directory_name());
            let slot = slots.entry(key.clone()).or_insert_with(|| Slot {
                instance: Arc::new(Instance {
                    live: tokio::sync::Mutex::default(),
                    dir,
                }),
                in_flight: 0,
                last_used: Instant::now(),
            });
            slot.in_flight += 1;
            (slot.instance.clone(), evicted)
        };
        if let Some(evicted) = evicted {
            tracing::info!(server = %self.server, "stopping the MCP server's instance idle the longest, to make room for another");
            evicted.live.lock().await.end().await;
        }
        Ok(Lease {
            instances: self.clone(),
            key,
            instance,
        })
    }

    /// Ends the instance for `key`, if it runs, and removes its directory, whether it ran or not
    /// (a kept directory outlives the bot's restarts): whom it served is gone for good.
    pub(super) async fn forget(&self, key: &InstanceKey) -> std::io::Result<()> {
        let slot = self.lock().remove(key);
        if let Some(slot) = slot {
            slot.instance.live.lock().await.end().await;
        }
        match std::fs::remove_dir_all(self.root.join(key.directory_name())) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            removed => removed,
        }
    }

    /// Starts the task that stops idle instances, once; it ends when the instances are dropped.
    fn start_reaper(self: &Arc<Self>) {
        self.reaper.call_once(|| {
            let instances = Arc::downgrade(self);
            let tick = (self.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
            tokio::spawn(reap(instances, tick));
        });
    }

    /// Removes the instances idle for longer than the idle time, to be ended by the caller.
    fn take_idle(&self) -> Vec<Arc<Instance>> {
        let mut slots = self.lock();
        let idle: Vec<InstanceKey> = slots
            .iter()
            .filter(|(key, slot)| {
                slot.in_flight == 0
                    && self.stops_when_idle(key)
                    && slot.last_used.elapsed() >= self.idle
            })
            .map(|(key, _)| key.clone())
            .collect();
        idle.iter()
            .filter_map(|key| slots.remove(key).map(|slot| slot.instance))
            .collect()
    }
}

impl Drop for Instances {
    fn drop(&mut self) {
        if self.temporary {
            // The programs go first (each instance's group is killed as it drops), then their files.
            self.lock().clear();
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// `dir`, made if missing, readable by the bot's user only (a place's state is its own).
pub(super) fn made(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Every `tick`, ends the instances idle too long, while the server lives.
async fn reap(instances: Weak<Instances>, tick: Duration) {
    loop {
        tokio::time::sleep(tick).await;
        let Some(instances) = instances.upgrade() else {
            return;
        };
        for instance in instances.take_idle() {
            tracing::debug!(server = %instances.server, "stopping an idle instance of the MCP server");
            instance.live.lock().await.end().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::GuildId;

    #[test]
    fn each_scope_keys_its_instances_by_whom_they_serve() {
        let guild = |id: u64| Spender {
            user: Some("7".into()),
            guild: Some(GuildId::from(id)),
        };
        let console = Spender {
            user: Some("console".into()),
            guild: None,
        };
        let api = Spender {
            user: Some(format!("{}ci", crate::core::state::API_SPENDER_PREFIX)),
            guild: None,
        };
        assert_eq!(
            InstanceKey::of(McpScope::Bot, "a", &guild(1)),
            InstanceKey::of(McpScope::Bot, "b", &console)
        );
        assert_eq!(
            InstanceKey::of(McpScope::Server, "a", &guild(1)),
            InstanceKey::of(McpScope::Server, "b", &guild(1))
        );
        assert_ne!(
            InstanceKey::of(McpScope::Server, "a", &guild(1)),
            InstanceKey::of(McpScope::Server, "a", &guild(2))
        );
        assert_eq!(
            InstanceKey::of(McpScope::Server, "a", &console),
            InstanceKey::Place(Home::Console)
        );
        assert_eq!(
            InstanceKey::of(McpScope::Server, "a", &api),
            InstanceKey::Place(Home::Api)
        );
        assert_ne!(
            InstanceKey::of(McpScope::Agent, "a", &guild(1)),
            InstanceKey::of(McpScope::Agent, "b", &guild(1))
        );
        // Directories: one per key, and a hostile id names no other place.
        assert_eq!(
            InstanceKey::of(McpScope::Server, "a", &guild(42)).directory_name(),
            "server-42"
        );
        let odd = InstanceKey::Agent("../../etc".into()).directory_name();
        assert!(odd.starts_with("agent-h") && !odd.contains('.'), "{odd}");
        assert_ne!(odd, InstanceKey::Agent("../../etd".into()).directory_name());
    }

    #[tokio::test]
    async fn a_full_set_stops_its_idlest_instance_and_refuses_when_all_are_busy() {
        let instances = Arc::new(Instances::new(
            "notes",
            McpScope::Agent,
            2,
            Duration::from_secs(600),
            StateRoot::Temporary,
        ));
        let agent = |id: &str| InstanceKey::Agent(id.into());
        drop(instances.lease(agent("a")).await.unwrap());
        let b = instances.lease(agent("b")).await.unwrap();
        // "a" is idle: it makes room for "c".
        let c = instances.lease(agent("c")).await.unwrap();
        assert_eq!(instances.count(), 2);
        assert!(!instances.lock().contains_key(&agent("a")));
        // "b" and "c" are both in a call: "d" is refused at once, in words.
        let refused = instances.lease(agent("d")).await.err().unwrap();
        assert!(
            refused.to_string().contains("already runs 2 instances"),
            "{refused}"
        );
        drop((b, c));
        assert!(instances.lease(agent("d")).await.is_ok());
    }
}
