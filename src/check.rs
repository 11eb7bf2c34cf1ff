//! `autothread check`: proves a deployment before it is trusted with agents. Each part (config,
//! store, chat endpoint, embeddings, Discord token, web search, the code sandbox, each MCP server)
//! is tried for real and reported on one line with ✓, ✗ or ! and the reason; no secret is ever
//! printed.
//!
//! The store is opened, or the process holding it is named (from `autothread.pid`). The chat
//! endpoint gets one request with the configured response format, and a refused format is told
//! apart from a dead endpoint. The Discord token is tried with `GET /users/@me`, and the
//! application's flags (`GET /applications/@me`) say whether it has the Message Content intent the
//! config asks for, or what going without it leaves out. With a valid token, the permissions the
//! bot lacks in each server and channel where agents start, and what breaks without each, come
//! from the caller (`ServerPermissions`: the Discord surface reads them over REST, through `cli`,
//! as this module names no surface). Each MCP server is started and its offered tools listed
//! (`check_mcp`), with how its program is confined and what network it reaches; a program with
//! the bot's own reach (`network = "open"`, or `confine = false`) is a warning.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::config::{
    Config, ContextSource, LlmConfig, MessageContent, ResponseFormatMode, MESSAGE_CONTENT_SWITCH,
};
use crate::core::message::{Message, Role};
use crate::llm::embed::{EmbedPurpose, Embedder, OpenAiEmbedder};
use crate::llm::openai::OpenAiChat;
use crate::llm::{ChatModel, ChatRequest, LlmError};
use crate::store::StoreError;

/// The purpose header of the check's own chat requests.
pub const CHECK_PURPOSE: &str = "check";

/// The file `run` writes its process id to, beside the store, so that `check` can say which
/// process holds the store.
pub const PID_FILE: &str = "autothread.pid";

/// How a part fared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass(String),
    /// Failed, and the bot cannot work without it.
    Fail(String),
    /// Failed or missing, and the bot works without it (with less).
    Warn(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub part: &'static str,
    pub verdict: Verdict,
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (mark, text) = match &self.verdict {
            Verdict::Pass(t) => ("✓", t),
            Verdict::Fail(t) => ("✗", t),
            Verdict::Warn(t) => ("!", t),
        };
        write!(f, "{mark} {}: {text}", self.part)
    }
}

fn line(part: &'static str, verdict: Verdict) -> Line {
    Line { part, verdict }
}

/// Where Discord's API is and the bot's token, handed to `ServerPermissions` once the token has
/// been accepted.
pub struct DiscordAccess {
    /// The API's root, without `/api`.
    pub base: String,
    pub token: crate::config::Secret,
}

/// What the bot lacks in each server it is in, as lines of the check: asked for only once the
/// token has been accepted.
pub trait ServerPermissions {
    fn lines(self, access: DiscordAccess) -> impl Future<Output = Vec<Line>> + Send;
}

/// Runs every check in order; `config` has been loaded and validated already.
pub async fn run_checks(config: &Config, permissions: impl ServerPermissions) -> Vec<Line> {
    let mut lines = vec![
        line("config", Verdict::Pass("valid".into())),
        check_store(config),
        check_chat(&config.llm).await,
        check_context_window(&config.llm).await,
        check_embeddings(config).await,
    ];
    lines.extend(check_discord(config, permissions).await);
    lines.push(check_search(config).await);
    lines.extend(check_sandbox(config));
    lines.extend(check_mcp(config).await);
    lines
}

/// Each configured MCP server started and its tools listed, as the bot does at start-up.
async fn check_mcp(config: &Config) -> Vec<Line> {
    let mut lines = Vec::new();
    for server in &config.mcp.servers {
        let started = crate::mcp::McpServer::open(
            server,
            &config.web,
            &config.sandbox,
            crate::mcp::StateRoot::Temporary,
        );
        let listed = match &started {
            Ok(started) => started.commands().await,
            Err(why) => Err(why.clone()),
        };
        let confinement = match &started {
            Ok(started) => started.confinement().await,
            Err(_) => None,
        };
        // The tools a server lists that agents cannot get, and why (a task-only tool, a name
        // that cannot be a command's).
        let left_out = match &started {
            Ok(started) => started.left_out(),
            Err(_) => Vec::new(),
        };
        let verdict = match listed {
            Ok(commands) => {
                // Only the tools agents get: `agent.disabled_commands` removes some.
                let names: Vec<String> = commands
                    .iter()
                    .map(|c| c.spec().name)
                    .filter(|name| !config.agent.disabled_commands.contains(name))
                    .collect();
                let line = format!(
                    "{} ({}; scope {}: {}): {} tools offered ({}){}{}",
                    server.name,
                    server.describe(),
                    server.scope().label(),
                    server.scope().meaning(),
                    names.len(),
                    names.join(", "),
                    confinement
                        .as_deref()
                        .map(|how| format!("; {how}"))
                        .unwrap_or_default(),
                    left_out
                        .iter()
                        .map(|why| format!("; {why}"))
                        .collect::<String>()
                );
                // A program with the bot's reach is said plainly, as a warning.
                let open = server.command.is_some()
                    && (!server.confine || server.network() == crate::config::McpNetwork::Open);
                match open {
                    true => Verdict::Warn(line),
                    false => Verdict::Pass(line),
                }
            }
            Err(why) => Verdict::Warn(format!("{}: off, because {why}", server.name)),
        };
        lines.push(line("MCP server", verdict));
    }
    lines
}

/// Whether agents can run code here: the sandbox is proven with a real run; then one line for
/// each part of it this machine does not allow, and what its absence means.
fn check_sandbox(config: &Config) -> Vec<Line> {
    if !config.sandbox.enabled {
        return vec![line(
            "code execution",
            Verdict::Warn("off in the config (sandbox.enabled)".into()),
        )];
    }
    #[cfg(target_os = "linux")]
    let lines = match crate::sandbox::Sandbox::probe(&config.sandbox) {
        Ok(sandbox) => std::iter::once(line("code execution", Verdict::Pass(sandbox.describe())))
            .chain(
                sandbox
                    .missing()
                    .into_iter()
                    .map(|missing| line("code execution", Verdict::Warn(missing))),
            )
            .collect(),
        Err(why) => vec![line("code execution", Verdict::Warn(format!("off: {why}")))],
    };
    #[cfg(not(target_os = "linux"))]
    let lines = vec![line(
        "code execution",
        Verdict::Warn("off: the sandbox needs Linux".into()),
    )];
    lines
}

fn check_store(config: &Config) -> Line {
    let dir = match config.data_dir() {
        Ok(dir) => dir,
        Err(e) => return line("store", Verdict::Fail(e.to_string())),
    };
    // The database's address is never shown: it holds a password.
    let place = match &config.store.url {
        Some(_) => "the PostgreSQL database of store.url".to_string(),
        None => dir.display().to_string(),
    };
    let verdict = match crate::app::open_configured_store(config, &dir) {
        Ok(store) => {
            let agents = store.list_agents().map(|a| a.len()).unwrap_or(0);
            Verdict::Pass(format!("opens in {place} ({agents} agents)"))
        }
        Err(StoreError::Locked(_)) => {
            // A running bot holding the store is what a deployment expects; say which one.
            let holder = read_pid(&dir)
                .map(|pid| format!("process {pid}"))
                .unwrap_or_else(|| "another process".into());
            Verdict::Pass(format!(
                "{} is in use by a running bot ({holder})",
                dir.display()
            ))
        }
        Err(e) => Verdict::Fail(format!("cannot open {place}: {e}")),
    };
    line("store", verdict)
}

fn read_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// One try, a short timeout: a check reports, it does not wait out a rate limit.
fn quick(llm: &LlmConfig) -> LlmConfig {
    LlmConfig {
        max_attempts: 1,
        timeout_secs: llm.timeout_secs.min(30),
        ..llm.clone()
    }
}

fn check_request(model: &str, json_schema: Option<serde_json::Value>) -> ChatRequest {
    ChatRequest {
        purpose: CHECK_PURPOSE,
        model: model.to_string(),
        messages: vec![Message {
            role: Role::User,
            content: "Reply with a JSON object {\"ok\": true}.".into(),
        }],
        max_tokens: 16,
        json_schema,
        cache_key: None,
    }
}

async fn check_chat(llm: &LlmConfig) -> Line {
    let chat = match OpenAiChat::new(&quick(llm)) {
        Ok(chat) => chat,
        Err(e) => return line("chat endpoint", Verdict::Fail(e.to_string())),
    };
    let schema =
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
    let format = llm.response_format.label();
    let with_format = chat.complete(check_request(&llm.model, Some(schema))).await;
    let verdict = match with_format {
        Ok(_) => Verdict::Pass(format!(
            "{} answers with model {} (response format {format} accepted)",
            crate::app::without_query(&llm.base_url),
            llm.model
        )),
        Err(LlmError::Rejected { status, message })
            if llm.response_format != ResponseFormatMode::None && status == 400 =>
        {
            // Tell a refused format apart from a refused request.
            match chat.complete(check_request(&llm.model, None)).await {
                Ok(_) => Verdict::Fail(format!(
                    "answers, but refuses response format {format} ({message}); set llm.response_format = \"json_object\" or \"none\""
                )),
                Err(e) => Verdict::Fail(e.to_string()),
            }
        }
        Err(e) => Verdict::Fail(format!("{}: {e}", crate::app::without_query(&llm.base_url))),
    };
    line("chat endpoint", verdict)
}

/// Where the model's window comes from; a guess works, but may waste or overflow the context.
async fn check_context_window(llm: &LlmConfig) -> Line {
    let mut llm = llm.clone();
    crate::llm::context::ask_for_unknown_windows(&mut llm, None).await;
    let (spec, source) = llm.model_spec_with_source(&llm.model);
    let from = match source {
        ContextSource::Configured => "from [llm.models]",
        ContextSource::Catalogue => "from the built-in table",
        ContextSource::Reported => "as the server reports",
        ContextSource::Guessed => {
            let warning = llm.guessed_context_warning(&llm.model).unwrap_or_default();
            return line("context window", Verdict::Warn(warning));
        }
    };
    line(
        "context window",
        Verdict::Pass(format!(
            "model {}: {} tokens {from}, replies up to {}",
            llm.model, spec.context_tokens, spec.max_tokens
        )),
    )
}

async fn check_embeddings(config: &Config) -> Line {
    if !config.memory.enabled {
        return line(
            "embeddings",
            Verdict::Warn("memory is off in the config".into()),
        );
    }
    let embedder = match OpenAiEmbedder::new(&config.llm, &config.memory) {
        Ok(e) => e,
        Err(e) => return line("embeddings", Verdict::Warn(e.to_string())),
    };
    let url = crate::app::without_query(
        config
            .memory
            .base_url
            .as_deref()
            .unwrap_or(&config.llm.base_url),
    );
    let verdict = match embedder
        .embed(&["autothread check".to_string()], EmbedPurpose::Passage)
        .await
    {
        Ok(done) => Verdict::Pass(format!(
            "{url} embeds with {} ({} dimensions)",
            config.memory.passage_model,
            done.vectors.first().map_or(0, Vec::len)
        )),
        Err(e) => Verdict::Warn(format!(
            "{url}: {e}; agents will run without long-term memory"
        )),
    };
    line("embeddings", verdict)
}

/// The token, then what the Message Content intent setting means for this application, then the
/// permissions the bot lacks in its servers.
async fn check_discord(config: &Config, permissions: impl ServerPermissions) -> Vec<Line> {
    let Some(token) = &config.discord.token else {
        return vec![line(
            "discord",
            Verdict::Warn("DISCORD_TOKEN is not set: `run` needs it (the console does not)".into()),
        )];
    };
    let base = config
        .discord
        .api_base
        .as_deref()
        .unwrap_or("https://discord.com")
        .trim_end_matches('/');
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => return vec![line("discord", Verdict::Fail(e.to_string()))],
    };
    let response = client
        .get(format!("{base}/api/v10/users/@me"))
        .header("Authorization", format!("Bot {}", token.expose()))
        .send()
        .await;
    let verdict = match response {
        Ok(r) if r.status().is_success() => {
            let me: serde_json::Value = r.json().await.unwrap_or_default();
            Verdict::Pass(format!(
                "the token is valid: the bot is {} (id {})",
                me["username"].as_str().unwrap_or("?"),
                me["id"].as_str().unwrap_or("?")
            ))
        }
        Ok(r) if r.status().as_u16() == 401 => {
            Verdict::Fail("Discord refused DISCORD_TOKEN (401): check the bot's token".into())
        }
        Ok(r) => Verdict::Fail(format!("Discord answered HTTP {}", r.status())),
        Err(e) if e.is_timeout() => Verdict::Fail("Discord did not answer in 10 s".into()),
        Err(_) => Verdict::Fail(format!("cannot reach {base}")),
    };
    if !matches!(verdict, Verdict::Pass(_)) {
        return vec![line("discord", verdict)];
    }
    let granted = message_content_granted(&client, base, token.expose()).await;
    let mut lines = vec![
        line("discord", verdict),
        line(
            "discord intents",
            intents_verdict(config.discord.message_content(), granted),
        ),
    ];
    lines.extend(
        permissions
            .lines(DiscordAccess {
                base: base.to_string(),
                token: token.clone(),
            })
            .await,
    );
    lines
}

/// The application's flags with Message Content switched on (for an unverified application,
/// the switch in the Developer Portal) or approved (a verified one).
const MESSAGE_CONTENT_FLAGS: u64 = (1 << 18) | (1 << 19);

/// Whether the application has the Message Content intent, from its flags
/// (`GET /applications/@me`); `None` when Discord did not say.
async fn message_content_granted(
    client: &reqwest::Client,
    base: &str,
    token: &str,
) -> Option<bool> {
    let response = client
        .get(format!("{base}/api/v10/applications/@me"))
        .header("Authorization", format!("Bot {token}"))
        .send()
        .await
        .ok()
        .filter(|r| r.status().is_success())?;
    let application: serde_json::Value = response.json().await.ok()?;
    let flags = application["flags"].as_u64()?;
    Some(flags & MESSAGE_CONTENT_FLAGS != 0)
}

/// What the configured Message Content choice means with the application's switch as it is: a
/// request the application lacks fails (Discord would refuse the gateway), going without it warns
/// of what that leaves out.
fn intents_verdict(message_content: MessageContent, granted: Option<bool>) -> Verdict {
    let limits = message_content.limits();
    match (message_content, granted) {
        (MessageContent::Requested, Some(true)) => {
            Verdict::Pass(format!("{limits}; the application has it switched on"))
        }
        (MessageContent::Requested, Some(false)) => Verdict::Fail(format!(
            "discord.message_content_intent = true, but the application does not have the \
             Message Content intent switched on, so Discord would refuse the gateway (4014): \
             switch it on ({MESSAGE_CONTENT_SWITCH}) or set discord.message_content_intent = false"
        )),
        (MessageContent::Requested, None) => Verdict::Warn(format!(
            "{limits}; Discord did not say whether the application has it switched on \
             ({MESSAGE_CONTENT_SWITCH}), without which the gateway is refused"
        )),
        (MessageContent::NotRequested, Some(true)) => Verdict::Warn(format!(
            "{limits}. The application has the intent switched on: \
             discord.message_content_intent = true would read every message"
        )),
        (MessageContent::NotRequested, _) => Verdict::Warn(format!(
            "{limits}. Switching it on ({MESSAGE_CONTENT_SWITCH}) and setting \
             discord.message_content_intent = true reads every message"
        )),
    }
}

async fn check_search(config: &Config) -> Line {
    if !config.web.enabled {
        return line(
            "web search",
            Verdict::Warn("the web commands are off in the config".into()),
        );
    }
    let web = match crate::web::Web::from_config(&config.web) {
        Ok(web) => web,
        Err(e) => return line("web search", Verdict::Fail(e.to_string())),
    };
    let name = web.search.name();
    let verdict = match tokio::time::timeout(
        Duration::from_secs(config.web.timeout_secs.max(1) + 5),
        web.search.search("autothread", 3),
    )
    .await
    {
        Ok(Ok(hits)) => Verdict::Pass(format!("{name} answers ({} results)", hits.len())),
        Ok(Err(e)) => Verdict::Warn(format!("{name}: {e}; web_search will fail")),
        Err(_) => Verdict::Warn(format!(
            "{name} did not answer in time; web_search will fail"
        )),
    };
    line("web search", verdict)
}

/// Whether every required part passed.
pub fn all_required_pass(lines: &[Line]) -> bool {
    !lines.iter().any(|l| matches!(l.verdict, Verdict::Fail(_)))
}
