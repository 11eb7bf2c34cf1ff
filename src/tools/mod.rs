//! Commands the agent can run: the `Command` trait (`spec`, `run`), the registry that builds the
//! agent's command set from config, and one file per family (files, memory, web, repositories,
//! images, code execution, agents, control).
//!
//! `Registry::standard` collects the families that need nothing but config, minus
//! `agent.disabled_commands` (`finish` is always kept); `for_config` also leaves out the commands
//! of a service that is off (memory, web, repositories, sub-agents). Commands that need a service
//! built at start-up are added by the `App` through `with_commands`: code execution once the
//! sandbox's probe passed, `generate_image` when an images model is configured, and the MCP
//! servers' tools.
//!
//! A command sees only `ToolCtx`, a set of narrow views: the agent's `AgentView`, the clock's
//! `now`, the `Payer`, its workspace read-only (`AgentFiles`), its sub-agents (`SubAgents`),
//! `AskUser` (the seam to a person), the limits, and when they are on the memory, the metered model
//! (`ToolModel`) and the web. It never names the runtime, which implements these traits. It returns
//! a `ToolOutput`: the outcome and the workspace changes as `WorkspaceOp`s, which the actor commits
//! with the step; a command never writes files itself.

pub mod agents;
pub mod control;
#[cfg(target_os = "linux")]
pub mod execute;
pub mod files;
pub mod images;
pub mod memory;
pub mod preview;
pub mod repository;
pub mod web;
pub mod workspace;

use std::sync::Arc;

use async_trait::async_trait;

use crate::budget::Payer;
use crate::config::{AgentConfig, SubagentConfig, WorkspaceConfig};
use crate::core::commands::{CommandSet, CommandSpec, FINISH};
use crate::core::history::Outcome;
use crate::core::reply::CommandCall;
use crate::core::state::AgentView;
/// A workspace change a command asks for, named here for commands outside this module.
pub use crate::store::WorkspaceOp;
use crate::store::{Store, StoreError, SubAgentRecord};

/// What a command may use while it runs: views of its own agent only, never the whole store,
/// config or surface, and nothing of the agent's history.
pub struct ToolCtx<'a> {
    /// Which agent runs the command, at which cycle.
    pub agent: &'a AgentView,
    /// When the command started, read from the runtime's clock.
    pub now: chrono::DateTime<chrono::Utc>,
    /// Who pays for what the command spends (embeddings, model calls).
    pub payer: &'a Payer,
    /// The agent's files as committed so far; commands change them only through `WorkspaceOp`s.
    pub workspace: AgentFiles<'a>,
    /// The agent's sub-agents.
    pub subagents: SubAgents<'a>,
    /// The humans, for `ask_user`.
    pub ask_user: &'a dyn AskUser,
    pub limits: &'a WorkspaceConfig,
    pub subagent_limits: &'a SubagentConfig,
    pub memory: Option<&'a crate::memory::Memory>,
    /// The agent's model, for commands that need it (reading a page, sub-agents).
    pub model: Option<&'a dyn ToolModel>,
    /// Web search and fetching; `None` when the web commands are off.
    pub web: Option<&'a crate::web::Web>,
}

/// Why a question to the humans got no answer: the agent reads it after "The user could not be
/// asked:".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoAnswer {
    #[error("the agent has no thread")]
    NoThread,
    #[error("the question was withdrawn")]
    Withdrawn,
    #[error("nobody answered within a day")]
    TimedOut,
    #[error("no answer (end of input)")]
    EndOfInput,
    /// Where no person can be reached at all (a command run outside an agent's loop).
    #[error("no one can be asked here")]
    NobodyToAsk,
}

/// The `ask_user` seam: a question to the humans, answered in text (or why nobody can answer).
#[async_trait]
pub trait AskUser: Send + Sync {
    async fn ask(&self, question: &str) -> Result<String, NoAnswer>;
    /// Tells the humans how far a long command has come ("reading part 2 of 5"); it must return
    /// at once.
    fn progress(&self, _text: &str) {}
}

/// One agent's workspace files, read-only.
#[derive(Clone, Copy)]
pub struct AgentFiles<'a> {
    store: &'a Store,
    agent: &'a str,
}

impl<'a> AgentFiles<'a> {
    pub fn new(store: &'a Store, agent: &'a str) -> Self {
        AgentFiles { store, agent }
    }

    pub fn read(&self, path: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.store.read_file(self.agent, path)
    }

    /// One file's size in bytes, if it exists.
    pub fn size(&self, path: &str) -> Result<Option<u64>, StoreError> {
        self.store.file_size(self.agent, path)
    }

    /// The bytes all its files hold together.
    pub fn total_bytes(&self) -> Result<u64, StoreError> {
        self.store.workspace_bytes(self.agent)
    }

    /// Every file with its size in bytes.
    pub fn list(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.store.list_files(self.agent)
    }
}

/// One agent's sub-agents, as the sub-agent commands keep them.
#[derive(Clone, Copy)]
pub struct SubAgents<'a> {
    store: &'a Store,
    agent: &'a str,
}

impl<'a> SubAgents<'a> {
    pub fn new(store: &'a Store, agent: &'a str) -> Self {
        SubAgents { store, agent }
    }

    pub fn all(&self) -> Result<Vec<SubAgentRecord>, StoreError> {
        self.store.subagents(self.agent)
    }

    pub fn get(&self, key: &str) -> Result<Option<SubAgentRecord>, StoreError> {
        self.store.subagent(self.agent, key)
    }

    pub fn save(&self, record: &SubAgentRecord) -> Result<(), StoreError> {
        self.store.save_subagent(self.agent, record)
    }

    pub fn next_key(&self) -> Result<String, StoreError> {
        self.store.next_subagent_key(self.agent)
    }

    pub fn delete(&self, key: &str) -> Result<bool, StoreError> {
        self.store.delete_subagent(self.agent, key)
    }
}

/// A model reply a command asked for, with what it cost the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolReply {
    pub text: String,
    pub cost: crate::core::budget::Micros,
}

/// Why a command's model call gave no reply; the command says what it was doing around it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolModelError {
    /// No budget can pay for the call's worst case, for the reason given.
    #[error("the budget cannot pay for it: {0}")]
    Refused(String),
    #[error("the model call failed: {0}")]
    Failed(String),
}

/// The model as commands use it: metered and charged to the agent like its own calls, so a page
/// read or a sub-agent can never spend past the agent's budget.
#[async_trait]
pub trait ToolModel: Send + Sync {
    /// `what` names the call in the ledger ("read_webpage chunk 2/5").
    async fn complete(
        &self,
        what: &str,
        messages: Vec<crate::core::message::Message>,
        max_tokens: u32,
    ) -> Result<ToolReply, ToolModelError>;
    fn count(&self, messages: &[crate::core::message::Message]) -> usize;
    fn context_tokens(&self) -> u32;
}

/// A command's result plus the workspace changes it wants; the runtime commits the changes in the
/// same write as the command's episode (which lets its journal entry go), so a crash cannot leave
/// one without the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub outcome: Outcome,
    pub ops: Vec<WorkspaceOp>,
}

impl ToolOutput {
    pub fn success(text: impl Into<String>) -> Self {
        ToolOutput {
            outcome: Outcome::Success(text.into()),
            ops: Vec::new(),
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            outcome: Outcome::Error(text.into()),
            ops: Vec::new(),
        }
    }
}

#[async_trait]
pub trait Command: Send + Sync {
    fn spec(&self) -> CommandSpec;
    /// Runs a call whose name and arguments the core has already validated against `spec`.
    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput;
}

/// The enabled commands, in prompt order. An MCP server's may change while the bot runs (its list
/// of tools changed, `replace_family`): each step reads the set as it is then.
pub struct Registry {
    listed: std::sync::RwLock<Listed>,
}

/// The commands and their specs, replaced together.
#[derive(Clone)]
struct Listed {
    commands: Vec<Arc<dyn Command>>,
    set: Arc<CommandSet>,
}

impl Listed {
    fn of(commands: Vec<Arc<dyn Command>>) -> Listed {
        let set = Arc::new(CommandSet {
            specs: commands.iter().map(|c| c.spec()).collect(),
        });
        Listed { commands, set }
    }
}

impl Clone for Registry {
    fn clone(&self) -> Self {
        Registry {
            listed: std::sync::RwLock::new(self.listed().clone()),
        }
    }
}

impl Registry {
    pub fn new(commands: Vec<Arc<dyn Command>>, disabled: &[String]) -> Self {
        let commands: Vec<Arc<dyn Command>> = commands
            .into_iter()
            .filter(|c| !disabled.contains(&c.spec().name))
            .collect();
        Registry {
            listed: std::sync::RwLock::new(Listed::of(commands)),
        }
    }

    fn listed(&self) -> std::sync::RwLockReadGuard<'_, Listed> {
        // Replaced whole under the lock: a panic cannot leave it half changed.
        self.listed
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the commands whose names start with `prefix` (an MCP server's, `server.`) by
    /// `commands`, minus those the config disables, where the first of them was (at the end when
    /// there was none).
    pub fn replace_family(
        &self,
        prefix: &str,
        commands: Vec<Arc<dyn Command>>,
        disabled: &[String],
    ) {
        let mut listed = self
            .listed
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let at = listed
            .commands
            .iter()
            .position(|c| c.spec().name.starts_with(prefix))
            .unwrap_or(listed.commands.len());
        let mut kept: Vec<Arc<dyn Command>> = listed
            .commands
            .iter()
            .filter(|c| !c.spec().name.starts_with(prefix))
            .cloned()
            .collect();
        let fresh = commands
            .into_iter()
            .filter(|c| !disabled.contains(&c.spec().name));
        let at = at.min(kept.len());
        kept.splice(at..at, fresh);
        *listed = Listed::of(kept);
    }

    /// The standard commands, minus those the config disables. `finish` is always kept: without it
    /// an agent could never end.
    pub fn standard(config: &AgentConfig) -> Self {
        let disabled: Vec<String> = config
            .disabled_commands
            .iter()
            .filter(|name| name.as_str() != FINISH)
            .cloned()
            .collect();
        let mut commands: Vec<Arc<dyn Command>> = files::commands();
        commands.extend(memory::commands());
        commands.extend(web::commands());
        commands.extend(repository::commands());
        commands.extend(agents::commands());
        commands.extend(control::commands());
        Registry::new(commands, &disabled)
    }

    /// The standard commands for this configuration: `memory_add` only when memory is on.
    pub fn for_config(config: &crate::config::Config) -> Self {
        let mut agent = config.agent.clone();
        if !config.memory.enabled {
            agent.disabled_commands.push("memory_add".into());
        }
        if !config.web.enabled {
            agent.disabled_commands.extend(web::NAMES.map(String::from));
        }
        if !config.web.enabled || !config.web.clone_repositories {
            agent.disabled_commands.push(repository::NAME.into());
        }
        if !config.subagents.enabled {
            agent
                .disabled_commands
                .extend(agents::NAMES.map(String::from));
        }
        Registry::standard(&agent)
    }

    /// This registry with `more` commands, minus those of them the config disables (the ones
    /// already here were filtered when it was made; `finish` among them stays).
    pub fn with_commands(self, more: Vec<Arc<dyn Command>>, disabled: &[String]) -> Self {
        let mut commands = self.listed().commands.clone();
        commands.extend(
            more.into_iter()
                .filter(|c| !disabled.contains(&c.spec().name)),
        );
        Registry::new(commands, &[])
    }

    /// The commands as they are now.
    pub fn command_set(&self) -> Arc<CommandSet> {
        self.listed().set.clone()
    }

    pub async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let command = self
            .listed()
            .commands
            .iter()
            .find(|c| c.spec().name == call.name)
            .cloned();
        match command {
            Some(command) => command.run(call, ctx).await,
            None => ToolOutput::error(format!("Unknown command '{}'.", call.name)),
        }
    }
}

/// A string argument the core has validated as present.
pub(crate) fn str_arg<'a>(call: &'a CommandCall, name: &str) -> &'a str {
    call.args.get(name).and_then(|v| v.as_str()).unwrap_or("")
}
