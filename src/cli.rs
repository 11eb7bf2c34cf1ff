//! The command line: `console` (AutoGPT's CLI), `list`, `export`, `migrate` and `check`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};

use crate::app::{open_store, App};
use crate::clock::SystemClock;
use crate::config::{process_env, Config};
use crate::core::budget::{format_usd, usd_to_micros, Micros};
use crate::core::commands::Risk;
use crate::core::event::Event;
use crate::core::history::truncate_chars;
use crate::core::policy::ClassAction;
use crate::core::state::{AgentState, PauseReason, Phase, Profile, Spender};
use crate::runtime;
use crate::service::{AgentService, NewAgent};
use crate::store::Store;
use crate::surface::console::{visible_controls, ConsoleSurface};

/// Who pays for console agents: the terminal's user, whose daily budget applies to them all.
const CONSOLE_USER: &str = "console";

#[derive(Debug, Parser)]
#[command(
    name = "autothread",
    version,
    about = "AutoGPT-style autonomous agents, in a terminal and in Discord threads"
)]
pub struct Cli {
    /// Config file (the same bot.toml the Discord bot reads); also AUTOTHREAD_CONFIG.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Where the store lives; also AUTOTHREAD_DATA_DIR. Default: the platform data directory.
    #[arg(long, global = true)]
    pub data_dir: Option<PathBuf>,
    /// Log lines as text or as JSON objects (one per line), on stderr. Which lines: RUST_LOG
    /// (default `info` for `run`, `warn` otherwise).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: CliCommand,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl Cli {
    /// The log filter when RUST_LOG is unset: the bot reports each subsystem's start at `info`;
    /// the terminal commands stay quiet so their own output reads cleanly. Chatty dependencies
    /// are held at `warn` either way; async-openai at `error`, because it warns about every 5xx
    /// that our own transport already reports (and retries) in its own words.
    pub fn default_log_filter(&self) -> String {
        let level = match self.command {
            CliCommand::Run => "info",
            _ => "warn",
        };
        format!("{level},serenity=warn,poise=warn,hnsw_rs=warn,anndists=warn,sled=warn,hyper=warn,reqwest=warn,rustls=warn,h2=warn,tungstenite=warn,async_openai=error")
    }
}

#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Run the Discord bot (token from DISCORD_TOKEN).
    Run,
    /// Run an agent in this terminal.
    Console(ConsoleArgs),
    /// List saved agents.
    List,
    /// Write an agent's transcript (Markdown) and workspace files into a directory.
    Export {
        /// Agent id (or a unique prefix of it).
        id: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// Show spend and limits: one agent's budgets, or the console user's day.
    Budget {
        /// Agent id (or a unique prefix of it).
        id: Option<String>,
    },
    /// Search an agent's long-term memory, or forget or pin one of its memories.
    Memory {
        #[command(subcommand)]
        action: MemoryAction,
    },
    /// Apply store migrations and print the schema version.
    Migrate,
    /// Prove the deployment: the config, the store, the chat and embeddings endpoints, the
    /// Discord token and web search, each tried for real (one line each, ✓ or ✗ and why).
    Check,
    /// Ask the running bot's /healthz (on ops.listen) whether it is up: exit 0 if it is. The
    /// image's HEALTHCHECK runs this.
    Health,
}

#[derive(Debug, Subcommand)]
pub enum MemoryAction {
    /// The memories most similar to a query, with their ids, cycles and sources.
    Search {
        /// Agent id (or a unique prefix of it).
        id: String,
        query: String,
        /// How many memories to show.
        #[arg(long, default_value_t = 10)]
        k: usize,
    },
    /// Forget a memory: it is never recalled again.
    Forget { id: String, memory: u64 },
    /// Pin a memory (recalled in every cycle), or unpin it with --unpin.
    Pin {
        id: String,
        memory: u64,
        #[arg(long)]
        unpin: bool,
    },
}

#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// What the agent should do (for --resume of a finished agent: the follow-up task).
    #[arg(long)]
    pub task: Option<String>,
    /// OpenAI-compatible endpoint, including /v1; overrides config and OPENAI_BASE_URL.
    #[arg(long)]
    pub base_url: Option<String>,
    /// Model name; overrides config and OPENAI_MODEL.
    #[arg(long)]
    pub model: Option<String>,
    /// Give the profile directly instead of generating it (AutoGPT 0.2 style).
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub role: Option<String>,
    /// A goal (repeat up to 5 times).
    #[arg(long = "goal")]
    pub goals: Vec<String>,
    /// Run automatic-class commands without asking.
    #[arg(long)]
    pub continuous: bool,
    /// Stop after this many cycles.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Continue a saved agent.
    #[arg(long)]
    pub resume: Option<String>,
    /// The agent's budget in dollars (default: budget.agent_default_usd); with --resume, the new budget.
    #[arg(long, value_parser = parse_budget)]
    pub budget: Option<f64>,
    /// Make a class of command stricter for this agent: CLASS=ACTION, e.g. network=deny or
    /// write=ask (CLASS=default clears it). Repeatable; never looser than [policy] in the config.
    #[arg(long = "policy", value_parser = parse_policy)]
    pub policy: Vec<(Risk, Option<ClassAction>)>,
}

fn parse_policy(text: &str) -> Result<(Risk, Option<ClassAction>), String> {
    let (class, action) = text
        .split_once('=')
        .ok_or("expected CLASS=ACTION, e.g. network=deny")?;
    let risk = Risk::parse(class).ok_or_else(|| {
        let classes: Vec<&str> = crate::core::policy::ALL_RISKS
            .iter()
            .map(|r| r.label())
            .collect();
        format!("unknown class {class:?}; classes: {}", classes.join(", "))
    })?;
    if action.trim().eq_ignore_ascii_case("default") {
        return Ok((risk, None));
    }
    let action = ClassAction::parse(action)
        .ok_or_else(|| format!("unknown action {action:?}; actions: auto, ask, deny, default"))?;
    Ok((risk, Some(action)))
}

fn parse_budget(text: &str) -> Result<f64, String> {
    let usd: f64 = text
        .trim()
        .trim_start_matches('$')
        .parse()
        .map_err(|_| format!("{text:?} is not an amount in dollars (e.g. 2.50)"))?;
    if usd.is_finite() && usd > 0.0 && usd <= 1_000_000.0 {
        Ok(usd)
    } else {
        Err("the budget must be more than $0 and at most $1000000".into())
    }
}

/// A file in the store's directory, when there is one.
fn config_dir_file(config: &Config, name: &str) -> Option<PathBuf> {
    config.data_dir().ok().map(|dir| dir.join(name))
}

/// The metrics recorder and, unless `ops.listen` is empty, the health and metrics listener.
async fn start_ops(app: &App) -> anyhow::Result<()> {
    let metrics = crate::ops::install_metrics();
    if app.config.ops.listen.is_empty() {
        tracing::info!("ops listener: off (ops.listen is empty)");
        return Ok(());
    }
    let addr = crate::ops::serve(
        &app.config.ops.listen,
        app.store.clone(),
        app.clock.clone(),
        metrics,
        app.config.llm.base_url.clone(),
    )
    .await?;
    tracing::info!("ops listener: http://{addr} (/healthz, /readyz, /metrics)");
    Ok(())
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(cli.config.as_deref(), &process_env)?;
    if let Some(dir) = cli.data_dir {
        config.store.data_dir = Some(dir);
    }
    if let CliCommand::Console(args) = &cli.command {
        if let Some(url) = &args.base_url {
            config.llm.base_url = url.clone();
        }
        if let Some(model) = &args.model {
            config.llm.model = model.clone();
        }
        config.validate()?;
    }
    match cli.command {
        CliCommand::Console(args) => console(config, args).await,
        CliCommand::Run => {
            let mut config = config;
            crate::llm::context::learn_context_windows(&mut config.llm, None).await;
            let app = App::open(config)?;
            if let Some(note) = app.settle_crashed_calls()? {
                println!("{note}");
            }
            app.log_startup();
            start_ops(&app).await?;
            // Tells `autothread check` which process holds the store.
            let pid_file = config_dir_file(&app.config, crate::check::PID_FILE);
            if let Some(path) = &pid_file {
                let _ = std::fs::write(path, std::process::id().to_string());
            }
            let ended = crate::surface::discord::client::run(app).await;
            if let Some(path) = &pid_file {
                let _ = std::fs::remove_file(path);
            }
            ended?;
            Ok(ExitCode::SUCCESS)
        }
        CliCommand::Health => crate::ops::check_health(&config.ops.listen).await,
        CliCommand::List => {
            list(&open_store(&config)?)?;
            Ok(ExitCode::SUCCESS)
        }
        CliCommand::Export { id, out } => {
            let store = open_store(&config)?;
            export(&store, &id, &out)?;
            Ok(ExitCode::SUCCESS)
        }
        CliCommand::Budget { id } => {
            print_budget(&App::open(config)?, id.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        CliCommand::Memory { action } => {
            memory_command(&App::open(config)?, action).await?;
            Ok(ExitCode::SUCCESS)
        }
        CliCommand::Migrate => {
            let store = open_store(&config)?;
            store.flush_blocking()?;
            println!(
                "store schema version {}",
                store.schema_version()?.unwrap_or(0)
            );
            Ok(ExitCode::SUCCESS)
        }
        CliCommand::Check => {
            let lines = crate::check::run_checks(&config).await;
            for line in &lines {
                println!("{line}");
            }
            if crate::check::all_required_pass(&lines) {
                println!("The deployment is ready.");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("Something required failed (✗ above).");
                Ok(ExitCode::FAILURE)
            }
        }
    }
}

/// A resumed agent talks to the server it was created with, never to whatever the config names
/// now, unless `--base-url` moves it (with a warning). Agents saved before endpoints were kept
/// adopt the current one.
fn keep_endpoint(config: &mut Config, state: &mut AgentState, flag: Option<&str>) {
    match (&state.settings.endpoint, flag) {
        (Some(saved), Some(url)) if saved.base_url != url => {
            println!(
                "WARNING: --base-url {url} differs from this agent's endpoint {}; the agent moves to {url}.",
                saved.base_url
            );
        }
        (Some(saved), None) => {
            let changed = config.use_endpoint(saved);
            if !changed.is_empty() {
                println!(
                    "Using this agent's saved {}; pass --base-url to move it.",
                    changed.join(" and ")
                );
            }
        }
        _ => {}
    }
    state.settings.endpoint = Some(config.endpoint());
}

/// The agent a prefix names, loaded from the store.
fn load_agent(store: &Store, prefix: &str) -> anyhow::Result<AgentState> {
    let id = store.resolve_agent(prefix)?;
    store
        .load_agent(&id)?
        .with_context(|| format!("agent {id} vanished from the store"))
}

fn task_with_goals(task: Option<&str>, goals: &[String]) -> anyhow::Result<String> {
    if goals.len() > 5 {
        bail!("at most 5 --goal options are allowed (got {})", goals.len());
    }
    let mut text = task.map(str::trim).unwrap_or("").to_string();
    if !goals.is_empty() {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str("Goals:");
        for (i, goal) in goals.iter().enumerate() {
            text.push_str(&format!("\n{}. {}", i + 1, goal.trim()));
        }
    }
    if text.is_empty() {
        bail!("give the agent something to do with --task \"…\" (or --goal)");
    }
    Ok(text)
}

async fn console(mut config: Config, args: ConsoleArgs) -> anyhow::Result<ExitCode> {
    let store = open_store(&config)?;
    let mut resumed = match &args.resume {
        Some(prefix) => Some(load_agent(&store, prefix)?),
        None => None,
    };
    if let Some(state) = resumed.as_mut() {
        keep_endpoint(&mut config, state, args.base_url.as_deref());
    }
    // Tokens are counted with the tokenizer of the model the agent actually uses.
    let counter_model = resumed
        .as_ref()
        .map(|state| state.settings.model.clone())
        .unwrap_or_else(|| config.llm.model.clone());
    crate::llm::context::learn_context_windows(&mut config.llm, Some(&counter_model)).await;
    let app = App::build_for_model(config, store, Arc::new(SystemClock), &counter_model)?;
    if let Some(note) = app.settle_crashed_calls()? {
        println!("{note}");
    }
    let agents = app.agents();
    let surface = Arc::new(ConsoleSurface::stdin());
    let (state, first) = match resumed {
        Some(mut state) => {
            state.settings.continuous = args.continuous;
            if let Some(usd) = args.budget {
                state.settings.budget = Some(usd_to_micros(usd));
            }
            if let Some(limit) = args.limit {
                state.settings.cycle_limit = limit;
            }
            agents.narrow_policy(&mut state, &args.policy)?;
            let first = match &state.phase {
                Phase::Finished { .. } => {
                    let follow_up = match &args.task {
                        Some(task) => task.clone(),
                        None => {
                            let prompt = format!(
                                "{} has finished. Follow-up task (empty to quit): ",
                                state.name()
                            );
                            surface.read_line(&prompt).await.unwrap_or_default()
                        }
                    };
                    if follow_up.trim().is_empty() {
                        println!("Nothing to do; the agent stays finished.");
                        return Ok(ExitCode::SUCCESS);
                    }
                    Event::Resume {
                        by: "console".into(),
                        follow_up: Some(follow_up),
                    }
                }
                Phase::Paused(_) => Event::Resume {
                    by: "console".into(),
                    follow_up: args.task.clone(),
                },
                _ => Event::Recovered {
                    interrupted: runtime::was_interrupted(&app.store, &state)?,
                },
            };
            println!(
                "Resuming agent {} ({}), cycle {}, {} steps so far.",
                state.id,
                visible_controls(state.name()),
                state.cycle,
                state.episodes.len()
            );
            (state, first)
        }
        None => {
            let task = task_with_goals(args.task.as_deref(), &args.goals)?;
            let profile = (args.name.is_some() || args.role.is_some()).then(|| {
                let fallback = Profile::fallback();
                Profile {
                    name: args.name.clone().unwrap_or(fallback.name),
                    role: args.role.clone().unwrap_or(fallback.role),
                    best_practices: Vec::new(),
                    constraints: Vec::new(),
                }
            });
            let mut state = agents.new_agent(
                AgentService::new_agent_id(),
                NewAgent {
                    task,
                    profile,
                    budget: args.budget.map(usd_to_micros),
                    continuous: args.continuous,
                    cycle_limit: args.limit,
                    spender: Spender {
                        user: Some(CONSOLE_USER.into()),
                        guild: None,
                    },
                    ..NewAgent::default()
                },
            );
            agents.narrow_policy(&mut state, &args.policy)?;
            app.store.commit(&crate::store::Commit {
                state: Some(&state),
                ..Default::default()
            })?;
            app.store.flush().await?;
            if args.continuous {
                let base = app.config.policy.for_agent(&state);
                let automatic: Vec<&str> = crate::core::policy::ALL_RISKS
                    .into_iter()
                    .filter(|risk| {
                        base.effective(&state.settings.policy, *risk).0 == ClassAction::Auto
                    })
                    .map(Risk::label)
                    .collect();
                println!(
                    "WARNING: continuous mode runs {} commands without asking. Use at your own risk.",
                    if automatic.is_empty() { "no".to_string() } else { automatic.join(", ") }
                );
            }
            println!(
                "Created agent {} with model {}.",
                state.id, state.settings.model
            );
            (state, Event::Start)
        }
    };
    let (handle, actor) = runtime::start(state, first, app.deps(surface.clone()));
    let mut actor = actor;
    let finished = tokio::select! {
        result = &mut actor => result,
        _ = tokio::signal::ctrl_c() => {
            println!("\nInterrupted: pausing the agent (it is saved).");
            handle.send(Event::Pause { by: "Ctrl+C".into() });
            actor.await
        }
    };
    let state = finished.context("the agent task stopped unexpectedly")??;
    app.store.flush().await?;
    Ok(match &state.phase {
        Phase::Finished { .. } => ExitCode::SUCCESS,
        Phase::Paused(PauseReason::ModelError { .. } | PauseReason::InvalidReplies { .. }) => {
            ExitCode::from(3)
        }
        _ => ExitCode::SUCCESS,
    })
}

async fn memory_command(app: &App, action: MemoryAction) -> anyhow::Result<()> {
    let store = &app.store;
    let memory = app
        .memory
        .as_ref()
        .context("long-term memory is switched off (memory.enabled = false)")?;
    let agent_of = |prefix: &str| load_agent(store, prefix);
    match action {
        MemoryAction::Search { id, query, k } => {
            let agent = agent_of(&id)?;
            let hits = memory.search(&memory.payer(&agent), &query, k).await?;
            if hits.is_empty() {
                println!("No memories found for agent {}.", agent.id);
            }
            for hit in hits {
                println!(
                    "#{}  cycle {}  {}  similarity {:.3}{}\n    {}",
                    hit.id,
                    hit.cycle,
                    hit.source.label(),
                    hit.score,
                    if hit.pinned { "  [pinned]" } else { "" },
                    visible_controls(&truncate_chars(&hit.text.replace('\n', " / "), 300))
                );
            }
        }
        MemoryAction::Forget {
            id,
            memory: memory_id,
        } => {
            let agent = agent_of(&id)?;
            memory.forget(&agent.id, memory_id)?;
            println!("Forgot memory #{memory_id} of agent {}.", agent.id);
        }
        MemoryAction::Pin {
            id,
            memory: memory_id,
            unpin,
        } => {
            let agent = agent_of(&id)?;
            memory.pin(&agent.id, memory_id, !unpin)?;
            let what = if unpin { "Unpinned" } else { "Pinned" };
            println!("{what} memory #{memory_id} of agent {}.", agent.id);
        }
    }
    store.flush_blocking()?;
    Ok(())
}

fn print_budget(app: &App, prefix: Option<&str>) -> anyhow::Result<()> {
    let budgets = &app.budgets;
    let now = app.clock.now();
    let (agent, spender, limit) = match prefix {
        Some(prefix) => {
            let state = load_agent(&app.store, prefix)?;
            println!(
                "Agent {} ({}), model {}:",
                state.id,
                visible_controls(state.name()),
                state.settings.model
            );
            let limit = budgets.agent_limit(&state);
            (state.id, state.spender, limit)
        }
        None => (
            String::new(),
            Spender {
                user: Some(CONSOLE_USER.into()),
                guild: None,
            },
            Micros::ZERO,
        ),
    };
    let lines = budgets.lines(&agent, &spender, limit, now)?;
    for line in lines.into_iter().skip(usize::from(prefix.is_none())) {
        let limit = line
            .limit
            .map(format_usd)
            .unwrap_or_else(|| "no limit".into());
        println!(
            "  {:<28} {} spent ({} µ$) of {limit}; {} reserved ({} µ$)",
            line.kind.label(),
            format_usd(line.account.spent),
            line.account.spent,
            format_usd(line.account.reserved),
            line.account.reserved
        );
    }
    Ok(())
}

fn list(store: &Store) -> anyhow::Result<()> {
    let agents = store.list_agents()?;
    if agents.is_empty() {
        println!("No saved agents.");
        return Ok(());
    }
    println!(
        "{:<12}  {:<24}  {:<18}  {:>5}  {:<16}  TASK",
        "ID", "NAME", "STATE", "CYCLE", "UPDATED"
    );
    for agent in agents {
        println!(
            "{:<12}  {:<24}  {:<18}  {:>5}  {:<16}  {}",
            agent.id,
            visible_controls(&truncate_chars(&agent.name, 24)),
            agent.phase,
            agent.cycle,
            agent.updated_at.format("%Y-%m-%d %H:%M"),
            visible_controls(&truncate_chars(&agent.task.replace('\n', " "), 60))
        );
    }
    Ok(())
}

fn export(store: &Store, prefix: &str, out: &Path) -> anyhow::Result<()> {
    let state = load_agent(store, prefix)?;
    let id = state.id.clone();
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let transcript = out.join("transcript.md");
    std::fs::write(&transcript, crate::export::transcript(store, &state)?)
        .with_context(|| format!("cannot write {}", transcript.display()))?;
    let workspace = out.join("workspace");
    let files = store.list_files(&id)?;
    for (path, _) in &files {
        // Stored paths were normalised on write; checking again keeps a damaged store from
        // writing outside the export directory.
        let safe = crate::tools::workspace::normalize_path(path)
            .map_err(|why| anyhow::anyhow!("stored path {path:?} is unsafe: {why}"))?;
        let target = workspace.join(&safe);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let contents = store.read_file(&id, path)?.unwrap_or_default();
        std::fs::write(&target, contents)
            .with_context(|| format!("cannot write {}", target.display()))?;
    }
    println!(
        "Exported agent {} to {}: transcript.md and {} workspace file(s).",
        id,
        out.display(),
        files.len()
    );
    Ok(())
}
