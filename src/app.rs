//! The composition root (`App`): builds config → store → model clients → budgets → memory → web →
//! tools → the runtime's services once, for every entry point (`run`, `console`, and the inspection
//! commands).
//!
//! `open` and `build` make it (`build_for_model` with a given model's tokenizer); `deps(surface)`
//! gives the runtime its `Deps`, the surface last because Discord's exists only once the gateway is
//! up (`deps_on` also names the runtime the actors run on); `agents()` gives the `AgentService`.
//! `settle_crashed_calls` settles the reservations a crash left open before any agent runs.
//! `connect_mcp`, called by `run` and `console` after the build, adds the MCP servers' tools to the
//! registry. The `App` names no surface; a surface names the `App`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;

use crate::budget::ledger::Ledger;
use crate::budget::Budgets;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::core::budget::{format_usd, Micros};
use crate::llm::openai::OpenAiChat;
use crate::llm::tokens::TiktokenCounter;
use crate::llm::ChatModel;
use crate::memory::Memory;
use crate::runtime::Surface;
use crate::runtime::{Deps, Drain};
use crate::service::AgentService;
use crate::store::{Store, StoreError};
use crate::tools::Registry;
use crate::web::Web;

/// Everything an entry point needs, built once and in one order. Surfaces are added last
/// (`deps`), because the Discord surface only exists once the gateway is connected.
#[derive(Clone)]
pub struct App {
    pub config: Arc<Config>,
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    pub counter: Arc<TiktokenCounter>,
    pub model: Arc<dyn ChatModel>,
    pub budgets: Arc<Budgets>,
    pub memory: Option<Arc<Memory>>,
    pub web: Option<Arc<Web>>,
    pub tools: Arc<Registry>,
    /// The MCP servers `connect_mcp` opened (none before it).
    pub mcp: Vec<Arc<crate::mcp::McpServer>>,
    /// Raised on a graceful shutdown; every actor built from `deps` watches it.
    pub drain: Drain,
}

impl App {
    /// Opens the store named by the config (running its migrations) and builds the services.
    pub fn open(config: Config) -> anyhow::Result<App> {
        let store = open_store(&config)?;
        App::build(config, store, Arc::new(SystemClock))
    }

    /// Builds the services over an open store, counting tokens with the configured model's
    /// tokenizer.
    pub fn build(config: Config, store: Store, clock: Arc<dyn Clock>) -> anyhow::Result<App> {
        let model_name = config.llm.model.clone();
        App::build_for_model(config, store, clock, &model_name)
    }

    /// As `build`, counting tokens with `counter_model`'s tokenizer (the console counts with a
    /// resumed agent's own model).
    pub fn build_for_model(
        config: Config,
        store: Store,
        clock: Arc<dyn Clock>,
        counter_model: &str,
    ) -> anyhow::Result<App> {
        let config = Arc::new(config);
        let counter = Arc::new(TiktokenCounter::for_model(counter_model));
        let model: Arc<dyn ChatModel> = Arc::new(OpenAiChat::new(&config.llm)?);
        let budgets = Arc::new(Budgets::new(&store, &config.budget)?);
        let memory = Memory::from_config(
            &store,
            &config,
            budgets.clone(),
            counter.clone(),
            clock.clone(),
        )?;
        let web = Web::for_config(&config)?;
        let tools = with_code_execution(Registry::for_config(&config), &config);
        let tools = Arc::new(with_image_generation(tools, &config, &budgets)?);
        Ok(App {
            config,
            store,
            clock,
            counter,
            model,
            budgets,
            memory,
            web,
            tools,
            mcp: Vec::new(),
            drain: Drain::default(),
        })
    }

    /// Starts the configured MCP servers and adds their tools to the commands (those the config
    /// disables left out). A server that cannot start is logged and left out; the bot runs on.
    pub async fn connect_mcp(&mut self) {
        if self.config.mcp.servers.is_empty() {
            return;
        }
        let connected = crate::mcp::connect_all(&self.config).await;
        let disabled = &self.config.agent.disabled_commands;
        let tools = (*self.tools)
            .clone()
            .with_commands(connected.commands, disabled);
        self.tools = Arc::new(tools);
        // A server whose list of tools changes has its commands replaced, for the next step.
        for server in &connected.servers {
            let registry = Arc::downgrade(&self.tools);
            let prefix = format!("{}.", server.name());
            let disabled = disabled.clone();
            server.on_tools_changed(Arc::new(
                move |commands: Vec<Arc<dyn crate::tools::Command>>| {
                    if let Some(registry) = registry.upgrade() {
                        registry.replace_family(&prefix, commands, &disabled);
                    }
                },
            ));
        }
        self.mcp = connected.servers;
    }

    /// Ends agent `agent`'s own MCP server instances and removes their directories, for an agent
    /// being deleted; the first failure to remove one is returned, after every server was tried.
    pub async fn forget_agent_mcp(&self, agent: &str) -> std::io::Result<()> {
        let mut failed = Ok(());
        for server in &self.mcp {
            if let Err(why) = server.forget_agent(agent).await {
                tracing::warn!(
                    server = server.name(),
                    "an agent's MCP instance directory could not be removed: {why}"
                );
                if failed.is_ok() {
                    failed = Err(why);
                }
            }
        }
        failed
    }

    /// One line per subsystem at start-up, so a healthy start is visible in the log. URLs are
    /// shown without their query, where a provider's parameters (or a misplaced key) could be.
    pub fn log_startup(&self) {
        let config = &self.config;
        let agents = self.store.list_agents().map(|a| a.len()).unwrap_or(0);
        tracing::info!(
            "store: {} ({agents} agents)",
            config.store.data_dir.as_deref().map_or_else(
                || "the platform data directory".to_string(),
                |d| d.display().to_string()
            )
        );
        tracing::info!(
            "model endpoint: {} (model {}, {}, key {})",
            without_query(&config.llm.base_url),
            config.llm.model,
            config.llm.response_format.label(),
            if config.llm.api_key.is_some() {
                "set"
            } else {
                "not set"
            }
        );
        match &self.memory {
            Some(_) => tracing::info!(
                "memory: on (embeddings at {}, model {})",
                without_query(
                    config
                        .memory
                        .base_url
                        .as_deref()
                        .unwrap_or(&config.llm.base_url)
                ),
                config.memory.passage_model
            ),
            None => tracing::info!("memory: off (memory.enabled = false)"),
        }
        match &self.web {
            Some(_) => tracing::info!("web: on (search through {:?})", config.web.search_backend),
            None => tracing::info!("web: off (web.enabled = false)"),
        }
        tracing::info!(
            "discord: {}{}",
            config
                .discord
                .api_base
                .as_deref()
                .map_or("discord.com".to_string(), without_query),
            config
                .discord
                .dev_guild
                .map(|g| format!(", commands in guild {g}"))
                .unwrap_or_default()
        );
        tracing::info!("discord: {}", config.discord.message_content().limits());
    }

    /// Reservations left open by a crash are charged at their worst case before any agent runs,
    /// so a call that may have been billed is never forgotten. Returns what it says about them.
    /// On a store other processes share, a reservation whose agent's lease is held belongs to a
    /// call under way there: it is left to them (or to whoever takes the agent over).
    pub fn settle_crashed_calls(&self) -> anyhow::Result<Option<String>> {
        let now = self.clock.now();
        let run_elsewhere = |agent: &str| {
            self.store.lease(agent).map_or(true, |lease| {
                lease.is_some_and(|lease| lease.expires_at > now)
            })
        };
        let settled = Ledger::new(&self.store)?
            .settle_unsettled_where(|reservation| !run_elsewhere(&reservation.agent))?;
        if settled.is_empty() {
            return Ok(None);
        }
        let total: Micros = settled.iter().map(|r| r.amount).sum();
        self.store.flush_blocking()?;
        Ok(Some(format!(
            "Settled {} model call(s) interrupted by a crash at their worst case ({}).",
            settled.len(),
            format_usd(total)
        )))
    }

    /// The runtime's services with the surface that shows this entry point's agents.
    pub fn deps(&self, surface: Arc<dyn Surface>) -> Deps {
        self.deps_on(surface, tokio::runtime::Handle::current())
    }

    /// As `deps`, with the actors on `runtime` (the Discord bot calls this from its gateway's
    /// runtime and keeps the agents on the main one).
    pub fn deps_on(&self, surface: Arc<dyn Surface>, runtime: tokio::runtime::Handle) -> Deps {
        // The tokenizer's tables load lazily; loading them here keeps the first cycle's latency
        // out of a click's path.
        self.counter.warm_up();
        Deps {
            store: self.store.clone(),
            model: self.model.clone(),
            tools: self.tools.clone(),
            surface,
            config: self.config.clone(),
            counter: self.counter.clone(),
            clock: self.clock.clone(),
            budgets: self.budgets.clone(),
            memory: self.memory.clone(),
            web: self.web.clone(),
            drain: self.drain.clone(),
            runtime,
        }
    }

    /// The rules both surfaces apply (caps, who may change which budget, policy narrowing).
    pub fn agents(&self) -> AgentService {
        AgentService::new(
            self.config.clone(),
            self.store.clone(),
            self.budgets.clone(),
            self.clock.clone(),
        )
    }
}

/// The registry with the code execution commands when the config offers them and the kernel
/// sandbox works here; otherwise as it was, with the reason in the log.
#[cfg(target_os = "linux")]
fn with_code_execution(tools: Registry, config: &Config) -> Registry {
    if !config.sandbox.enabled {
        return tools;
    }
    match crate::sandbox::Sandbox::probe_once(&config.sandbox) {
        Ok(sandbox) => {
            tracing::info!("code execution: on ({})", sandbox.describe());
            for missing in sandbox.missing() {
                tracing::warn!("code execution: {missing}");
            }
            tools.with_commands(
                crate::tools::execute::commands(sandbox, config.sandbox.shell),
                &config.agent.disabled_commands,
            )
        }
        Err(why) => {
            tracing::warn!("code execution: off, because {why}");
            tools
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn with_code_execution(tools: Registry, config: &Config) -> Registry {
    if config.sandbox.enabled {
        tracing::warn!("code execution: off, because its sandbox needs Linux");
    }
    tools
}

/// The registry with `generate_image` when the config names an images model.
fn with_image_generation(
    tools: Registry,
    config: &Config,
    budgets: &Arc<Budgets>,
) -> anyhow::Result<Registry> {
    let Some(images) = crate::llm::images::OpenAiImages::from_config(&config.llm, &config.images)?
    else {
        return Ok(tools);
    };
    let command =
        crate::tools::images::GenerateImage::new(Arc::new(images), budgets.clone(), &config.images);
    Ok(tools.with_commands(vec![Arc::new(command)], &config.agent.disabled_commands))
}

/// Opens the store, running its migrations: in PostgreSQL when `store.url` names a database,
/// else in sled in the configured data directory.
pub fn open_store(config: &Config) -> anyhow::Result<Store> {
    let dir = config.data_dir()?;
    open_configured_store(config, &dir).with_context(|| match &config.store.url {
        // Never the URL itself, which holds a password.
        Some(_) => "cannot open the store in the PostgreSQL database of store.url".to_string(),
        None => format!("cannot open the store in {}", dir.display()),
    })
}

/// `open_store`'s store, with the store's own error (a sled store in use by another process is
/// `StoreError::Locked`).
pub fn open_configured_store(config: &Config, dir: &Path) -> Result<Store, StoreError> {
    match &config.store.url {
        Some(url) => Store::open_postgres(url.expose(), dir),
        None => Store::open_with_cache(dir, config.store.cache_bytes()),
    }
}

pub use crate::config::without_query;
