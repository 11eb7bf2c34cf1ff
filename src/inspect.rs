//! The inspection commands (list, status, budget, memory, export) as functions of an `App` that
//! return what they show. They run on a store this process opened or, while `run` holds the store,
//! inside the running bot: its admin endpoint on the ops listener takes the command with a token
//! from a file in the data directory that only the bot's user can read.
//!
//! `here_or_in_the_bot` runs a command on the store, or, when `run` holds it, sends it to the bot's
//! `POST /admin/inspect` with a bearer token read from `ADMIN_FILE` (mode 0600, beside the store).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::app::App;
use crate::core::budget::{format_usd, Micros};
use crate::core::state::{AgentState, Spender};
use crate::core::text::truncate_chars;
use crate::service::memory_changes::MemoryChange;
use crate::store::{Store, StoreError};
use crate::surface::console::visible_controls;

/// The console's spender name: what `budget` without an agent shows.
pub const CONSOLE_USER: &str = "console";

/// Who the audit trail names for a change made with the command line: whoever runs it on the
/// machine that holds the store.
pub const OPERATOR: &str = "operator (command line)";

/// The file `run` writes beside the store: where its admin endpoint listens and its token.
pub const ADMIN_FILE: &str = "autothread.admin.json";

/// One inspection, as the command line asks for it and as it travels to the running bot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Inspect {
    List,
    Status {
        id: String,
    },
    Budget {
        id: Option<String>,
    },
    MemorySearch {
        id: String,
        query: String,
        k: usize,
    },
    MemoryForget {
        id: String,
        memory: u64,
    },
    MemoryPin {
        id: String,
        memory: u64,
        unpin: bool,
    },
    Export {
        id: String,
    },
    /// One page of the agent's audit trail (0 is the newest).
    Audit {
        id: String,
        page: usize,
    },
}

/// What an inspection shows: text, and for `export` the files to write.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Shown {
    pub text: String,
    /// (path relative to the export directory, contents in base64).
    pub files: Vec<(String, String)>,
    /// For `export`: each file written under another name than its own, and why.
    #[serde(default)]
    pub notes: Vec<String>,
    /// For `export`: each file that could not be exported, and why.
    #[serde(default)]
    pub left_out: Vec<String>,
}

/// The file an export writes beside the others when it renamed or left out any, saying which.
pub const EXPORT_NOTES: &str = "EXPORT-NOTES.md";

/// Why `deliver` wrote an export without some of its files: how many were left out (each is
/// named on stderr and in `EXPORT_NOTES`).
#[derive(Debug)]
pub struct IncompleteExport(pub usize);

impl std::fmt::Display for IncompleteExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            1 => write!(f, "1 file")?,
            n => write!(f, "{n} files")?,
        }
        write!(
            f,
            " could not be exported (named above and in {EXPORT_NOTES}); everything else was"
        )
    }
}

impl std::error::Error for IncompleteExport {}

impl Shown {
    fn line(&mut self, text: impl AsRef<str>) {
        self.text.push_str(text.as_ref());
        self.text.push('\n');
    }

    /// Prints the text and writes the files under `out`. A file that cannot be written is named
    /// and the others are still written; the notes and what was left out go to stderr and, under
    /// `out`, into `EXPORT_NOTES`. Anything left out makes an `IncompleteExport` at the end.
    pub fn deliver(&self, out: Option<&Path>) -> anyhow::Result<()> {
        print!("{}", self.text);
        let mut left_out = self.left_out.clone();
        if let Some(out) = out {
            std::fs::create_dir_all(out)
                .with_context(|| format!("cannot create {}", out.display()))?;
            for (path, contents) in &self.files {
                if let Err(e) = write_exported(out, path, contents) {
                    left_out.push(format!("{path} could not be written: {e:#}."));
                }
            }
            if !self.notes.is_empty() || !left_out.is_empty() {
                let mut text = String::from("# Export notes\n\n");
                for line in &self.notes {
                    text.push_str(&format!("- Renamed: {line}\n"));
                }
                for line in &left_out {
                    text.push_str(&format!("- Left out: {line}\n"));
                }
                let path = out.join(EXPORT_NOTES);
                if let Err(e) = std::fs::write(&path, text) {
                    left_out.push(format!("{EXPORT_NOTES} could not be written: {e}."));
                }
            }
        }
        for line in self.notes.iter().chain(&left_out) {
            eprintln!("{line}");
        }
        if left_out.is_empty() {
            return Ok(());
        }
        Err(IncompleteExport(left_out.len()).into())
    }
}

/// Writes one exported file, `contents` in base64, at `path` under `out`.
fn write_exported(out: &Path, path: &str, contents: &str) -> anyhow::Result<()> {
    // Paths come from the store (or the bot); checking again keeps a damaged store or a confused
    // peer from writing outside the export directory. The export's own folder and the workspace
    // path in it are checked apart: together they are longer than one workspace path may be.
    let (first, rest) = path.split_once('/').unwrap_or((path, ""));
    let mut target = out.to_path_buf();
    for part in [first, rest].into_iter().filter(|part| !part.is_empty()) {
        let safe = crate::tools::workspace::normalize_path(part)
            .map_err(|why| anyhow::anyhow!("the path is unsafe: {why}"))?;
        target.push(safe);
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(contents)
        .context("it is not base64")?;
    std::fs::write(&target, bytes).with_context(|| format!("cannot write {}", target.display()))
}

/// The agent a prefix names, loaded from the store.
pub fn load_agent(store: &Store, prefix: &str) -> anyhow::Result<AgentState> {
    let id = store.resolve_agent(prefix)?;
    store
        .load_agent(&id)?
        .with_context(|| format!("agent {id} vanished from the store"))
}

/// Runs one inspection against `app`.
pub async fn inspect(app: &App, what: &Inspect) -> anyhow::Result<Shown> {
    let mut shown = Shown::default();
    match what {
        Inspect::List => list(&app.store, &mut shown)?,
        Inspect::Status { id } => status(app, id, &mut shown)?,
        Inspect::Budget { id } => budget(app, id.as_deref(), &mut shown)?,
        Inspect::Export { id } => export(&app.store, id, &mut shown)?,
        Inspect::Audit { id, page } => {
            let agent = load_agent(&app.store, id)?;
            let (text, _) = crate::export::audit_page_text(&app.store, &agent, *page)?;
            shown.line(visible_controls(&text));
        }
        Inspect::MemorySearch { id, query, k } => {
            memory_search(app, id, query, *k, &mut shown).await?
        }
        Inspect::MemoryForget { id, memory } => {
            change_memory(app, id, *memory, MemoryChange::Forget, &mut shown).await?
        }
        Inspect::MemoryPin { id, memory, unpin } => {
            let change = if *unpin {
                MemoryChange::Unpin
            } else {
                MemoryChange::Pin
            };
            change_memory(app, id, *memory, change, &mut shown).await?
        }
    }
    Ok(shown)
}

/// A memory changed from the command line, recorded in the trail as the machine's operator's.
async fn change_memory(
    app: &App,
    prefix: &str,
    memory: u64,
    change: MemoryChange,
    shown: &mut Shown,
) -> anyhow::Result<()> {
    let agent = load_agent(&app.store, prefix)?;
    app.agents()
        .change_memory(
            memory_of(app)?,
            &crate::memory::MemoryPlace::agent(&agent.id),
            memory,
            change,
            &crate::core::person::Person::console(OPERATOR),
        )
        .await?;
    shown.line(format!(
        "{} memory #{memory} of agent {}.",
        change.done(),
        agent.id
    ));
    Ok(())
}

fn list(store: &Store, shown: &mut Shown) -> anyhow::Result<()> {
    let agents = store.list_agents()?;
    if agents.is_empty() {
        shown.line("No saved agents.");
        return Ok(());
    }
    shown.line(format!(
        "{:<12}  {:<24}  {:<18}  {:>5}  {:<16}  TASK",
        "ID", "NAME", "STATE", "CYCLE", "UPDATED"
    ));
    for agent in agents {
        shown.line(format!(
            "{:<12}  {:<24}  {:<18}  {:>5}  {:<16}  {}",
            agent.id,
            visible_controls(&truncate_chars(&agent.name, 24)),
            agent.phase,
            agent.cycle,
            agent.updated_at.format("%Y-%m-%d %H:%M"),
            visible_controls(&truncate_chars(&agent.task.replace('\n', " "), 60))
        ));
    }
    Ok(())
}

fn status(app: &App, prefix: &str, shown: &mut Shown) -> anyhow::Result<()> {
    let state = load_agent(&app.store, prefix)?;
    shown.line(format!(
        "Agent {} ({}): {}, cycle {}, {} steps, model {}",
        state.id,
        visible_controls(state.name()),
        state.progress.phase.label(),
        state.progress.cycle,
        state.step_count(),
        state.brief.settings.model
    ));
    if let Some(proposal) = &state.progress.pending {
        shown.line(format!(
            "Waiting for a decision on cycle {}: {}",
            proposal.cycle,
            visible_controls(&truncate_chars(
                &format!(
                    "{}({})",
                    proposal.command.name,
                    serde_json::Value::Object(proposal.command.args.clone())
                ),
                300
            ))
        ));
    }
    shown.line(format!(
        "Usage: {} model calls, {} prompt + {} completion tokens",
        state.money.usage.calls,
        state.money.usage.prompt_tokens,
        state.money.usage.completion_tokens
    ));
    budget_lines(
        app,
        &state.id,
        &state.money.spender,
        app.budgets.agent_limit(&state),
        shown,
    )
}

fn budget(app: &App, prefix: Option<&str>, shown: &mut Shown) -> anyhow::Result<()> {
    match prefix {
        Some(prefix) => {
            let state = load_agent(&app.store, prefix)?;
            shown.line(format!(
                "Agent {} ({}), model {}:",
                state.id,
                visible_controls(state.name()),
                state.brief.settings.model
            ));
            let limit = app.budgets.agent_limit(&state);
            budget_lines(app, &state.id, &state.money.spender, limit, shown)
        }
        None => {
            let console = Spender {
                user: Some(CONSOLE_USER.into()),
                guild: None,
            };
            budget_lines(app, "", &console, Micros::ZERO, shown)
        }
    }
}

/// One line per budget the agent (or, without one, the console user) draws on.
fn budget_lines(
    app: &App,
    agent: &str,
    spender: &Spender,
    limit: Micros,
    shown: &mut Shown,
) -> anyhow::Result<()> {
    let lines = app.budgets.lines(agent, spender, limit, app.clock.now())?;
    for line in lines.into_iter().skip(usize::from(agent.is_empty())) {
        let limit = line
            .limit
            .map(format_usd)
            .unwrap_or_else(|| "no limit".into());
        shown.line(format!(
            "  {:<28} {} spent ({} µ$) of {limit}; {} reserved ({} µ$)",
            line.kind.label(),
            format_usd(line.account.spent),
            line.account.spent,
            format_usd(line.account.reserved),
            line.account.reserved
        ));
    }
    Ok(())
}

fn memory_of(app: &App) -> anyhow::Result<&crate::memory::Memory> {
    app.memory
        .as_deref()
        .context("long-term memory is switched off (memory.enabled = false)")
}

async fn memory_search(
    app: &App,
    id: &str,
    query: &str,
    k: usize,
    shown: &mut Shown,
) -> anyhow::Result<()> {
    let memory = memory_of(app)?;
    let agent = load_agent(&app.store, id)?;
    let hits = memory.search(&memory.payer(&agent), query, k).await?;
    if hits.is_empty() {
        shown.line(format!("No memories found for agent {}.", agent.id));
    }
    for hit in hits {
        shown.line(format!(
            "#{}  cycle {}  {}  similarity {:.3}{}\n    {}",
            hit.id,
            hit.cycle,
            hit.source.label(),
            hit.score,
            if hit.pinned { "  [pinned]" } else { "" },
            visible_controls(&truncate_chars(&hit.text.replace('\n', " / "), 300))
        ));
    }
    Ok(())
}

fn export(store: &Store, prefix: &str, shown: &mut Shown) -> anyhow::Result<()> {
    let state = load_agent(store, prefix)?;
    let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    // Each part is made on its own: one that fails is named, and the rest are still exported.
    match crate::export::transcript(store, &state) {
        Ok(transcript) => shown
            .files
            .push(("transcript.md".into(), encode(transcript.as_bytes()))),
        Err(e) => shown
            .left_out
            .push(format!("transcript.md could not be made: {e}.")),
    }
    match crate::export::audit_markdown(store, &state, None) {
        Ok(audit) => shown
            .files
            .push(("audit.md".into(), encode(audit.as_bytes()))),
        Err(e) => shown
            .left_out
            .push(format!("audit.md could not be made: {e}.")),
    }
    let files: Vec<String> = store
        .list_files(&state.id)?
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    let names = crate::export::export_names(&files);
    let mut exported = 0;
    for name in &names {
        match store.read_file(&state.id, &name.path) {
            Ok(Some(contents)) => {
                exported += 1;
                shown
                    .files
                    .push((format!("workspace/{}", name.written_as), encode(&contents)));
            }
            // Deleted since it was listed: nothing to keep.
            Ok(None) => {}
            Err(e) => shown
                .left_out
                .push(format!("workspace/{} could not be read: {e}.", name.path)),
        }
    }
    shown.line(format!(
        "Exported agent {}: transcript.md, audit.md and {exported} workspace file(s).",
        state.id,
    ));
    shown
        .notes
        .extend(names.iter().filter_map(|name| name.note("workspace/")));
    Ok(())
}

/// Where the running bot's admin endpoint is and the token it takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct AdminFile {
    addr: String,
    token: String,
}

/// A fresh admin token: 256 random bits, new at every start.
pub fn new_admin_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Writes the admin file for a bot whose ops listener is at `addr` and takes `token`, readable
/// by this user only.
pub fn write_admin_file(dir: &Path, addr: std::net::SocketAddr, token: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    // A listener on every interface is reached through loopback from this machine.
    let mut reach = addr;
    if reach.ip().is_unspecified() {
        reach.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let path = dir.join(ADMIN_FILE);
    // Created afresh with mode 0600: a file left by another user or a wider mode is replaced.
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let body = serde_json::to_string(&AdminFile {
        addr: reach.to_string(),
        token: token.to_string(),
    })?;
    file.write_all(body.as_bytes())?;
    Ok(())
}

/// The admin endpoint: `POST /admin/inspect` with `Authorization: Bearer <token>`.
pub fn admin_router(app: App, token: String) -> Router {
    Router::new()
        .route("/admin/inspect", post(inspect_handler))
        .with_state((app, std::sync::Arc::new(token)))
}

type AdminState = (App, std::sync::Arc<String>);

async fn inspect_handler(
    State((app, token)): State<AdminState>,
    headers: HeaderMap,
    Json(what): Json<Inspect>,
) -> Response {
    let offered = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !same_secret(offered, &token) {
        return (StatusCode::UNAUTHORIZED, "a wrong or missing admin token\n").into_response();
    }
    tracing::info!(?what, "inspection from the command line");
    match inspect(&app, &what).await {
        Ok(shown) => Json(shown).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e:#}")).into_response(),
    }
}

/// Compares in time independent of where the strings differ, so the token can't be guessed a
/// character at a time.
fn same_secret(offered: &str, token: &str) -> bool {
    offered.len() == token.len()
        && offered
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

/// Runs `what` on the store in `config`'s data directory or, when a running bot holds it, inside
/// that bot.
pub async fn here_or_in_the_bot(
    config: crate::config::Config,
    what: &Inspect,
) -> anyhow::Result<Shown> {
    let dir = config.data_dir()?;
    match crate::app::open_configured_store(&config, &dir) {
        Ok(store) => {
            let app = App::build(
                config,
                store,
                std::sync::Arc::new(crate::clock::SystemClock),
            )?;
            inspect(&app, what).await
        }
        Err(StoreError::Locked(_)) => ask_the_bot(&dir, what).await,
        Err(e) => Err(e).with_context(|| format!("cannot open the store in {}", dir.display())),
    }
}

async fn ask_the_bot(dir: &Path, what: &Inspect) -> anyhow::Result<Shown> {
    let path: PathBuf = dir.join(ADMIN_FILE);
    let admin: AdminFile = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .with_context(|| {
            format!(
                "the store in {} is in use by another process, and {} does not say how to reach \
                 it (a bot with ops.listen empty, or one that is not autothread run)",
                dir.display(),
                path.display()
            )
        })?;
    let url = format!("http://{}/admin/inspect", admin.addr);
    let response = crate::llm::openai::http_client(std::time::Duration::from_secs(120))?
        .post(&url)
        .bearer_auth(&admin.token)
        .json(what)
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "the running bot did not answer at {} ({})",
                admin.addr,
                crate::ops::network_failure(&e).unwrap_or("no answer")
            )
        })?;
    let status = response.status();
    if !status.is_success() {
        let why = response.text().await.unwrap_or_default();
        anyhow::bail!("{}", why.trim());
    }
    Ok(response.json().await?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_are_compared_whole() {
        assert!(super::same_secret("abc", "abc"));
        assert!(!super::same_secret("abd", "abc"));
        assert!(!super::same_secret("ab", "abc"));
        assert!(!super::same_secret("", "abc"));
    }
}
