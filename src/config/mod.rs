//! Configuration: `bot.toml` plus per-host environment overrides, typed and validated once at
//! start-up.
//!
//! Secrets (the OpenAI key, the Discord token) are read only from the environment and are wrapped
//! in [`Secret`], whose `Debug` never shows the value, so a config can be logged without leaking
//! them.
//!
//! `Config::load` reads the file (`from_toml`), then `apply_env` applies the host's overrides
//! through an `EnvLookup`, then `validate` checks the whole; a `ConfigError` names the field at
//! fault. Each section lives in its own module and is re-exported here; `data_dir` is where the
//! store and its neighbours live.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::core::budget::usd_to_micros;

mod api;
mod approvals;
mod budget;
mod discord;
mod images;
mod mcp;
pub mod models;
pub mod redact;
mod sandbox;
mod sections;
mod web;

#[cfg(test)]
mod example_tests;
pub use api::{ApiConfig, ApiToken, MIN_TOKEN_CHARS, SERVE_DEFAULT_LISTEN};
pub use approvals::{ApprovalsConfig, GuildApprovals};
pub use budget::{BudgetConfig, PriceConfig, Unpriced, UserDailyScope};
pub use discord::{DiscordConfig, FeedbackMessages, MessageContent, MESSAGE_CONTENT_SWITCH};
pub use images::ImagesConfig;
pub use mcp::{McpConfig, McpNetwork, McpScope, McpServerConfig, ToolClasses};
pub use sandbox::SandboxConfig;
pub use sections::{
    AgentConfig, ContextSource, LlmConfig, MemoryConfig, ModelSpec, OpsConfig, PolicyConfig,
    PromptCacheKeyMode, Provider, ReplySchemaMode, ResponseFormatMode, StoreConfig, StreamMode,
    SubagentConfig, WorkspaceConfig, DEFAULT_PROMPT_BUDGET_TOKENS, MIN_PROMPT_BUDGET_TOKENS,
    REASONING_REPLY_FLOOR,
};
pub use web::{AllowedHost, SearchBackendKind, WebConfig};

/// A value that must never reach a log line, an error message or `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The only way to read the value; callers hand it straight to the HTTP client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// A secret written in the config file (`store.url`) is read as text.
impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

/// Only the config's own tests serialize it (to list its keys), and never show a secret.
#[cfg(test)]
impl serde::Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(redact::REDACTED)
    }
}

/// A configuration problem, always naming the field so the operator can fix it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config field `{field}`: {problem}")]
    Invalid { field: String, problem: String },
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub llm: LlmConfig,
    pub agent: AgentConfig,
    pub workspace: WorkspaceConfig,
    pub store: StoreConfig,
    pub discord: DiscordConfig,
    pub budget: BudgetConfig,
    pub memory: MemoryConfig,
    pub policy: PolicyConfig,
    pub approvals: ApprovalsConfig,
    pub web: WebConfig,
    pub subagents: SubagentConfig,
    pub sandbox: SandboxConfig,
    pub mcp: McpConfig,
    pub images: ImagesConfig,
    pub ops: OpsConfig,
    pub api: ApiConfig,
}

/// A URL without its query and fragment, for logs and errors: where a provider's parameters (or a
/// misplaced key) could be.
pub fn without_query(url: &str) -> String {
    url.split(['?', '#']).next().unwrap_or(url).to_string()
}

/// The environment as the config loader sees it; a trait-free closure keeps tests off the real process env.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads the real process environment, treating empty values as unset.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Config {
    /// The model endpoint this config talks to, as an agent saves it.
    pub fn endpoint(&self) -> crate::core::state::Endpoint {
        crate::core::state::Endpoint {
            base_url: self.llm.base_url.clone(),
            response_format: self.llm.response_format.label().to_string(),
            embed_base_url: self.memory.base_url.clone(),
            azure_api_version: match self.llm.provider {
                Provider::Azure => self.llm.api_version.clone(),
                Provider::Openai => None,
            },
        }
    }

    /// Points this config at an agent's saved endpoint. Returns what differed from the config,
    /// to tell the user.
    pub fn use_endpoint(&mut self, endpoint: &crate::core::state::Endpoint) -> Vec<String> {
        let mut changed = Vec::new();
        if self.llm.base_url != endpoint.base_url {
            changed.push(format!(
                "model endpoint {} (the config says {})",
                endpoint.base_url, self.llm.base_url
            ));
            self.llm.base_url = endpoint.base_url.clone();
        }
        if let Some(mode) = ResponseFormatMode::parse(&endpoint.response_format) {
            self.llm.response_format = mode;
        }
        if self.memory.base_url != endpoint.embed_base_url {
            changed.push(format!(
                "embeddings endpoint {}",
                endpoint
                    .embed_base_url
                    .as_deref()
                    .unwrap_or("(the model endpoint)")
            ));
            self.memory.base_url = endpoint.embed_base_url.clone();
        }
        let (provider, api_version) = match &endpoint.azure_api_version {
            Some(version) => (Provider::Azure, Some(version.clone())),
            None => (Provider::Openai, None),
        };
        if (self.llm.provider, &self.llm.api_version) != (provider, &api_version) {
            changed.push(match &api_version {
                Some(version) => format!("Azure OpenAI API version {version}"),
                None => "OpenAI API shape (not Azure)".to_string(),
            });
            self.llm.provider = provider;
            self.llm.api_version = api_version;
        }
        changed
    }

    /// Loads `path` (or `AUTOTHREAD_CONFIG`, or built-in defaults), applies the environment, validates.
    pub fn load(path: Option<&Path>, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
        let env_path = env("AUTOTHREAD_CONFIG").map(PathBuf::from);
        let path = path.map(Path::to_path_buf).or(env_path);
        let mut config = match &path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                Config::from_toml(&text, path)?
            }
            None => Config::default(),
        };
        config.apply_env(env);
        config.validate()?;
        Ok(config)
    }

    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// The variables deployments set per host win over the file.
    pub fn apply_env(&mut self, env: EnvLookup<'_>) {
        if let Some(v) = env("OPENAI_API_KEY") {
            self.llm.api_key = Some(Secret::new(v));
        }
        // Azure's portal names its key this way; OPENAI_API_KEY, when both are set, wins.
        if let (None, Some(v)) = (&self.llm.api_key, env("AZURE_OPENAI_API_KEY")) {
            self.llm.api_key = Some(Secret::new(v));
        }
        if let Some(v) = env("OPENAI_BASE_URL") {
            self.llm.base_url = v;
        }
        if let Some(v) = env("OPENAI_MODEL") {
            self.llm.model = v;
        }
        if let Some(v) = env("AUTOTHREAD_OPS_LISTEN") {
            self.ops.listen = v;
        }
        if let Some(v) = env("AUTOTHREAD_API_LISTEN") {
            self.api.listen = v;
        }
        self.api.read_tokens(env);
        if let Some(v) = env("AUTOTHREAD_FREE_MODELS") {
            let named = v.split(',').map(str::trim).filter(|m| !m.is_empty());
            self.budget.free_models.extend(named.map(str::to_string));
        }
        if let Some(v) = env("AUTOTHREAD_DATA_DIR") {
            self.store.data_dir = Some(PathBuf::from(v));
        }
        if let Some(v) = env("AUTOTHREAD_STORE_URL") {
            self.store.url = Some(Secret::new(v));
        }
        if let Some(url) = &self.store.url {
            // Its password must not reach a log line, whichever library would write it.
            redact::register_url(url.expose());
        }
        if let Some(v) = env("OPENAI_EMBED_BASE") {
            self.memory.base_url = Some(v);
        }
        if let Some(v) = env("OPENAI_EMBED_MODEL") {
            self.memory.passage_model = v;
        }
        if let Some(v) = env("OPENAI_EMBED_QUERY_MODEL") {
            self.memory.query_model = v;
        }
        if let Some(v) = env("BRAVE_SEARCH_API_KEY") {
            self.web.brave_api_key = Some(Secret::new(v));
        }
        if let Some(v) = env("DISCORD_TOKEN") {
            self.discord.token = Some(Secret::new(v));
        }
        if let Some(v) = env("DISCORD_API_BASE") {
            self.discord.api_base = Some(v);
        }
        if let Some(v) = env("DISCORD_DEV_GUILD") {
            // A malformed id is reported by validate() through this marker rather than silently ignored.
            self.discord.dev_guild = Some(v.parse().unwrap_or(0));
        }
        if let Some(v) = env("DISCORD_MESSAGE_CONTENT_INTENT") {
            self.discord.set_message_content_from_env(&v);
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let llm = &self.llm;
        let url = llm.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(invalid(
                "llm.base_url",
                format!("must start with http:// or https:// (got {url:?})"),
            ));
        }
        if llm.model.trim().is_empty() {
            return Err(invalid("llm.model", "must not be empty"));
        }
        self.approvals.validate()?;
        if self.store.lease_secs < sections::MIN_LEASE_SECS {
            return Err(invalid(
                "store.lease_secs",
                format!(
                    "must be at least {} (a lease is renewed every third of it; got {})",
                    sections::MIN_LEASE_SECS,
                    self.store.lease_secs
                ),
            ));
        }
        self.mcp.validate()?;
        self.images.validate()?;
        // A query in a base URL would end up before the path (`…?api-version=…/chat/completions`).
        let embeddings_url = self
            .memory
            .base_url
            .as_deref()
            .map(|u| ("memory.base_url", u));
        for (field, url) in [("llm.base_url", url)].into_iter().chain(embeddings_url) {
            if url.contains('?') {
                return Err(invalid(
                    field,
                    "must not carry a query; for Azure OpenAI set llm.provider = \"azure\" and \
                     llm.api_version, and give the deployment's URL without ?api-version=",
                ));
            }
        }
        match (llm.provider, llm.api_version.as_deref().map(str::trim)) {
            (Provider::Azure, None | Some("")) => {
                return Err(invalid(
                    "llm.api_version",
                    "Azure OpenAI needs its API version (e.g. \"2024-10-21\")",
                ))
            }
            (Provider::Openai, Some(_)) => {
                return Err(invalid(
                    "llm.api_version",
                    "is only sent to Azure OpenAI; set llm.provider = \"azure\" or remove it",
                ))
            }
            _ => {}
        }
        if let Some(effort) = &llm.reasoning_effort {
            const EFFORTS: [&str; 6] = ["none", "minimal", "low", "medium", "high", "xhigh"];
            if !EFFORTS.contains(&effort.as_str()) {
                return Err(invalid(
                    "llm.reasoning_effort",
                    format!("must be one of {}", EFFORTS.join(", ")),
                ));
            }
        }
        let budget = llm.prompt_budget_tokens;
        if budget != 0 && budget < MIN_PROMPT_BUDGET_TOKENS {
            return Err(invalid(
                "llm.prompt_budget_tokens",
                format!("must be 0 (the whole window) or at least {MIN_PROMPT_BUDGET_TOKENS}"),
            ));
        }
        if llm.timeout_secs == 0 {
            return Err(invalid("llm.timeout_secs", "must be at least 1"));
        }
        if llm.max_attempts == 0 || llm.max_attempts > 20 {
            return Err(invalid("llm.max_attempts", "must be between 1 and 20"));
        }
        if llm.retry_initial_ms > llm.retry_max_ms {
            return Err(invalid(
                "llm.retry_initial_ms",
                "must not exceed llm.retry_max_ms",
            ));
        }
        if let Some(t) = llm.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(invalid("llm.temperature", "must be between 0 and 2"));
            }
        }
        for (name, spec) in &llm.models {
            let field = format!("llm.models.\"{name}\"");
            if spec.context_tokens < 1024 {
                return Err(invalid(&field, "context_tokens must be at least 1024"));
            }
            if spec.max_tokens == 0 || spec.max_tokens * 2 > spec.context_tokens {
                return Err(invalid(
                    &field,
                    "max_tokens must be at least 1 and at most half of context_tokens",
                ));
            }
        }
        if self.agent.approve_n_default == 0 {
            return Err(invalid("agent.approve_n_default", "must be at least 1"));
        }
        if self.agent.full_steps == 0 {
            return Err(invalid("agent.full_steps", "must be at least 1"));
        }
        // Only the newest steps are held whole in memory; the prompt and the brake look no further.
        let whole = crate::core::history::WHOLE_STEPS_KEPT;
        if self.agent.full_steps > whole {
            return Err(invalid(
                "agent.full_steps",
                format!("must be at most {whole}"),
            ));
        }
        // The prompt shows up to a block more than `step_lines`; lines beyond those held for
        // older steps could never be shown.
        let lines = crate::core::history::STEP_LINES_KEPT + 1 - crate::core::prompt::LINE_BLOCK;
        if self.agent.step_lines > lines {
            return Err(invalid(
                "agent.step_lines",
                format!("must be at most {lines}"),
            ));
        }
        if self.budget.runaway_repeat_steps as usize > whole {
            return Err(invalid(
                "budget.runaway_repeat_steps",
                format!("must be at most {whole}"),
            ));
        }
        if self.workspace.max_file_bytes == 0
            || self.workspace.max_file_bytes > self.workspace.max_agent_bytes
            || self.workspace.max_file_bytes >= crate::store::packed::UNPACKED_MAX as u64
        {
            return Err(invalid(
                "workspace.max_file_bytes",
                "must be at least 1, at most workspace.max_agent_bytes, and below 1 GiB",
            ));
        }
        if self.workspace.max_output_chars < 200 {
            return Err(invalid(
                "workspace.max_output_chars",
                "must be at least 200",
            ));
        }
        self.validate_budget()?;
        self.validate_web()?;
        self.api.validate()?;
        if self.agent.automatic.is_some() {
            return Err(invalid(
                "agent.automatic",
                "was replaced by [policy]: set read/write/network/control/external to \"auto\", \"ask\" or \"deny\"",
            ));
        }
        if self.subagents.enabled
            && (self.subagents.max_per_agent == 0 || self.subagents.max_messages < 2)
        {
            return Err(invalid(
                "subagents",
                "max_per_agent must be at least 1 and max_messages at least 2",
            ));
        }
        let memory = &self.memory;
        if memory.enabled {
            if memory.passage_model.trim().is_empty() {
                return Err(invalid("memory.passage_model", "must not be empty"));
            }
            if memory.batch_size == 0 || memory.recall_top_k == 0 || memory.memory_chars < 100 {
                return Err(invalid(
                    "memory",
                    "batch_size and recall_top_k must be at least 1, memory_chars at least 100",
                ));
            }
            if memory.dimensions.is_some_and(|d| !(16..=8192).contains(&d)) {
                return Err(invalid(
                    "memory.dimensions",
                    "must be between 16 and 8192, or unset for the model's own",
                ));
            }
            if memory.recall_context_percent > 50 {
                return Err(invalid(
                    "memory.recall_context_percent",
                    "must be at most 50",
                ));
            }
            if !(2..=255).contains(&memory.hnsw_m) || memory.hnsw_ef_search < memory.recall_top_k {
                return Err(invalid(
                    "memory.hnsw_m",
                    "hnsw_m must be between 2 and 255 and hnsw_ef_search at least recall_top_k",
                ));
            }
            if memory.timeout_secs == 0 || !(1..=5).contains(&memory.max_attempts) {
                return Err(invalid(
                    "memory",
                    "timeout_secs must be at least 1 and max_attempts between 1 and 5",
                ));
            }
            if memory.failures_to_open == 0
                || memory.cooldown_secs == 0
                || memory.probe_interval_secs < memory.cooldown_secs
                || memory.probe_interval_secs > 86_400
                || memory.max_queued_per_agent == 0
            {
                return Err(invalid(
                    "memory",
                    "failures_to_open, cooldown_secs and max_queued_per_agent must be at least 1, \
                     and probe_interval_secs between cooldown_secs and 86400 (a day)",
                ));
            }
        }
        if !self.ops.listen.is_empty() && self.ops.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "ops.listen",
                "must be an address and port such as 127.0.0.1:9464, or empty for no listener",
            ));
        }
        if self.ops.shutdown_grace_secs > 600 {
            return Err(invalid("ops.shutdown_grace_secs", "must be at most 600"));
        }
        if self.discord.dev_guild == Some(0) {
            return Err(invalid(
                "discord.dev_guild",
                "must be a guild id (a positive integer); check DISCORD_DEV_GUILD",
            ));
        }
        if let Some(value) = &self.discord.message_content_env_unreadable {
            return Err(invalid(
                "discord.message_content_intent",
                format!("DISCORD_MESSAGE_CONTENT_INTENT must be true or false (got {value:?})"),
            ));
        }
        if self.discord.status_requests_per_second > 25 {
            return Err(invalid(
                "discord.status_requests_per_second",
                "must be at most 25, half of what Discord allows a bot a second (0 turns the live status off)",
            ));
        }
        Ok(())
    }

    fn validate_web(&self) -> Result<(), ConfigError> {
        let web = &self.web;
        if !web.enabled {
            return Ok(());
        }
        let url_field = match web.search_backend {
            SearchBackendKind::Duckduckgo => ("web.duckduckgo_url", &web.duckduckgo_url),
            SearchBackendKind::Searxng => ("web.searxng_url", &web.searxng_url),
            SearchBackendKind::Brave => ("web.brave_url", &web.brave_url),
        };
        if reqwest::Url::parse(url_field.1.trim()).is_err() {
            return Err(invalid(
                url_field.0,
                format!(
                    "must be an http(s) URL for the chosen search_backend (got {:?})",
                    url_field.1
                ),
            ));
        }
        if web.search_backend == SearchBackendKind::Brave && web.brave_api_key.is_none() {
            return Err(invalid(
                "web.search_backend",
                "\"brave\" needs the BRAVE_SEARCH_API_KEY environment variable",
            ));
        }
        if web.search_results == 0 || web.search_results > 20 {
            return Err(invalid("web.search_results", "must be between 1 and 20"));
        }
        if web.timeout_secs == 0 || web.max_page_bytes < 1024 || web.max_redirects > 20 {
            return Err(invalid(
                "web",
                "timeout_secs must be at least 1, max_page_bytes at least 1024, max_redirects at most 20",
            ));
        }
        if !(1..=3600).contains(&web.clone_timeout_secs)
            || !(1024..=1 << 30).contains(&web.clone_max_bytes)
        {
            return Err(invalid(
                "web",
                "clone_timeout_secs must be 1 to 3600 and clone_max_bytes 1024 to 1073741824",
            ));
        }
        if web.chunk_tokens < 200 || web.max_model_chars < 1000 {
            return Err(invalid(
                "web.chunk_tokens",
                "chunk_tokens must be at least 200 and max_model_chars at least 1000",
            ));
        }
        for host in &web.allow_hosts {
            if AllowedHost::parse(host).is_none() {
                return Err(invalid(
                    "web.allow_hosts",
                    format!("{host:?} is not a host name, host:port or IP address"),
                ));
            }
        }
        Ok(())
    }

    fn validate_budget(&self) -> Result<(), ConfigError> {
        let budget = &self.budget;
        let dollars = [
            ("budget.agent_default_usd", budget.agent_default_usd),
            ("budget.agent_max_usd", budget.agent_max_usd),
            ("budget.user_daily_usd", budget.user_daily_usd),
            ("budget.guild_daily_usd", budget.guild_daily_usd),
            ("budget.guild_monthly_usd", budget.guild_monthly_usd),
            (
                "budget.user_spend_per_hour_usd",
                budget.user_spend_per_hour_usd,
            ),
            (
                "budget.guild_spend_per_hour_usd",
                budget.guild_spend_per_hour_usd,
            ),
        ];
        for (field, value) in dollars {
            if !value.is_finite() || !(0.0..=1_000_000.0).contains(&value) {
                return Err(invalid(field, "must be between 0 and 1000000 dollars"));
            }
        }
        for field in [
            "budget.user_spend_per_hour_usd",
            "budget.guild_spend_per_hour_usd",
        ] {
            let value = dollars
                .iter()
                .find(|(f, _)| *f == field)
                .map_or(0.0, |d| d.1);
            if usd_to_micros(value) > crate::core::budget::MAX_SPEND_PER_HOUR {
                return Err(invalid(
                    field,
                    "must be at most 4294 dollars per hour (0: no limit)",
                ));
            }
        }
        if budget.agent_default_usd <= 0.0 {
            return Err(invalid("budget.agent_default_usd", "must be more than 0"));
        }
        if budget.agent_max_usd < budget.agent_default_usd {
            return Err(invalid(
                "budget.agent_max_usd",
                "must be at least budget.agent_default_usd",
            ));
        }
        if !(1..=100).contains(&budget.soft_cap_percent) {
            return Err(invalid(
                "budget.soft_cap_percent",
                "must be between 1 and 100",
            ));
        }
        for (name, price) in &budget.prices {
            let ok = |v: f64| v.is_finite() && (0.0..=10_000.0).contains(&v);
            let cached_ok = price.cached_input_per_million.is_none_or(ok)
                && price.cache_write_per_million.is_none_or(ok);
            if !ok(price.input_per_million) || !ok(price.output_per_million) || !cached_ok {
                return Err(invalid(
                    format!("budget.prices.\"{name}\""),
                    "prices must be between 0 and 10000 dollars per million tokens",
                ));
            }
        }
        // A model without a price would make its spend invisible to every budget, so every model
        // an agent can be given must have one (or be listed as free), on any endpoint.
        for model in self.models_in_use() {
            if let Err(unpriced) = budget.price_of(model) {
                return Err(invalid(
                    format!("budget.prices.\"{model}\""),
                    unpriced.to_string(),
                ));
            }
        }
        for guild in self.discord.guild_models.keys() {
            if guild.parse::<u64>().is_err() {
                return Err(invalid(
                    format!("discord.guild_models.\"{guild}\""),
                    "the key must be a server id (a number)",
                ));
            }
        }
        Ok(())
    }

    /// How an agent on `model` is told the reply format: a schema when the endpoint takes
    /// `json_schema` (full where input is free, compact where the schema is billed), otherwise
    /// instructions in the prompt.
    pub fn reply_format(&self, model: &str) -> crate::core::step::ReplyFormat {
        use crate::core::step::ReplyFormat;
        if self.llm.response_format != ResponseFormatMode::JsonSchema {
            return ReplyFormat::Instructions;
        }
        match self.llm.reply_schema {
            ReplySchemaMode::Full => ReplyFormat::FullSchema,
            ReplySchemaMode::Compact => ReplyFormat::CompactSchema,
            ReplySchemaMode::Auto => {
                let free = self
                    .budget
                    .known_price(model)
                    .is_some_and(|price| price.input_per_million == 0);
                if free {
                    ReplyFormat::FullSchema
                } else {
                    ReplyFormat::CompactSchema
                }
            }
        }
    }

    /// Every model the config lets an agent use: the chat models, the embedding models when
    /// memory is on, and the models servers may choose from.
    pub fn models_in_use(&self) -> Vec<&str> {
        let mut models = vec![self.llm.model.as_str()];
        models.extend(self.llm.smart_model());
        if self.memory.enabled {
            models.push(self.memory.passage_model.as_str());
            models.push(self.memory.query_model());
        }
        models.extend(self.discord.models.iter().map(String::as_str));
        models.extend(
            self.discord
                .guild_models
                .values()
                .flatten()
                .map(String::as_str),
        );
        // Each model once, in order, so the first unpriced one is the one named.
        let mut seen = std::collections::BTreeSet::new();
        models.retain(|model| seen.insert(*model));
        models
    }

    /// The directory of the sled store: configured, or the platform's data directory.
    pub fn data_dir(&self) -> Result<PathBuf, ConfigError> {
        if let Some(dir) = &self.store.data_dir {
            return Ok(dir.clone());
        }
        directories::ProjectDirs::from("", "", "autothread")
            .map(|dirs| dirs.data_dir().to_path_buf())
            .ok_or_else(|| {
                invalid(
                    "store.data_dir",
                    "no platform data directory found; set --data-dir or AUTOTHREAD_DATA_DIR",
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::sections::FALLBACK_MODEL;
    use crate::core::commands::Risk;
    use crate::core::policy::ClassAction;

    #[test]
    fn thread_messages_are_feedback_when_they_reply_to_the_card_or_carry_the_prefix() {
        let replies = FeedbackMessages::Replies;
        assert_eq!(replies.feedback("nice work", "fb:", false), None);
        assert_eq!(replies.feedback(" use red ", "fb:", true), Some("use red"));
        assert_eq!(
            replies.feedback("FB: use blue", "fb:", false),
            Some("use blue")
        );
        assert_eq!(
            replies.feedback("fb:   ", "fb:", true),
            None,
            "nothing said"
        );
        // A prefix cut inside a character is no prefix.
        assert_eq!(replies.feedback("fé", "fb:", false), None);
        assert_eq!(replies.feedback("anything", "", false), None);
        let any = FeedbackMessages::Any;
        assert_eq!(any.feedback("use green", "fb:", false), Some("use green"));
        assert_eq!(
            any.feedback("fb: use green", "fb:", false),
            Some("use green")
        );
        let config: Config =
            toml::from_str("[discord]\nfeedback_messages = \"any\"\nfeedback_prefix = \"!\"\n")
                .unwrap();
        assert_eq!(config.discord.feedback_messages, FeedbackMessages::Any);
        assert_eq!(config.discord.feedback_prefix, "!");
        assert_eq!(
            Config::default().discord.feedback_messages,
            FeedbackMessages::Replies
        );
    }

    #[test]
    fn the_bots_flush_window_defaults_to_a_few_milliseconds_and_is_capped_at_a_second() {
        let window = |text: &str| toml::from_str::<Config>(text).unwrap().store.flush_window();
        assert_eq!(window(""), crate::store::BOT_FLUSH_WINDOW);
        assert_eq!(
            window("[store]\nflush_window_ms = 0\n"),
            std::time::Duration::ZERO
        );
        assert_eq!(
            window("[store]\nflush_window_ms = 12\n"),
            std::time::Duration::from_millis(12)
        );
        assert_eq!(
            window("[store]\nflush_window_ms = 60000\n"),
            std::time::Duration::from_secs(1)
        );
    }

    #[test]
    fn an_agents_lease_lasts_fifteen_seconds_unless_set_and_never_under_three() {
        let config = |text: &str| toml::from_str::<Config>(text).unwrap();
        assert_eq!(
            config("").store.lease_duration(),
            std::time::Duration::from_secs(15)
        );
        let longer = config("[store]\nlease_secs = 60\n");
        assert_eq!(
            longer.store.lease_duration(),
            std::time::Duration::from_secs(60)
        );
        let short = config("[store]\nlease_secs = 2\n").validate().unwrap_err();
        assert!(short.to_string().contains("store.lease_secs"), "{short}");
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn example_config_parses_and_validates() {
        let text = include_str!("../../bot.toml.example");
        let config = Config::from_toml(text, Path::new("bot.toml.example")).unwrap();
        config.validate().unwrap();
        assert_eq!(config.agent.approve_n_default, 5);
        // The example shows the store's defaults, so copying it changes nothing by surprise.
        let defaults = StoreConfig::default();
        assert_eq!(config.store.cache_mb, defaults.cache_mb);
        assert_eq!(config.store.flush_window_ms, defaults.flush_window_ms);
    }

    #[test]
    fn shorter_vectors_are_asked_for_within_what_endpoints_allow() {
        let with = |dimensions: &str| {
            let text = format!(
                "[llm]\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"\n[memory]\ndimensions = {dimensions}\n[budget]\nfree_models = [\"m\", \"text-embedding-3-small\"]\n"
            );
            Config::from_toml(&text, Path::new("t.toml"))
                .unwrap()
                .validate()
        };
        assert!(with("256").is_ok());
        for refused in ["0", "8", "9000"] {
            let error = with(refused).unwrap_err().to_string();
            assert!(error.contains("memory.dimensions"), "{refused}: {error}");
        }
    }

    #[test]
    fn every_model_in_use_needs_a_price_or_to_be_listed_free() {
        let local = "[llm]\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"local-model\"\n[memory]\nenabled = false\n";
        let refused = |text: &str| {
            Config::from_toml(text, Path::new("t.toml"))
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string()
        };
        // Unpriced is refused on a local endpoint too: a local URL may be a proxy to a paid API.
        let error = refused(local);
        assert!(
            error.contains("budget.prices.\"local-model\"")
                && error.contains("budget.free_models")
                && error.contains("AUTOTHREAD_FREE_MODELS"),
            "{error}"
        );
        // Marked free in the file, or by the environment, it is accepted and costs nothing.
        let free = format!("{local}[budget]\nfree_models = [\"local-model\"]\n");
        let config = Config::from_toml(&free, Path::new("t.toml")).unwrap();
        config.validate().unwrap();
        assert!(config.budget.known_price("local-model").unwrap().is_free());
        let mut by_env = Config::from_toml(local, Path::new("t.toml")).unwrap();
        by_env.apply_env(&env_of(&[(
            "AUTOTHREAD_FREE_MODELS",
            " local-model , other ",
        )]));
        by_env.validate().unwrap();
        assert_eq!(by_env.budget.free_models, ["local-model", "other"]);
        // The embedding models (with memory on) and the models servers may choose count too.
        let embed = local.replace(
            "[memory]\nenabled = false\n",
            "[memory]\nenabled = true\npassage_model = \"e5-small\"\n",
        );
        let error = refused(&format!(
            "{embed}[budget]\nfree_models = [\"local-model\"]\n"
        ));
        assert!(error.contains("\"e5-small\""), "{error}");
        let offered = format!(
            "{local}[discord]\nmodels = [\"gpt-4o-2024-08-06\", \"mystery-70b\"]\n[budget]\nfree_models = [\"local-model\"]\n"
        );
        assert!(refused(&offered).contains("\"mystery-70b\""));
        let by_guild = format!(
            "{local}[discord.guild_models]\n\"42\" = [\"mystery-70b\"]\n[budget]\nfree_models = [\"local-model\"]\n"
        );
        assert!(refused(&by_guild).contains("\"mystery-70b\""));
        // A dated snapshot of a catalogued model has its family's price, cache discount included.
        let price = Config::default()
            .budget
            .known_price("gpt-4o-2024-08-06")
            .unwrap();
        assert_eq!(
            (price.input_per_million, price.cached_input_per_million),
            (2_500_000, 1_250_000)
        );
    }

    #[test]
    fn environment_overrides_file() {
        let mut config = Config::from_toml(
            "[llm]\nbase_url = \"http://file/v1\"\nmodel = \"file-model\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        config.apply_env(&env_of(&[
            ("OPENAI_BASE_URL", "http://env/v1"),
            ("OPENAI_MODEL", "env-model"),
            ("OPENAI_API_KEY", "sk-very-secret"),
            ("AUTOTHREAD_DATA_DIR", "/tmp/x"),
            ("DISCORD_TOKEN", "discord-secret"),
            ("DISCORD_DEV_GUILD", "42"),
        ]));
        assert_eq!(config.llm.base_url, "http://env/v1");
        assert_eq!(config.llm.model, "env-model");
        assert_eq!(config.store.data_dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!(config.discord.dev_guild, Some(42));
        assert_eq!(
            config.llm.api_key.as_ref().unwrap().expose(),
            "sk-very-secret"
        );
        let debug = format!("{config:?}");
        assert!(!debug.contains("sk-very-secret"), "{debug}");
        assert!(!debug.contains("discord-secret"), "{debug}");
        assert!(debug.contains("[redacted]"));
    }

    #[test]
    fn step_lines_cache_keys_and_cache_write_prices_are_read_and_checked() {
        let read = |text: &str| Config::from_toml(text, Path::new("t.toml"));
        let defaults = Config::default();
        assert_eq!(
            defaults.agent.step_lines,
            crate::core::prompt::DEFAULT_STEP_LINES
        );
        assert_eq!(defaults.llm.prompt_cache_key, PromptCacheKeyMode::Auto);
        let config =
            read("[agent]\nstep_lines = 40\n[llm]\nprompt_cache_key = \"always\"\n").unwrap();
        config.validate().unwrap();
        assert_eq!(config.agent.step_lines, 40);
        assert_eq!(config.llm.prompt_cache_key, PromptCacheKeyMode::Always);
        // More lines than are held for older steps could never be shown.
        let err = read("[agent]\nstep_lines = 1000\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("agent.step_lines"), "{err}");
        let err = read("[llm]\nprompt_cache_key = \"sometimes\"\n").unwrap_err();
        assert!(err.to_string().contains("sometimes"), "{err}");
        // A cache-write price is checked like the others, and priced into the model's price.
        let priced = "[llm]\nmodel = \"m\"\n[budget.prices.m]\ninput_per_million = 1.0\noutput_per_million = 5.0\n";
        let err = read(&format!("{priced}cache_write_per_million = -1.0\n"))
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("budget.prices.\"m\""), "{err}");
        let config = read(&format!("{priced}cache_write_per_million = 1.25\n")).unwrap();
        config.validate().unwrap();
        let price = config.budget.known_price("m").unwrap();
        assert_eq!(price.cache_write_per_million, Some(1_250_000));
        let unwritten = read(priced).unwrap().budget.known_price("m").unwrap();
        assert_eq!(unwritten.cache_write_per_million, None);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("[llm]\nbase_url = \"ftp://x\"\n", "llm.base_url"),
            ("[llm]\nmax_attempts = 0\n", "llm.max_attempts"),
            (
                "[agent]\napprove_n_default = 0\n",
                "agent.approve_n_default",
            ),
            (
                "[llm.models.tiny]\ncontext_tokens = 2048\nmax_tokens = 2000\n",
                "llm.models.\"tiny\"",
            ),
            ("[agent]\nautomatic = [\"read\"]\n", "agent.automatic"),
            ("[web]\nsearch_backend = \"brave\"\n", "web.search_backend"),
            ("[web]\nsearch_backend = \"searxng\"\n", "web.searxng_url"),
            ("[web]\nallow_hosts = [\"http://x/\"]\n", "web.allow_hosts"),
            ("[subagents]\nmax_per_agent = 0\n", "subagents"),
        ];
        for (text, field) in cases {
            let config = Config::from_toml(text, Path::new("t.toml")).unwrap();
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(field), "{err} should name {field}");
        }
        let err = Config::from_toml("[llm]\nmodle = \"x\"\n", Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("modle"), "{err}");
        let mut config = Config::default();
        config.apply_env(&env_of(&[("DISCORD_DEV_GUILD", "not-a-number")]));
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("discord.dev_guild"), "{err}");
    }

    #[test]
    fn the_message_content_intent_is_off_by_default_and_set_by_file_or_environment() {
        use super::discord::MessageContent;
        assert_eq!(
            Config::default().discord.message_content(),
            MessageContent::NotRequested
        );
        let mut config = Config::from_toml(
            "[discord]\nmessage_content_intent = true\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(config.discord.message_content(), MessageContent::Requested);
        config.apply_env(&env_of(&[("DISCORD_MESSAGE_CONTENT_INTENT", "False")]));
        assert_eq!(
            config.discord.message_content(),
            MessageContent::NotRequested
        );
        config.validate().unwrap();
        config.apply_env(&env_of(&[("DISCORD_MESSAGE_CONTENT_INTENT", "maybe")]));
        let err = config.validate().unwrap_err().to_string();
        assert!(
            err.contains("discord.message_content_intent") && err.contains("\"maybe\""),
            "{err}"
        );
    }

    #[test]
    fn quorums_are_read_per_class_and_server_and_checked() {
        let config = Config::from_toml(
            "[approvals.quorum]\nexternal = 2\n[approvals.guilds.\"42\".quorum]\nwrite = 3\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let bot_wide = config.approvals.for_guild(None);
        assert_eq!(bot_wide.needed(Risk::External), 2);
        assert_eq!(bot_wide.needed(Risk::Write), 1);
        let guild = config.approvals.for_guild(Some(&"42".into()));
        assert_eq!(guild.needed(Risk::Write), 3);
        assert_eq!(guild.needed(Risk::External), 2);
        let zero = Config::from_toml("[approvals.quorum]\nwrite = 0\n", Path::new("t.toml"))
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(zero.contains("approvals.quorum.write = 0"), "{zero}");
    }

    #[test]
    fn a_guild_policy_changes_only_the_classes_it_names() {
        let config = Config::from_toml(
            "[policy]\nnetwork = \"ask\"\n[policy.guilds.\"42\"]\nwrite = \"deny\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let bot_wide = config.policy.for_guild(None);
        assert_eq!(bot_wide.action(Risk::Network), ClassAction::Ask);
        assert_eq!(bot_wide.action(Risk::Write), ClassAction::Auto);
        let guild = config.policy.for_guild(Some(&"42".into()));
        assert_eq!(guild.action(Risk::Write), ClassAction::Deny);
        assert_eq!(guild.action(Risk::Network), ClassAction::Ask);
        assert_eq!(guild.action(Risk::Control), ClassAction::Ask);
        assert_eq!(config.policy.for_guild(Some(&"7".into())), bot_wide);
        let bad_action = Config::from_toml("[policy]\nread = \"maybe\"\n", Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(bad_action.contains("is not an action"), "{bad_action}");
        let bad_class = Config::from_toml("[policy]\nshell = \"auto\"\n", Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            bad_class.contains("unknown policy entry \"shell\""),
            "{bad_class}"
        );
        let bad_guild = "[policy.guilds.\"42\"]\nread = \"sometimes\"\n";
        assert!(Config::from_toml(bad_guild, Path::new("t.toml")).is_err());
    }

    #[test]
    fn server_admins_loosen_only_to_what_the_config_lists_and_their_choices_apply_in_their_server()
    {
        use crate::core::person::Person;
        use crate::core::policy::{AdminChoice, AdminChoices};
        let default = Config::default();
        let mut choices = AdminChoices::default();
        let chosen = |action| {
            Some(AdminChoice {
                action,
                by: Person::discord(9, "admin"),
                at: chrono::DateTime::from_timestamp(0, 0).unwrap_or_default(),
            })
        };
        choices.set(Risk::Control, chosen(ClassAction::Remember));
        choices.set(Risk::External, chosen(ClassAction::Auto));
        let guild = default.policy.for_server(Some(&"42".into()), &choices);
        assert_eq!(guild.action(Risk::Control), ClassAction::Remember);
        assert_eq!(
            guild.action(Risk::External),
            ClassAction::Ask,
            "auto is not allowed by default"
        );
        assert_eq!(
            default.policy.for_server(None, &choices),
            default.policy.for_guild(None),
            "the console has no server admins"
        );
        let generous = Config::from_toml(
            "[policy]\nserver_admins_may_loosen_to = [\"auto\", \"remember\"]\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let guild = generous.policy.for_server(Some(&"42".into()), &choices);
        assert_eq!(guild.action(Risk::External), ClassAction::Auto);
        let none = Config::from_toml(
            "[policy]\nserver_admins_may_loosen_to = []\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let guild = none.policy.for_server(Some(&"42".into()), &choices);
        assert_eq!(guild.action(Risk::Control), ClassAction::Ask);
        let bad = Config::from_toml(
            "[policy]\nserver_admins_may_loosen_to = [\"deny\"]\n",
            Path::new("t.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            bad.contains("server_admins_may_loosen_to holds \"deny\""),
            "{bad}"
        );
    }

    #[test]
    fn the_prompt_budget_narrows_a_large_window_and_an_agent_may_carry_its_own() {
        let mut config = Config::default();
        // gpt-4o-mini: 128k window, 1,500-token reply reserve.
        let limits = config.llm.context_limits("gpt-4o-mini", None);
        assert_eq!(limits.send_limit(), DEFAULT_PROMPT_BUDGET_TOKENS as usize);
        assert_eq!(
            config
                .llm
                .context_limits("gpt-4o-mini", Some(3_000))
                .send_limit(),
            3_000
        );
        assert_eq!(
            config
                .llm
                .context_limits("gpt-4o-mini", Some(0))
                .context_tokens,
            128_000
        );
        // A window smaller than the budget is left as it is.
        assert_eq!(
            config.llm.context_limits("smollm2", None).context_tokens,
            4_096
        );
        config.llm.prompt_budget_tokens = 500;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("llm.prompt_budget_tokens"), "{err}");
    }

    #[test]
    fn model_specs_fall_back_conservatively() {
        let config = Config::default();
        assert_eq!(config.llm.model_spec("gpt-4o-mini").context_tokens, 128_000);
        assert_eq!(config.llm.model_spec("smollm2"), FALLBACK_MODEL);
    }
}
