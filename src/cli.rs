//! The command line (`Cli`, `CliCommand`): `run` (the Discord bot), `console` (AutoGPT's CLI),
//! `list`, `status`, `audit`, `export`, `budget`, `memory search|forget|pin`, `migrate`, `check`
//! and `health`.
//!
//! `console` builds the `App` with the agent's tokenizer, creates an agent
//! (`AgentService::new_agent`) or resumes one (`Event::Resume` for a paused or finished agent,
//! else `Event::Recovered`, saying whether `runtime::was_interrupted` found a command under way),
//! applies `--policy` (`narrow_policy`),
//! keeps a resumed agent on its saved endpoint (only `--base-url` moves it, with a warning), runs
//! one actor (`runtime::start`) and turns Ctrl+C into `Event::Pause`. The console runs on a runtime
//! of one thread (`Cli::serves_one_agent`, read in `main`) and its store flushes in place
//! (`Store::flush_in_place`): its steps follow one another, so a second thread only cost switches
//! between threads.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};

use crate::app::{open_store, App};
use crate::clock::SystemClock;
use crate::config::{process_env, Config};
use crate::core::budget::usd_to_micros;
use crate::core::commands::Risk;
use crate::core::event::Event;
use crate::core::policy::ClassAction;
use crate::core::state::{AgentState, PauseReason, Phase, Profile, ResumeSettings, Spender};
use crate::runtime;
use crate::service::{AgentService, NewAgent};
use crate::surface::console::{visible_controls, ConsoleSurface};

/// Who pays for console agents: the terminal's user, whose daily budget applies to them all.
use crate::inspect::{load_agent, Inspect, CONSOLE_USER};

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
    /// are held at `warn` either way (rmcp too: it logs a server's whole self-description at info);
    /// async-openai at `error`, because it warns about every 5xx
    /// that our own transport already reports (and retries) in its own words.
    pub fn default_log_filter(&self) -> String {
        let level = match self.command {
            CliCommand::Run(_) | CliCommand::Serve(_) => "info",
            _ => "warn",
        };
        format!("{level},serenity=warn,poise=warn,hnsw_rs=warn,anndists=warn,sled=warn,hyper=warn,reqwest=warn,rustls=warn,h2=warn,tungstenite=warn,rmcp=warn,async_openai=error")
    }

    /// Whether the command serves one agent in this terminal (`console`), which then runs on one
    /// thread. Its steps follow one another, so a second worker thread gives it nothing to do in
    /// parallel, and every hand-over between the two (a reply arriving, a task woken, a store
    /// flush coming back) cost a switch of threads: a tenth of the 30-cycle task's overhead. The
    /// bot keeps a thread per core for its many agents.
    pub fn serves_one_agent(&self) -> bool {
        matches!(self.command, CliCommand::Console(_))
    }
}

/// How `run` connects to Discord's gateway.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Serve only these gateway shards: A..B (B excluded), A..=B, or one shard A. Each process
    /// needs its own --data-dir; an agent lives in the process serving its server's shard.
    #[arg(long, requires = "total_shards")]
    pub shards: Option<String>,
    /// How many shards the bot runs in all, across its processes (default: 1).
    #[arg(long)]
    pub total_shards: Option<u32>,
}

#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Run the Discord bot (token from DISCORD_TOKEN).
    Run(RunArgs),
    /// Run an agent in this terminal.
    Console(ConsoleArgs),
    /// Serve the Agent Protocol (v1, as AutoGPT's `serve`) for any Agent Protocol client: tasks,
    /// steps and artifacts under /ap/v1/agent/tasks, with bearer tokens from [[api.tokens]]
    /// (each token's value in the environment variable its token_env names). A step with no
    /// input or "y" approves the proposed command; other text is feedback, or the answer to the
    /// agent's question.
    Serve(ServeArgs),
    /// List saved agents. This and the other inspection commands also work while `run` holds
    /// the store: they are answered by the running bot.
    List,
    /// Show one agent: its state, the command waiting for a decision, usage and budgets.
    Status {
        /// Agent id (or a unique prefix of it).
        id: String,
    },
    /// Show an agent's audit trail (who decided, edited or changed what, and when), newest first.
    Audit {
        /// Agent id (or a unique prefix of it).
        id: String,
        /// Which page, from 1 (the newest entries).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        page: u32,
    },
    /// Write an agent's transcript, audit trail (Markdown) and workspace files into a directory.
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

/// Where `serve` listens.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (default: api.listen, else 127.0.0.1:8000); port 0 picks a free
    /// port, which the first line printed names.
    #[arg(long)]
    pub listen: Option<String>,
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
    /// The most a cycle's prompt may hold for this agent, in tokens (default:
    /// llm.prompt_budget_tokens; 0: the model's whole window).
    #[arg(long, value_parser = parse_prompt_tokens)]
    pub prompt_tokens: Option<u32>,
}

/// Why a console option's value is refused; clap shows it beside the option.
#[derive(Debug, thiserror::Error)]
enum OptionError {
    #[error("{0:?} is not a number of tokens")]
    NotTokens(String),
    #[error("must be 0 (the whole window) or at least {least}")]
    TooFewTokens { least: u32 },
    #[error("expected CLASS=ACTION, e.g. network=deny")]
    NotClassAction,
    #[error("unknown class {class:?}; classes: {classes}")]
    UnknownClass { class: String, classes: String },
    #[error("unknown action {0:?}; actions: auto, remember, ask, deny, default")]
    UnknownAction(String),
    #[error("{0:?} is not an amount in dollars (e.g. 2.50)")]
    NotDollars(String),
    #[error("the budget must be more than $0 and at most $1000000")]
    BudgetOutOfRange,
}

fn parse_prompt_tokens(text: &str) -> Result<u32, OptionError> {
    let tokens: u32 = text
        .trim()
        .parse()
        .map_err(|_| OptionError::NotTokens(text.to_string()))?;
    let least = crate::config::MIN_PROMPT_BUDGET_TOKENS;
    if tokens != 0 && tokens < least {
        return Err(OptionError::TooFewTokens { least });
    }
    Ok(tokens)
}

fn parse_policy(text: &str) -> Result<(Risk, Option<ClassAction>), OptionError> {
    let (class, action) = text.split_once('=').ok_or(OptionError::NotClassAction)?;
    let risk = Risk::parse(class).ok_or_else(|| {
        let classes: Vec<&str> = crate::core::policy::ALL_RISKS
            .iter()
            .map(|r| r.label())
            .collect();
        OptionError::UnknownClass {
            class: class.to_string(),
            classes: classes.join(", "),
        }
    })?;
    if action.trim().eq_ignore_ascii_case("default") {
        return Ok((risk, None));
    }
    let action =
        ClassAction::parse(action).ok_or_else(|| OptionError::UnknownAction(action.to_string()))?;
    Ok((risk, Some(action)))
}

fn parse_budget(text: &str) -> Result<f64, OptionError> {
    let usd: f64 = text
        .trim()
        .trim_start_matches('$')
        .parse()
        .map_err(|_| OptionError::NotDollars(text.to_string()))?;
    if usd.is_finite() && usd > 0.0 && usd <= 1_000_000.0 {
        Ok(usd)
    } else {
        Err(OptionError::BudgetOutOfRange)
    }
}

/// A file in the store's directory, when there is one.
fn config_dir_file(config: &Config, name: &str) -> Option<PathBuf> {
    config.data_dir().ok().map(|dir| dir.join(name))
}

/// Runs an inspection here or in the running bot, and shows it (writing files under `out`).
async fn inspect(config: Config, what: Inspect, out: Option<&Path>) -> anyhow::Result<ExitCode> {
    crate::inspect::here_or_in_the_bot(config, &what)
        .await?
        .deliver(out)?;
    Ok(ExitCode::SUCCESS)
}

/// Unless `ops.listen` is empty: the metrics recorder, the health and metrics listener with
/// the admin endpoint the inspection commands use while this bot holds the store (its address
/// and token go into `ADMIN_FILE` beside the store, readable by this user only).
async fn start_ops(app: &App) -> anyhow::Result<()> {
    if app.config.ops.listen.is_empty() {
        tracing::info!("ops listener: off (ops.listen is empty); list, status, budget, export and memory cannot reach this bot");
        return Ok(());
    }
    // Without the listener nothing could read the metrics, so none are kept.
    let metrics = crate::ops::install_metrics();
    let token = crate::inspect::new_admin_token();
    let addr = crate::ops::serve(
        &app.config.ops.listen,
        app.store.clone(),
        app.clock.clone(),
        metrics,
        app.config.llm.base_url.clone(),
        crate::inspect::admin_router(app.clone(), token.clone()),
    )
    .await?;
    tracing::info!("ops listener: http://{addr} (/healthz, /readyz, /metrics, /admin)");
    let dir = app.config.data_dir()?;
    crate::inspect::write_admin_file(&dir, addr, &token)?;
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
        CliCommand::Run(args) => {
            let shards = crate::surface::discord::shards::Shards::from_args(
                args.shards.as_deref(),
                args.total_shards,
            )?;
            let mut config = config;
            if !config.api.listen.trim().is_empty() {
                config.api.check_tokens()?;
            }
            crate::llm::context::learn_context_windows(&mut config.llm, None).await;
            let flush_window = config.store.flush_window();
            let mut app = App::open(config)?;
            app.store.share_flushes_within(flush_window);
            shards.check_store(&app.store)?;
            app.connect_mcp().await;
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
            let admin_file = config_dir_file(&app.config, crate::inspect::ADMIN_FILE);
            let ended = crate::surface::discord::client::run(app, shards).await;
            for path in [&pid_file, &admin_file].into_iter().flatten() {
                let _ = std::fs::remove_file(path);
            }
            ended?;
            Ok(ExitCode::SUCCESS)
        }
        CliCommand::Serve(args) => serve(config, args).await,
        CliCommand::Health => crate::ops::check_health(&config.ops.listen).await,
        CliCommand::List => inspect(config, Inspect::List, None).await,
        CliCommand::Status { id } => inspect(config, Inspect::Status { id }, None).await,
        CliCommand::Audit { id, page } => {
            let page = page as usize - 1;
            inspect(config, Inspect::Audit { id, page }, None).await
        }
        CliCommand::Export { id, out } => {
            inspect(config, Inspect::Export { id }, Some(&out)).await?;
            println!("Written to {}.", out.display());
            Ok(ExitCode::SUCCESS)
        }
        CliCommand::Budget { id } => inspect(config, Inspect::Budget { id }, None).await,
        CliCommand::Memory { action } => {
            let what = match action {
                MemoryAction::Search { id, query, k } => Inspect::MemorySearch { id, query, k },
                MemoryAction::Forget { id, memory } => Inspect::MemoryForget { id, memory },
                MemoryAction::Pin { id, memory, unpin } => Inspect::MemoryPin { id, memory, unpin },
            };
            inspect(config, what, None).await
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
            let lines = crate::check::run_checks(&config, PermissionsOverRest).await;
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

/// `check`'s look at the bot's permissions in its servers, read over REST by the Discord surface:
/// a server whose roles leave out what cards need fails (no agent can run there), anything else
/// missing warns, each line naming the permission and what breaks without it.
struct PermissionsOverRest;

impl crate::check::ServerPermissions for PermissionsOverRest {
    async fn lines(self, access: crate::check::DiscordAccess) -> Vec<crate::check::Line> {
        use crate::check::{Line, Verdict};
        use crate::surface::discord::permissions::{audit_servers, Lacking};
        let line = |verdict| Line {
            part: "discord permissions",
            verdict,
        };
        let audit = match audit_servers(&access.base, access.token.expose()).await {
            Ok(audit) => audit,
            Err(why) => {
                return vec![line(Verdict::Warn(format!(
                    "the servers' permissions could not be read: {why}"
                )))]
            }
        };
        if audit.servers.is_empty() {
            return vec![line(Verdict::Warn(
                "the bot is in no server yet: invite it with the bot and applications.commands \
                 scopes"
                    .into(),
            ))];
        }
        let mut lines: Vec<Line> = audit
            .servers
            .iter()
            .flat_map(|server| {
                server.lines.iter().enumerate().map(|(at, report)| {
                    line(match (report.lacking, at) {
                        (Lacking::Nothing, _) => Verdict::Pass(report.text.clone()),
                        // The server's own line: its roles leave out what every card needs.
                        (Lacking::Cards, 0) => Verdict::Fail(report.text.clone()),
                        _ => Verdict::Warn(report.text.clone()),
                    })
                })
            })
            .collect();
        if audit.unread > 0 {
            lines.push(line(Verdict::Warn(format!(
                "{} more servers were not read",
                audit.unread
            ))));
        }
        lines
    }
}

/// `autothread serve`: the agents started over the Agent Protocol, with the ops listener as `run`
/// has it.
async fn serve(mut config: Config, args: ServeArgs) -> anyhow::Result<ExitCode> {
    config.api.check_tokens()?;
    let listen = args
        .listen
        .unwrap_or_else(|| config.api.serve_listen().to_string());
    crate::llm::context::learn_context_windows(&mut config.llm, None).await;
    let flush_window = config.store.flush_window();
    let mut app = App::open(config)?;
    app.store.share_flushes_within(flush_window);
    app.connect_mcp().await;
    if let Some(note) = app.settle_crashed_calls()? {
        println!("{note}");
    }
    start_ops(&app).await?;
    let pid_file = config_dir_file(&app.config, crate::check::PID_FILE);
    if let Some(path) = &pid_file {
        let _ = std::fs::write(path, std::process::id().to_string());
    }
    let admin_file = config_dir_file(&app.config, crate::inspect::ADMIN_FILE);
    let ended = crate::surface::api::serve(app, &listen).await;
    for path in [&pid_file, &admin_file].into_iter().flatten() {
        let _ = std::fs::remove_file(path);
    }
    ended?;
    Ok(ExitCode::SUCCESS)
}

/// A resumed agent talks to the server it was created with, never to whatever the config names
/// now, unless `--base-url` moves it (with a warning). Agents saved before endpoints were kept
/// adopt the current one.
fn keep_endpoint(config: &mut Config, state: &mut AgentState, flag: Option<&str>) {
    match (&state.brief.settings.endpoint, flag) {
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
    state.keep_endpoint(config.endpoint());
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
    store.flush_in_place();
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
        .map(|state| state.brief.settings.model.clone())
        .unwrap_or_else(|| config.llm.model.clone());
    crate::llm::context::learn_context_windows(&mut config.llm, Some(&counter_model)).await;
    let mut app = App::build_for_model(config, store, Arc::new(SystemClock), &counter_model)?;
    app.connect_mcp().await;
    if let Some(note) = app.settle_crashed_calls()? {
        println!("{note}");
    }
    let agents = app.agents();
    let surface = Arc::new(ConsoleSurface::stdin());
    let (state, first) = match resumed {
        Some(mut state) => {
            state.resume_with(ResumeSettings {
                continuous: args.continuous,
                budget: args.budget.map(usd_to_micros),
                cycle_limit: args.limit,
                prompt_budget_tokens: args.prompt_tokens,
            });
            agents.narrow_policy(&mut state, &args.policy)?;
            let first = match &state.progress.phase {
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
                        by: crate::surface::console::operator(),
                        follow_up: Some(follow_up),
                    }
                }
                Phase::Paused(_) => Event::Resume {
                    by: crate::surface::console::operator(),
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
                state.progress.cycle,
                state.step_count()
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
                    prompt_budget_tokens: args.prompt_tokens,
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
                let base = agents.agent_server_policy(&state)?;
                let automatic: Vec<&str> = crate::core::policy::ALL_RISKS
                    .into_iter()
                    .filter(|risk| {
                        base.effective(&state.brief.settings.policy, *risk).0 == ClassAction::Auto
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
                state.id, state.brief.settings.model
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
            if handle.offer(Event::Pause {
                by: crate::surface::console::operator(),
            }).is_err() {
                println!("The agent is busy or stopping; it is saved as it is.");
            }
            actor.await
        }
    };
    let state = finished.context("the agent task stopped unexpectedly")??;
    if let Some(memory) = app.memory.clone() {
        // Saving large graphs is disk work; it is what makes the next start quick.
        tokio::task::spawn_blocking(move || memory.save_indexes()).await?;
    }
    app.store.flush().await?;
    tracing::info!(
        "this run: {}",
        app.store
            .disk_report(crate::ops::proc_counters::bytes_written_by_this_process())
    );
    Ok(match &state.progress.phase {
        Phase::Finished { .. } => ExitCode::SUCCESS,
        Phase::Paused(PauseReason::ModelError { .. } | PauseReason::InvalidReplies { .. }) => {
            ExitCode::from(3)
        }
        _ => ExitCode::SUCCESS,
    })
}
