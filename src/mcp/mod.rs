//! MCP servers as the operator lists them (`[[mcp.servers]]`): the connection to each through the
//! official SDK (`rmcp`), restarted when it dies or hangs, and its tools as agent commands
//! (`server.tool`, see `tool`) with their own argument schemas.
//!
//! A server is either a program over stdio, started in its own process group with an environment of
//! PATH, HOME, LANG, TMPDIR and the config's `env` only, its stderr going to the debug log; or a
//! streamable-HTTP URL, checked by the web guard first and reached through a reqwest client that
//! resolves names through the guard, with no proxy and no redirects. `McpServer::commands` starts
//! it and lists its tools (at most `tool::MAX_TOOLS_PER_SERVER`). `call` bounds each call by the
//! server's timeout; a server that died or hung fails the call with the reason and is restarted
//! once per failed connection (`generation`). Errors show a URL without its query, which may hold a
//! key. `connect_all` connects every server at start-up (`App::connect_mcp`); `connect` connects
//! one, for `autothread check`.

mod tool;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, Tool};
use rmcp::service::{Peer, RoleClient, RunningService};

use crate::config::{McpServerConfig, WebConfig};
use crate::tools::Command;

pub use tool::{McpTool, MAX_TOOLS_PER_SERVER};

type Connection = RunningService<RoleClient, ()>;

/// One configured MCP server and its live connection, if any.
pub struct McpServer {
    config: McpServerConfig,
    /// The guarded client a URL is reached with; `None` for a program.
    http: Option<reqwest::Client>,
    connection: tokio::sync::Mutex<Live>,
}

#[derive(Default)]
struct Live {
    connection: Option<Connection>,
    /// The process group of the connection's program: ended whole when the connection is, since
    /// the SDK kills only a program that has not exited (what it started may still run).
    group: Option<i32>,
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
        if let Some(group) = self.group.take() {
            // SAFETY: a signal to the process group this connection's program led; when it is
            // gone the call fails with ESRCH and does nothing.
            unsafe { libc::killpg(group, libc::SIGKILL) };
        }
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
    /// The HTTP client for the URL could not be built.
    #[error("the HTTP client could not be built: {0}")]
    NoClient(String),
    /// The program could not be spawned.
    #[error("the MCP server '{name}' could not be started: {reason}")]
    NotSpawned { name: String, reason: String },
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
    /// The server as configured, not yet started. A URL is refused here when the web guard
    /// refuses it (a private address not in `web.allow_hosts`).
    pub fn new(config: &McpServerConfig, web: &WebConfig) -> Result<Arc<McpServer>, McpStartError> {
        let http = match &config.url {
            Some(url) => Some(guarded_client(url, web)?),
            None => None,
        };
        Ok(Arc::new(McpServer {
            config: config.clone(),
            http,
            connection: tokio::sync::Mutex::new(Live::default()),
        }))
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.config
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
    pub async fn commands(self: &Arc<Self>) -> Result<Vec<Arc<dyn Command>>, McpStartError> {
        let (peer, _) = self.peer().await?;
        let tools = tokio::time::timeout(self.timeout(), peer.list_all_tools())
            .await
            .map_err(|_| McpStartError::ListTimedOut(self.config.timeout_secs))?
            .map_err(|e| McpStartError::ListFailed(e.to_string()))?;
        Ok(self.offered(tools))
    }

    /// The tools the config offers, as commands; a tool whose name cannot be a command's is
    /// left out with a warning.
    fn offered(self: &Arc<Self>, tools: Vec<Tool>) -> Vec<Arc<dyn Command>> {
        let mut commands: Vec<Arc<dyn Command>> = Vec::new();
        for tool in tools {
            if !self.config.offers(&tool.name) {
                continue;
            }
            if commands.len() == MAX_TOOLS_PER_SERVER {
                tracing::warn!(
                    server = %self.config.name,
                    "the MCP server offers more than {MAX_TOOLS_PER_SERVER} tools; the rest are left out (mcp.servers.allow chooses them)"
                );
                break;
            }
            match McpTool::new(self.clone(), &tool) {
                Ok(command) => commands.push(Arc::new(command)),
                Err(why) => tracing::warn!(server = %self.config.name, "{why}"),
            }
        }
        commands
    }

    /// The live connection's peer, starting the server when there is none.
    async fn peer(&self) -> Result<(Peer<RoleClient>, u64), McpStartError> {
        let mut live = self.connection.lock().await;
        if let Some(connection) = &live.connection {
            if !connection.is_closed() && !connection.peer().is_transport_closed() {
                return Ok((connection.peer().clone(), live.generation));
            }
        }
        live.end().await;
        let (connection, group) = tokio::time::timeout(self.start_timeout(), self.start())
            .await
            .map_err(|_| McpStartError::StartTimedOut {
                name: self.config.name.clone(),
                secs: self.start_timeout().as_secs(),
            })??;
        let peer = connection.peer().clone();
        live.connection = Some(connection);
        live.group = group;
        live.generation += 1;
        Ok((peer, live.generation))
    }

    /// Starts the program, or opens the session with the URL, and runs MCP's initialization.
    async fn start(&self) -> Result<(Connection, Option<i32>), McpStartError> {
        let name = &self.config.name;
        let started = match (&self.config.command, &self.http, &self.config.url) {
            (Some(program), _, _) => {
                let mut command = tokio::process::Command::new(program);
                command.args(&self.config.args).env_clear();
                // Its environment is what it needs to run and what the operator gives it: never
                // the bot's, where the Discord token and the API keys are.
                for kept in ["PATH", "HOME", "LANG", "TMPDIR"] {
                    if let Some(value) = std::env::var_os(kept) {
                        command.env(kept, value);
                    }
                }
                command.envs(&self.config.env);
                let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
                // Its own process group, so that a restart also ends what it started.
                wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
                let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(wrapped)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| McpStartError::NotSpawned {
                        name: name.clone(),
                        reason: e.to_string(),
                    })?;
                if let Some(stderr) = stderr {
                    tokio::spawn(log_stderr(name.clone(), stderr));
                }
                // The program leads its own group: the group's id is its process id.
                let group = transport.id().and_then(|pid| i32::try_from(pid).ok());
                let served = rmcp::serve_client((), transport).await;
                if served.is_err() {
                    // The SDK has killed the program; what it started goes too.
                    if let Some(group) = group {
                        // SAFETY: as in `Live::end_group`.
                        unsafe { libc::killpg(group, libc::SIGKILL) };
                    }
                }
                served.map(|connection| (connection, group))
            }
            (None, Some(client), Some(url)) => {
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                    client.clone(),
                    StreamableHttpClientTransportConfig::with_uri(url.as_str()),
                );
                rmcp::serve_client((), transport)
                    .await
                    .map(|connection| (connection, None))
            }
            _ => return Err(McpStartError::Unreachable(name.clone())),
        };
        started.map_err(|e| McpStartError::DidNotStart {
            name: name.clone(),
            reason: self.without_secrets(&e.to_string()),
        })
    }

    /// Calls `tool`. A server that has died, or does not answer within its timeout, fails the
    /// call with a clear reason and is started again, so the next call finds it running.
    pub async fn call(
        &self,
        tool: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, McpFailure> {
        let name = &self.config.name;
        let (peer, generation) = self.peer().await.map_err(|e| McpFailure(e.to_string()))?;
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let failed = match tokio::time::timeout(self.timeout(), peer.call_tool(params)).await {
            Ok(Ok(result)) => return Ok(result),
            Ok(Err(rmcp::ServiceError::McpError(error))) => {
                // The server answered with an error: it is alive, and that is the result. Its
                // words are the server's: capped and labelled like its answers.
                let said = crate::core::text::truncate_chars(
                    &error.message,
                    self.config.max_result_chars.min(2_000),
                );
                return Err(McpFailure(tool::labelled(&format!(
                    "the MCP server '{name}' refused the call: {said}"
                ))));
            }
            Ok(Err(e)) => format!(
                "the MCP server '{name}' failed during the call ({})",
                self.without_secrets(&e.to_string())
            ),
            Err(_) => format!(
                "the MCP server '{name}' did not answer within {} s",
                self.config.timeout_secs
            ),
        };
        Err(McpFailure(format!(
            "{failed}; {}",
            self.restart(generation).await
        )))
    }

    /// Ends connection `generation` (its program and everything in its process group) and starts
    /// the server again, unless another call already has; says what happened.
    async fn restart(&self, generation: u64) -> String {
        {
            let mut live = self.connection.lock().await;
            if live.generation == generation {
                live.end().await;
            }
        }
        tracing::warn!(server = %self.config.name, "restarting the MCP server");
        match self.peer().await {
            Ok(_) => "it was restarted.".into(),
            Err(why) => format!("restarting it failed too ({why}); the next call tries again."),
        }
    }
}

/// The HTTP client for a server's URL: the web guard resolves its names, no proxy from the
/// environment, no redirect followed.
fn guarded_client(url: &str, web: &WebConfig) -> Result<reqwest::Client, McpStartError> {
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
async fn log_stderr(server: String, mut stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncReadExt;
    let mut buffer = vec![0u8; 4096];
    loop {
        match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let text = String::from_utf8_lossy(&buffer[..read]);
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    tracing::debug!(server = %server, "MCP server: {line}");
                }
            }
        }
    }
}

/// Starts every configured server and returns its commands; a server that cannot start is left
/// out, with the reason in the log (`autothread check` shows it too).
pub async fn connect_all(config: &crate::config::Config) -> Vec<Arc<dyn Command>> {
    // Started side by side: a server that hangs at its start delays the bot by one timeout, not
    // one per server.
    let mut starting = tokio::task::JoinSet::new();
    for (order, server) in config.mcp.servers.iter().enumerate() {
        let (server, web) = (server.clone(), config.web.clone());
        starting.spawn(async move { (order, connect(&server, &web).await) });
    }
    let mut started = starting.join_all().await;
    // In the config's order, so that the prompt lists the commands the same way at every start.
    started.sort_by_key(|(order, _)| *order);
    let mut commands = Vec::new();
    for (server, (_, found)) in config.mcp.servers.iter().zip(started) {
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
    commands
}

/// One server started and its tools listed.
pub async fn connect(
    server: &McpServerConfig,
    web: &WebConfig,
) -> Result<Vec<Arc<dyn Command>>, McpStartError> {
    McpServer::new(server, web)?.commands().await
}
