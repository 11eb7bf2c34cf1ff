//! MCP servers as the operator lists them (`[[mcp.servers]]`): the connection to each through the
//! official SDK (`rmcp`), restarted when it dies or hangs, and its tools as agent commands
//! (`server.tool`, see `tool`) with their own argument schemas.
//!
//! A server is either a program over stdio, started in its own process group with an environment of
//! PATH, LANG, a private HOME and TMPDIR and the config's `env` only, confined like code execution
//! with the network its config gives it (`confined`), its stderr going to the debug log; or a
//! streamable-HTTP URL, checked by the web guard first and reached through a reqwest client that
//! resolves names through the guard, with no proxy and no redirects, sending the config's
//! `headers` (each value read from the environment variable it names, marked sensitive, and
//! registered with `config::redact` with the URL's query, so that no log line shows them, whichever
//! library writes it).
//!
//! A server runs as one or more instances, each its own process or session, by its `scope`
//! (`config::McpScope`): `bot`, one for every agent; `server`, one per Discord server, with the
//! console's agents in one and the Agent Protocol's in another; `agent`, one per agent. A program
//! defaults to `server` (it may keep state, as a memory graph does, which one server's agents must
//! not read from another's), a URL to `bot`. The agent's call picks its instance (`InstanceKey`,
//! from the agent's id and its spender's place); instances start on first use, stop after
//! `idle_secs` without a call, and are at most `max_instances` (see `instances`).
//! `McpServer::commands` starts the shared instance and lists its tools (at most
//! `tool::MAX_TOOLS_PER_SERVER`), once per server, so that every agent's prompt lists the same. A program's answers are read
//! through `oversize::Bounded` (a URL's through `oversize::BoundedHttp`), so an answer too big for
//! the transport fails its call at once, in words saying how big it was and how to ask for less,
//! and the server lives on; the same readers note the tools that must run as tasks, which are left
//! out (`answer`; `left_out` says why, for `check`). A program that exits by itself is reaped at
//! once (`reap_on_exit`), not at its instance's next use. When a server says its list of tools
//! changed (`notifications/tools/list_changed`), it is listed again and the new commands replace
//! the server's in the registry (`on_tools_changed`, which `App::connect_mcp` sets), so the next
//! prompt shows them; a command of a tool no longer listed is refused in words. `call` bounds each
//! call by the server's timeout, which each progress notification of the server pushes back (up to
//! `MAX_CALL_TIMEOUTS` timeouts in all); at the timeout the MCP library sends
//! `notifications/cancelled`, and the server is kept if it still answers a ping within
//! `STUCK_PING`: only a server that died, or stays stuck, fails the call with the reason and is
//! restarted, once per failed connection (`generation`); only that instance, never another's. A
//! call whose connection closed under it may have run: it is run once more on the restarted
//! instance, after `RERUN_AFTER`, only when its tool says it only reads (`readOnlyHint`);
//! otherwise the agent is told that whether it ran is unknown. A result the library cannot read as a
//! tool's (a content block of a kind it does not know) is read block by block (`answer`). Errors
//! show a URL without its query, which may hold a key, and say what failed in words, not the
//! library's type names. `connect_all` connects every server at start-up (`App::connect_mcp`); `connect` connects
//! one, for `autothread check`.

mod answer;
mod confined;
mod instances;
mod oversize;
mod tool;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ErrorData, JsonObject,
    PingRequest, ServerResult, Tool,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError};

use crate::config::{McpServerConfig, SandboxConfig, WebConfig};
use crate::tools::Command;

pub use confined::ServerBox;
pub use instances::{InstanceKey, NoInstance, StateRoot};
pub use tool::{McpTool, MAX_TOOLS_PER_SERVER};

type Connection = RunningService<RoleClient, Listener>;

/// What the bot does with a server's notifications: a changed list of tools is listed again
/// (`McpServer::relist`); the rest are the library's defaults (sampling and elicitation refused).
#[derive(Clone)]
struct Listener {
    server: std::sync::Weak<McpServer>,
}

impl rmcp::ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + rmcp::service::MaybeSendFuture + '_ {
        let server = self.server.clone();
        // Listed from a task of its own: the library's loop, which runs this, brings the answer.
        tokio::spawn(async move {
            if let Some(server) = server.upgrade() {
                server.relist(context.peer).await;
            }
        });
        std::future::ready(())
    }
}

/// What is told the new commands of a server whose list of tools changed.
pub type OnToolsChanged = Arc<dyn Fn(Vec<Arc<dyn Command>>) + Send + Sync>;

/// One configured MCP server and its live connection, if any.
pub struct McpServer {
    config: McpServerConfig,
    /// The guarded client a URL is reached with; `None` for a program.
    http: Option<reqwest::Client>,
    /// Its running instances, by whom each serves (see `instances`).
    instances: Arc<instances::Instances>,
    /// The tools that say they only read (`readOnlyHint`), as last listed: a call of one that
    /// broke with its connection is run again once.
    read_only: std::sync::Mutex<std::collections::HashSet<String>>,
    /// What a program's confinement is drawn from.
    server_box: ServerBox,
    /// The last lines its program wrote to stderr, for the reason a start failed.
    last_words: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    /// The tools its listings say must run as tasks, noted by the transport (see `answer`).
    task_only: answer::TaskOnly,
    /// Why each tool of the last listing left out was, for `autothread check`.
    left_out: std::sync::Mutex<Vec<String>>,
    /// The tools of the last listing offered as commands: a command of one no longer listed is
    /// refused.
    offered_now: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Told the new commands when the server's list of tools changed (`on_tools_changed`).
    tools_changed: std::sync::Mutex<Option<OnToolsChanged>>,
    /// Itself, for the notifications' listener.
    me: std::sync::Weak<McpServer>,
}

/// Lines of a program's stderr kept for a failed start's reason, and characters of each.
const LAST_WORDS_LINES: usize = 8;
const LAST_WORDS_CHARS: usize = 300;

#[derive(Default)]
struct Live {
    connection: Option<Connection>,
    /// The process group of the connection's program: ended whole when the connection is, since
    /// the SDK kills only a program that has not exited (what it started may still run).
    group: Option<i32>,
    /// The connection's program, when it is one (ended with its group); shared with the task that
    /// reaps it as soon as it ends by itself (`reap_on_exit`).
    child: Option<SharedChild>,
    /// What the program holds (its home, its user), given back when it ends.
    held: Option<confined::Held>,
    /// Counts the connections made, so that two calls that fail on the same one restart it once.
    generation: u64,
}

impl Live {
    /// Ends the connection, within a bound, and then everything left in its program's group.
    async fn end(&mut self) {
        if let Some(mut connection) = self.connection.take() {
            // Closing ends a URL's session, or the program (asked, then killed).
            let _ = connection.close_with_timeout(Duration::from_secs(2)).await;
        }
        self.end_group();
    }

    fn end_group(&mut self) {
        let child = self.child.take().and_then(|shared| {
            shared
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take()
        });
        if let Some(group) = self.group.take() {
            // SAFETY: a signal to the process group this connection's program led; when it is
            // gone the call fails with ESRCH and does nothing.
            unsafe { libc::killpg(group, libc::SIGKILL) };
        }
        // Its user goes back to the range only once its program is reaped: until then the
        // program counts toward that user's process limit, which would cut short the next code
        // run or server given the same user. A killed program ends within milliseconds; the
        // wait is bounded all the same, and works where no runtime is left (the bot's shutdown).
        if let Some(mut child) = child {
            let waited_since = std::time::Instant::now();
            while matches!(child.try_wait(), Ok(None)) && waited_since.elapsed() < REAP_WAIT {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.held = None;
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.end_group();
    }
}

/// Why an MCP server could not be reached or started, or did not list its tools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpStartError {
    /// The configured URL (shown without its query) does not parse.
    #[error("{url} is not a URL: {reason}")]
    NotAUrl { url: String, reason: String },
    /// The web guard refuses the URL's address.
    #[error("{url} is refused: {blocked} (an MCP server on a private address must be in web.allow_hosts)")]
    Refused { url: String, blocked: String },
    /// A header's environment variable is not set (its value is never shown).
    #[error(
        "the header {header} is read from the environment variable {variable}, which is not set"
    )]
    HeaderUnset { header: String, variable: String },
    /// A header's value cannot be sent in HTTP (its value is never shown).
    #[error("the header {header} (from the environment variable {variable}) is not a valid header value")]
    HeaderInvalid { header: String, variable: String },
    /// The HTTP client for the URL could not be built.
    #[error("the HTTP client could not be built: {0}")]
    NoClient(String),
    /// The program could not be spawned.
    #[error("the MCP server '{name}' could not be started: {reason}")]
    NotSpawned { name: String, reason: String },
    /// The program cannot be confined here as its config asks (see `confined`).
    #[error("the MCP server '{name}' was not started, because it cannot be confined as configured: {reason}")]
    Unconfinable { name: String, reason: String },
    /// The server has neither a program nor a usable URL.
    #[error("the MCP server '{0}' has no program and no URL")]
    Unreachable(String),
    /// The server was reached but MCP's initialization failed (its reason without secrets).
    #[error("the MCP server '{name}' did not start: {reason}")]
    DidNotStart { name: String, reason: String },
    /// The start took longer than the server's start timeout.
    #[error("the MCP server '{name}' did not start within {secs} s")]
    StartTimedOut { name: String, secs: u64 },
    /// The server did not list its tools within its timeout.
    #[error("it did not list its tools within {0} s")]
    ListTimedOut(u64),
    /// The server answered the listing with an error.
    #[error("it did not list its tools: {0}")]
    ListFailed(String),
}

/// What `McpServer::call` could not do, written for the agent and the thread.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct McpFailure(pub String);

impl McpServer {
    /// The server as configured, not yet started, confined (if a program) with the sandbox's
    /// default users. A URL is refused here when the web guard refuses it (a private address not
    /// in `web.allow_hosts`).
    pub fn new(config: &McpServerConfig, web: &WebConfig) -> Result<Arc<McpServer>, McpStartError> {
        McpServer::open(config, web, &SandboxConfig::default(), StateRoot::Temporary)
    }

    /// As `new`, a program confined with `sandbox`'s users and its instances' directories under
    /// `state`.
    pub fn open(
        config: &McpServerConfig,
        web: &WebConfig,
        sandbox: &SandboxConfig,
        state: StateRoot,
    ) -> Result<Arc<McpServer>, McpStartError> {
        let http = match &config.url {
            Some(url) => {
                crate::config::redact::register_url(url);
                Some(guarded_client(url, &headers_of(config)?, web)?)
            }
            None => None,
        };
        Ok(Arc::new_cyclic(|me| McpServer {
            config: config.clone(),
            http,
            instances: Arc::new(instances::Instances::new(
                &config.name,
                config.scope(),
                config.max_instances,
                Duration::from_secs(config.idle_secs),
                state,
            )),
            read_only: Default::default(),
            server_box: ServerBox::new(web, sandbox),
            last_words: Arc::default(),
            task_only: answer::TaskOnly::default(),
            left_out: Default::default(),
            offered_now: Default::default(),
            tools_changed: Default::default(),
            me: me.clone(),
        }))
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// The instance serving agent `agent`, paid for by `spender`, under the server's scope.
    pub fn instance_for(&self, agent: &str, spender: &crate::core::state::Spender) -> InstanceKey {
        InstanceKey::of(self.config.scope(), agent, spender)
    }

    /// Ends agent `agent`'s own instance, if it runs, and removes its directory with what the
    /// program kept there: the agent was deleted. Only a server scoped per agent has one.
    pub async fn forget_agent(&self, agent: &str) -> std::io::Result<()> {
        if self.config.scope() != crate::config::McpScope::Agent {
            return Ok(());
        }
        self.instances
            .forget(&InstanceKey::Agent(agent.to_string()))
            .await
    }

    /// How many instances of the server run (or are starting) now.
    pub fn running_instances(&self) -> usize {
        self.instances.count()
    }

    /// How its shared instance's program is confined, and with what network (`None` before it
    /// has started, and for a URL).
    pub async fn confinement(&self) -> Option<String> {
        let lease = self.instances.lease(InstanceKey::Shared).await.ok()?;
        let live = lease.instance.live.lock().await;
        live.held.as_ref().map(|held| held.describe().to_string())
    }

    /// The egress proxy its program goes through, when its network is guarded.
    pub fn egress_proxy(&self) -> Option<Arc<crate::web::egress_proxy::EgressProxy>> {
        (self.config.command.is_some()
            && self.config.confine
            && self.config.network() == crate::config::McpNetwork::Guarded)
            .then(|| self.server_box.proxy().ok())
            .flatten()
    }

    /// `text` with the server's URL shown without its query, where a key could be (the SDK's
    /// errors name the URL).
    fn without_secrets(&self, text: &str) -> String {
        let Some(url) = &self.config.url else {
            return text.to_string();
        };
        let shown = crate::config::without_query(url);
        // The client names the URL as written, or as it normalised it (`https://h?k` becomes
        // `https://h/?k`).
        let mut text = text.replace(url.as_str(), &shown);
        if let Ok(parsed) = reqwest::Url::parse(url) {
            text = text.replace(parsed.as_str(), &shown);
        }
        crate::core::text::truncate_chars(&text, 1_000)
    }

    /// The last lines its program wrote to stderr, oldest first.
    fn last_words(&self) -> Vec<String> {
        self.last_words
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// How long a start may take: a program's interpreter may need longer to load than a call to
    /// answer, on a busy machine.
    fn start_timeout(&self) -> Duration {
        Duration::from_secs(self.config.timeout_secs.max(30))
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.config.timeout_secs)
    }

    /// Starts the server and lists its tools (those the config offers, at most
    /// `MAX_TOOLS_PER_SERVER`) as commands.
    /// The listing comes from the shared instance, whatever the scope, so that every prompt shows
    /// the same tools; a scoped server's listing instance stops when idle like the others.
    pub async fn commands(self: &Arc<Self>) -> Result<Vec<Arc<dyn Command>>, McpStartError> {
        let lease = self
            .instances
            .lease(InstanceKey::Shared)
            .await
            .map_err(|e| McpStartError::DidNotStart {
                name: self.config.name.clone(),
                reason: e.to_string(),
            })?;
        let (peer, _) = self.peer(&lease.instance).await?;
        let tools = tokio::time::timeout(self.timeout(), peer.list_all_tools())
            .await
            .map_err(|_| McpStartError::ListTimedOut(self.config.timeout_secs))?
            .map_err(|e| McpStartError::ListFailed(e.to_string()))?;
        Ok(self.offered(tools))
    }

    /// Has `changed` told the server's new commands whenever its list of tools changes.
    pub fn on_tools_changed(&self, changed: OnToolsChanged) {
        *self
            .tools_changed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(changed);
    }

    /// Whether the server's last listing offered `tool` (a list can change under a command).
    pub fn still_offers(&self, tool: &str) -> bool {
        self.offered_now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(tool)
    }

    /// Lists the tools again through `peer`, after the server said its list changed, and tells
    /// whoever asked (`on_tools_changed`) the new commands; a listing that fails keeps the old.
    async fn relist(self: Arc<Self>, peer: Peer<RoleClient>) {
        let listed = tokio::time::timeout(self.timeout(), peer.list_all_tools()).await;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            Ok(Err(why)) => {
                tracing::warn!(server = %self.config.name, "the MCP server's tools changed, and listing them again failed: {}", self.without_secrets(&plain_call_error(&why)));
                return;
            }
            Err(_) => {
                tracing::warn!(server = %self.config.name, "the MCP server's tools changed, and it did not list them again in time");
                return;
            }
        };
        let commands = self.offered(tools);
        tracing::info!(server = %self.config.name, "the MCP server's tools changed: {} offered now", commands.len());
        let changed = self
            .tools_changed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        if let Some(changed) = changed {
            changed(commands);
        }
    }

    /// Why tools of the last listing were left out (one line each), for `autothread check`.
    pub fn left_out(&self) -> Vec<String> {
        self.left_out
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The tools the config offers, as commands; a tool whose name cannot be a command's, or that
    /// must run as a task, is left out with a warning.
    fn offered(self: &Arc<Self>, tools: Vec<Tool>) -> Vec<Arc<dyn Command>> {
        let mut commands: Vec<Arc<dyn Command>> = Vec::new();
        let mut read_only = std::collections::HashSet::new();
        let mut left_out = Vec::new();
        let mut offered_now = std::collections::HashSet::new();
        let task_only = self
            .task_only
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        for tool in tools {
            if !self.config.offers(&tool.name) {
                continue;
            }
            if task_only.contains(tool.name.as_ref()) {
                let why = tool::ToolLeftOut::OnlyAsTask(tool.name.to_string());
                tracing::warn!(server = %self.config.name, "{why}");
                left_out.push(why.to_string());
                continue;
            }
            if tool
                .annotations
                .as_ref()
                .is_some_and(|hints| hints.read_only_hint == Some(true))
            {
                read_only.insert(tool.name.to_string());
            }
            if commands.len() == MAX_TOOLS_PER_SERVER {
                tracing::warn!(
                    server = %self.config.name,
                    "the MCP server offers more than {MAX_TOOLS_PER_SERVER} tools; the rest are left out (mcp.servers.allow chooses them)"
                );
                break;
            }
            match McpTool::new(self.clone(), &tool) {
                Ok(command) => {
                    offered_now.insert(tool.name.to_string());
                    commands.push(Arc::new(command));
                }
                Err(why) => {
                    tracing::warn!(server = %self.config.name, "{why}");
                    left_out.push(why.to_string());
                }
            }
        }
        *self
            .left_out
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = left_out;
        *self
            .offered_now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = offered_now;
        *self
            .read_only
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = read_only;
        commands
    }

    /// The live connection's peer of `instance`, starting it when it has none.
    async fn peer(
        &self,
        instance: &instances::Instance,
    ) -> Result<(Peer<RoleClient>, u64), McpStartError> {
        let mut live = instance.live.lock().await;
        if let Some(connection) = &live.connection {
            if !connection.is_closed() && !connection.peer().is_transport_closed() {
                return Ok((connection.peer().clone(), live.generation));
            }
        }
        live.end().await;
        let (connection, mut group) =
            tokio::time::timeout(self.start_timeout(), self.start(&instance.dir))
                .await
                .map_err(|_| McpStartError::StartTimedOut {
                    name: self.config.name.clone(),
                    secs: self.start_timeout().as_secs(),
                })??;
        let peer = connection.peer().clone();
        live.connection = Some(connection);
        live.group = group.as_ref().map(|(group, ..)| *group);
        live.held = group.as_mut().and_then(|(_, _, held)| held.take());
        if let Some((_, child, _)) = group {
            let child = Arc::new(std::sync::Mutex::new(Some(child)));
            tokio::spawn(reap_on_exit(Arc::downgrade(&child)));
            live.child = Some(child);
        }
        live.generation += 1;
        Ok((peer, live.generation))
    }

    /// Starts the program, or opens the session with the URL, and runs MCP's initialization.
    async fn start(
        &self,
        dir: &std::path::Path,
    ) -> Result<
        (
            Connection,
            Option<(i32, tokio::process::Child, Option<confined::Held>)>,
        ),
        McpStartError,
    > {
        let name = &self.config.name;
        let started = match (&self.config.command, &self.http, &self.config.url) {
            (Some(program), _, _) => {
                let not_spawned = |reason: String| McpStartError::NotSpawned {
                    name: name.clone(),
                    reason,
                };
                instances::made(dir).map_err(|e| {
                    not_spawned(format!(
                        "its directory {} could not be made: {e}",
                        dir.display()
                    ))
                })?;
                let (mut command, held) =
                    confined::command(&self.config, &self.server_box, program, dir)?;
                // Its own process group, so that a restart also ends what it started.
                command
                    .process_group(0)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true);
                let mut child = command.spawn().map_err(|e| not_spawned(e.to_string()))?;
                let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                    return Err(not_spawned(
                        "its standard input and output could not be opened".into(),
                    ));
                };
                if let Some(stderr) = child.stderr.take() {
                    tokio::spawn(log_stderr(name.clone(), stderr, self.last_words.clone()));
                }
                // The program leads its own group: the group's id is its process id.
                let group = child.id().and_then(|pid| i32::try_from(pid).ok());
                let stdout = oversize::Bounded::noting(stdout, self.task_only.clone());
                let served = rmcp::serve_client(self.listener(), (stdout, stdin)).await;
                if served.is_err() {
                    // What it wrote before it failed says why (a missing module, a bad flag).
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    // The program, and what it started, go.
                    if let Some(group) = group {
                        // SAFETY: as in `Live::end_group`.
                        unsafe { libc::killpg(group, libc::SIGKILL) };
                    }
                }
                served.map(|connection| (connection, group.map(|group| (group, child, Some(held)))))
            }
            (None, Some(client), Some(url)) => {
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                    oversize::BoundedHttp {
                        client: client.clone(),
                        task_only: self.task_only.clone(),
                    },
                    StreamableHttpClientTransportConfig::with_uri(url.as_str()),
                );
                rmcp::serve_client(self.listener(), transport)
                    .await
                    .map(|connection| (connection, None))
            }
            _ => return Err(McpStartError::Unreachable(name.clone())),
        };
        started.map_err(|e| {
            let mut reason = plain_init_error(&e);
            let last_words = self.last_words();
            if !last_words.is_empty() {
                reason.push_str(&format!("; it last wrote: {}", last_words.join(" | ")));
            }
            McpStartError::DidNotStart {
                name: name.clone(),
                reason: self.without_secrets(&reason),
            }
        })
    }

    fn listener(&self) -> Listener {
        Listener {
            server: self.me.clone(),
        }
    }

    /// Calls `tool` on the shared instance (see `call_in`).
    pub async fn call(
        &self,
        tool: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, McpFailure> {
        self.call_in(InstanceKey::Shared, tool, arguments).await
    }

    /// Calls `tool` on the instance for `key`, started if it is not running. An answer too big,
    /// or a call that is cancelled at its timeout while the instance still answers, fails with the
    /// reason and leaves it running; an instance that has died, or stays stuck, fails the call
    /// with the reason and is started again, so the next call finds it running. Other instances
    /// and their calls are never touched.
    pub async fn call_in(
        &self,
        key: InstanceKey,
        tool: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, McpFailure> {
        let lease = self
            .instances
            .lease(key)
            .await
            .map_err(|e| McpFailure(e.to_string()))?;
        let instance = &lease.instance;
        let (failed, generation, ended) =
            match self.attempt(instance, tool, arguments.clone()).await {
                Attempt::Answered(answer) => return answer,
                Attempt::Broke {
                    failed,
                    generation,
                    ended,
                } => (failed, generation, ended),
            };
        let restarted = self.restart(instance, generation).await;
        let rerun = ended == Ended::ConnectionDied && restarted.is_ok() && self.is_read_only(tool);
        if rerun {
            // The tool only reads, by its own word: running it again on the restarted instance
            // changes nothing it would not have.
            tokio::time::sleep(RERUN_AFTER).await;
            return match self.attempt(instance, tool, arguments).await {
                Attempt::Answered(answer) => answer,
                Attempt::Broke {
                    failed: again,
                    generation,
                    ..
                } => Err(McpFailure(format!(
                    "{failed}; it was restarted and the call, which only reads, tried once more: {again}; {}",
                    restarted_words(self.restart(instance, generation).await)
                ))),
            };
        }
        let unknown = match ended {
            // It may have done its work before the connection closed.
            Ended::ConnectionDied => {
                " Whether the call ran before the server died is unknown: check before repeating it."
            }
            Ended::Stuck => "",
        };
        Err(McpFailure(format!(
            "{failed}; {}{unknown}",
            restarted_words(restarted)
        )))
    }

    /// Whether the server's tool `tool` says it only reads (`readOnlyHint`).
    fn is_read_only(&self, tool: &str) -> bool {
        self.read_only
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(tool)
    }

    /// One try of a call on `instance`: its answer (a result, or a failure that leaves the
    /// instance running), or how the instance broke.
    async fn attempt(
        &self,
        instance: &instances::Instance,
        tool: &str,
        arguments: JsonObject,
    ) -> Attempt {
        let name = &self.config.name;
        let (peer, generation) = match self.peer(instance).await {
            Ok(found) => found,
            Err(e) => return Attempt::Answered(Err(McpFailure(e.to_string()))),
        };
        let answered = self.send(&peer, tool, arguments).await;
        let done = Attempt::Answered;
        let (failed, ended) = match answered {
            Ok(ServerResult::CallToolResult(result)) => return done(Ok(result)),
            Ok(other) => {
                // Not readable as a tool's result as a whole: read again block by block.
                let value = serde_json::to_value(&other).unwrap_or_default();
                return done(Ok(
                    answer::tolerant(&value).unwrap_or_else(|| CallToolResult::success(Vec::new()))
                ));
            }
            Err(ServiceError::McpError(error)) if error.code.0 == oversize::OVERSIZED_CODE => {
                return done(Err(McpFailure(too_big(name, tool, &error))));
            }
            Err(ServiceError::McpError(error)) => {
                // The server answered with an error: it is alive, and that is the result. Its
                // words are the server's: capped and labelled like its answers.
                let said = crate::core::text::truncate_chars(
                    &error.message,
                    self.config.max_result_chars.min(2_000),
                );
                return done(Err(McpFailure(tool::labelled(&format!(
                    "the MCP server '{name}' refused the call: {said}"
                )))));
            }
            Err(ServiceError::Timeout { timeout }) => {
                // The library has sent `notifications/cancelled`. A server that still answers
                // keeps running (other agents' calls may be in flight on it).
                if Self::answers_ping(&peer).await {
                    return done(Err(McpFailure(format!(
                        "the MCP server '{name}' did not answer within {} s, so the call was cancelled; the server still runs (ask for less, or try again)",
                        timeout.as_secs()
                    ))));
                }
                (
                    format!(
                        "the MCP server '{name}' did not answer within {} s, and then not at all",
                        timeout.as_secs()
                    ),
                    Ended::Stuck,
                )
            }
            Err(e) => (
                format!(
                    "the MCP server '{name}' failed during the call ({})",
                    self.without_secrets(&plain_call_error(&e))
                ),
                Ended::ConnectionDied,
            ),
        };
        Attempt::Broke {
            failed,
            generation,
            ended,
        }
    }

    /// Sends the call of `tool` and waits for its answer.
    async fn send(
        &self,
        peer: &Peer<RoleClient>,
        tool: &str,
        arguments: JsonObject,
    ) -> Result<ServerResult, ServiceError> {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        // Each progress notification the server sends pushes the timeout back, up to a bound.
        let options = PeerRequestOptions::with_timeout(self.timeout())
            .reset_timeout_on_progress()
            .with_max_total_timeout(self.timeout() * MAX_CALL_TIMEOUTS);
        match peer.send_request_with_option(request, options).await {
            Ok(handle) => handle.await_response().await,
            Err(e) => Err(e),
        }
    }

    /// Whether the server answers a ping within `STUCK_PING`: alive, though one call was slow.
    async fn answers_ping(peer: &Peer<RoleClient>) -> bool {
        let ping = peer.send_request(ClientRequest::PingRequest(PingRequest::default()));
        matches!(tokio::time::timeout(STUCK_PING, ping).await, Ok(Ok(_)))
    }

    /// Ends connection `generation` (its program and everything in its process group) and starts
    /// the server again, unless another call already has; says what happened.
    async fn restart(
        &self,
        instance: &instances::Instance,
        generation: u64,
    ) -> Result<(), McpStartError> {
        {
            let mut live = instance.live.lock().await;
            if live.generation == generation {
                live.end().await;
            }
        }
        tracing::warn!(server = %self.config.name, "restarting the MCP server");
        self.peer(instance).await.map(|_| ())
    }
}

/// How a call's try ended.
enum Attempt {
    /// With the call's answer: a result, or a failure that left the instance running.
    Answered(Result<CallToolResult, McpFailure>),
    /// With the instance's connection `generation` broken, in the way `ended` says.
    Broke {
        failed: String,
        generation: u64,
        ended: Ended,
    },
}

/// How a connection broke during a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// It closed (the program died, the session was dropped): the call may or may not have run.
    ConnectionDied,
    /// It timed out and then did not answer a ping.
    Stuck,
}

/// How long a read-only call waits before it is tried again on a restarted instance.
const RERUN_AFTER: Duration = Duration::from_millis(500);

/// A restart's outcome in words.
fn restarted_words(restarted: Result<(), McpStartError>) -> String {
    match restarted {
        Ok(()) => "it was restarted.".into(),
        Err(why) => format!("restarting it failed too ({why}); the next call tries again."),
    }
}

/// What the config names `INSTANCE_DIR` in an argument or an environment value.
pub const INSTANCE_DIR: &str = "{instance_dir}";

/// `text` with `INSTANCE_DIR` replaced by the instance's directory.
fn in_instance(text: &str, dir: &std::path::Path) -> String {
    text.replace(INSTANCE_DIR, &dir.to_string_lossy())
}

/// A program, shared by its instance and the task that reaps it (`None` once the instance ended it).
type SharedChild = Arc<std::sync::Mutex<Option<tokio::process::Child>>>;

/// Reaps a program as soon as it ends by itself (it exited, or crashed), rather than at the next
/// use of its instance: until then it would linger as a zombie. Woken by each SIGCHLD (or, where
/// no signal can be had, every second), it ends once the program is reaped or its instance has
/// taken it back to end it.
async fn reap_on_exit(child: std::sync::Weak<std::sync::Mutex<Option<tokio::process::Child>>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut ended = signal(SignalKind::child()).ok();
    loop {
        {
            let Some(child) = child.upgrade() else {
                return;
            };
            let mut child = child
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            // A program that has ended is reaped by asking (its status is kept for later).
            let running = child
                .as_mut()
                .is_some_and(|running| matches!(running.try_wait(), Ok(None)));
            if !running {
                return;
            }
        }
        match &mut ended {
            Some(signals) => {
                if signals.recv().await.is_none() {
                    return;
                }
            }
            None => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// How long an ended program is waited for before its user is given back regardless.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// How many timeouts a call may last in all when the server keeps reporting progress.
pub const MAX_CALL_TIMEOUTS: u32 = 10;

/// How long a server whose call timed out has to answer a ping to be kept running.
pub const STUCK_PING: Duration = Duration::from_secs(5);

/// The words for an answer over the transport's bound: how big, the bound, and how to ask for less.
/// A URL's answer is known only to be over the HTTP client's limit, which is then the bound told.
fn too_big(server: &str, tool: &str, error: &ErrorData) -> String {
    let said = |key: &str| {
        error
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .and_then(serde_json::Value::as_u64)
    };
    let (size, bound) = match (
        said(oversize::OVERSIZED_BYTES_KEY),
        said(oversize::OVERSIZED_OVER_KEY),
    ) {
        (Some(bytes), _) => (
            format!("{} MB", megabytes(bytes)),
            megabytes(oversize::MAX_MESSAGE_BYTES as u64),
        ),
        (None, Some(limit)) => (format!("over {} MB", megabytes(limit)), megabytes(limit)),
        (None, None) => (
            "too big".to_string(),
            megabytes(oversize::MAX_MESSAGE_BYTES as u64),
        ),
    };
    format!(
        "the answer of {server}.{tool} was {size}, more than the {bound} MB an answer may be, so it was dropped; ask for less: a part of it (a range, a page, a filter, a smaller file), if the tool takes one",
    )
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1_000_000.0)
}

/// A call's failure in words (the library's own errors name its types).
fn plain_call_error(error: &ServiceError) -> String {
    match error {
        ServiceError::TransportClosed => "the connection to it closed".into(),
        ServiceError::TransportSend(_) => "the call could not be sent to it".into(),
        ServiceError::UnexpectedResponse => {
            "it answered with something that is not a tool's result".into()
        }
        ServiceError::Cancelled { .. } => "the call was cancelled".into(),
        ServiceError::Timeout { timeout } => format!("no answer within {} s", timeout.as_secs()),
        other => plain_words(&other.to_string()),
    }
}

/// `text` without the bracketed type paths a library prints (`[rmcp::transport::Worker<…>]`).
fn without_type_paths(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']').map(|at| open + at) else {
            break;
        };
        kept.push_str(&rest[..open]);
        if !rest[open..close].contains("::") {
            kept.push_str(&rest[open..=close]);
        }
        rest = &rest[close + 1..];
    }
    kept.push_str(rest);
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A failed start in words.
fn plain_init_error(error: &rmcp::service::ClientInitializeError) -> String {
    plain_words(&error.to_string())
}

/// `text` up to the first Rust value a library's error prints (`Some(…)`, `Error { … }`: a
/// capitalised name before a bracket), or the whole when it has none.
fn plain_words(text: &str) -> String {
    let text = &without_type_paths(text);
    let debug_start = text.match_indices(['(', '{']).find_map(|(at, _)| {
        let before = text[..at].trim_end();
        let word = before
            .rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .next()
            .unwrap_or("");
        let a_type = word.starts_with(|c: char| c.is_ascii_uppercase())
            && word.chars().any(|c| c.is_ascii_lowercase());
        a_type.then_some(before.len() - word.len())
    });
    match debug_start {
        Some(at) => {
            let words = text[..at].trim_end().trim_end_matches(':').trim();
            if words.is_empty() {
                "an error inside the MCP library".into()
            } else {
                words.to_string()
            }
        }
        None => text.to_string(),
    }
}

/// The server's headers, each value read from the environment variable the config names, marked
/// sensitive and registered for redaction.
fn headers_of(config: &McpServerConfig) -> Result<reqwest::header::HeaderMap, McpStartError> {
    use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
    let mut headers = HeaderMap::new();
    for (header, variable) in &config.headers {
        let Some(value) = crate::config::process_env(variable) else {
            return Err(McpStartError::HeaderUnset {
                header: header.clone(),
                variable: variable.clone(),
            });
        };
        crate::config::redact::register(&value);
        // The part after a scheme ("Bearer", "Basic") is the secret, and a library may print it
        // alone.
        if let Some((_, token)) = value.split_once(' ') {
            crate::config::redact::register(token.trim());
        }
        let invalid = || McpStartError::HeaderInvalid {
            header: header.clone(),
            variable: variable.clone(),
        };
        let name = HeaderName::from_bytes(header.as_bytes()).map_err(|_| invalid())?;
        let mut value = HeaderValue::from_str(&value).map_err(|_| invalid())?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(headers)
}

/// The HTTP client for a server's URL: the web guard resolves its names, no proxy from the
/// environment, no redirect followed; `headers` go with every request.
fn guarded_client(
    url: &str,
    headers: &reqwest::header::HeaderMap,
    web: &WebConfig,
) -> Result<reqwest::Client, McpStartError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| McpStartError::NotAUrl {
        url: crate::config::without_query(url),
        reason: e.to_string(),
    })?;
    let guard =
        crate::web::guard::Guard::new(&web.allow_hosts, Arc::new(crate::web::guard::SystemLookup));
    guard
        .check_url(&parsed)
        .map_err(|blocked| McpStartError::Refused {
            url: crate::config::without_query(url),
            blocked: blocked.to_string(),
        })?;
    reqwest::Client::builder()
        .dns_resolver(guard)
        .default_headers(headers.clone())
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .user_agent(web.user_agent.clone())
        .build()
        .map_err(|e| McpStartError::NoClient(e.to_string()))
}

/// Copies a program's error output into the log in pieces of at most 4 KiB, whatever it writes
/// (no line can grow without bound, and bytes that are not UTF-8 do not stop the copy: a closed
/// pipe would make the server's next write fail), until it closes.
async fn log_stderr(
    server: String,
    mut stderr: tokio::process::ChildStderr,
    last_words: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
) {
    use tokio::io::AsyncReadExt;
    let mut buffer = vec![0u8; 4096];
    loop {
        match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let text = String::from_utf8_lossy(&buffer[..read]);
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    tracing::debug!(server = %server, "MCP server: {line}");
                    let mut kept = last_words
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    if kept.len() == LAST_WORDS_LINES {
                        kept.pop_front();
                    }
                    kept.push_back(crate::core::text::truncate_chars(
                        line.trim(),
                        LAST_WORDS_CHARS,
                    ));
                }
            }
        }
    }
}

/// The configured servers, started, and the commands of those that listed their tools.
pub struct Connected {
    pub commands: Vec<Arc<dyn Command>>,
    /// Every server that could be opened, whether it started or not (an agent's deletion reaches
    /// each one's instances).
    pub servers: Vec<Arc<McpServer>>,
}

/// Starts every configured server and returns its commands; a server that cannot start is left
/// out of the commands, with the reason in the log (`autothread check` shows it too).
pub async fn connect_all(config: &crate::config::Config) -> Connected {
    // Started side by side: a server that hangs at its start delays the bot by one timeout, not
    // one per server.
    let mut starting = tokio::task::JoinSet::new();
    // Instances keep their state beside the store, so that a place's outlives a restart.
    let kept = config.data_dir().ok().map(|dir| dir.join("mcp"));
    for (order, server) in config.mcp.servers.iter().enumerate() {
        let (server, web, sandbox) = (server.clone(), config.web.clone(), config.sandbox.clone());
        let state = kept.clone().map_or(StateRoot::Temporary, StateRoot::Kept);
        starting.spawn(async move {
            let (found, opened) = match McpServer::open(&server, &web, &sandbox, state) {
                Ok(server) => (server.commands().await, Some(server)),
                Err(why) => (Err(why), None),
            };
            (order, found, opened)
        });
    }
    let mut started = starting.join_all().await;
    // In the config's order, so that the prompt lists the commands the same way at every start.
    started.sort_by_key(|(order, ..)| *order);
    let mut commands = Vec::new();
    let mut servers = Vec::new();
    for (server, (_, found, opened)) in config.mcp.servers.iter().zip(started) {
        servers.extend(opened);
        match found {
            Ok(found) => {
                tracing::info!(
                    "MCP server {}: on ({}, {} tools)",
                    server.name,
                    server.describe(),
                    found.len()
                );
                commands.extend(found);
            }
            Err(why) => tracing::warn!("MCP server {}: off, because {why}", server.name),
        }
    }
    Connected { commands, servers }
}

/// One server started and its tools listed.
pub async fn connect(
    server: &McpServerConfig,
    web: &WebConfig,
) -> Result<Vec<Arc<dyn Command>>, McpStartError> {
    McpServer::new(server, web)?.commands().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_told_in_words_without_the_librarys_type_names() {
        assert_eq!(
            plain_words("expect initialized response, but received: Some(Response(JsonRpcResponse { id: 1 }))"),
            "expect initialized response, but received"
        );
        assert_eq!(
            plain_words("connection closed: initialize response"),
            "connection closed: initialize response"
        );
        assert_eq!(
            plain_words("Error { kind: Io }"),
            "an error inside the MCP library"
        );
        assert_eq!(
            plain_words("Send message error Transport [rmcp::transport::worker::WorkerTransport<rmcp::X<reqwest::Client>>] error: HTTP 401 Unauthorized, when send initialize request"),
            "Send message error Transport error: HTTP 401 Unauthorized, when send initialize request"
        );
        assert_eq!(
            plain_call_error(&ServiceError::UnexpectedResponse),
            "it answered with something that is not a tool's result"
        );
        let error = ErrorData::new(
            rmcp::model::ErrorCode(oversize::OVERSIZED_CODE),
            "too big",
            Some(serde_json::json!({oversize::OVERSIZED_BYTES_KEY: 20_000_000})),
        );
        let said = too_big("files", "read_file", &error);
        assert!(
            said.contains("files.read_file was 20.0 MB") && said.contains("ask for less"),
            "{said}"
        );
    }
}
