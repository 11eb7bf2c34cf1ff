//! The sections of `bot.toml` as typed structs with their defaults: the model endpoint and known
//! models, agents, workspace limits, the store, operations, memory, the command policy and
//! sub-agents (Discord and the web have their own files).
//!
//! `LlmConfig` carries the provider (OpenAI or Azure, with `api_version`); `model_spec_with_source`
//! finds a model's window in `[llm.models]`, then the catalogue, then what the server reported,
//! else a 4096-token guess that is warned about; `reply_tokens` keeps a floor for reasoning models.
//! `PolicyConfig` maps each `Risk` to a `ClassAction`, bot-wide and per server (`for_guild`, the
//! operator's policy), and says how far server admins may loosen it (`server_admins_may_loosen_to`,
//! an `AdminLeeway`); `for_server` and `for_agent` lay a server's admins' choices (kept in the
//! store) over the operator's policy. Unknown classes and actions are refused when the file is
//! read.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::core::commands::Risk;
use crate::core::policy::{AdminChoices, AdminLeeway, ClassAction, Policy, ALL_RISKS};
use crate::core::prompt::ContextLimits;
use crate::core::state::GuildId;

use super::models;
use super::Secret;

/// When a cycle's reply is streamed. Streaming costs the bot time for every piece of a reply
/// (measured: several milliseconds a cycle when a fast server sends a whole reply at once), so by
/// default only a person watching a terminal gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// The console on a terminal prints replies as they stream in; Discord asks for whole ones.
    Auto,
    /// Every cycle streams (Discord's live status also counts the tokens as they come).
    Always,
    /// Whole replies only, for a server that cannot stream.
    Never,
}

/// How structured output is requested from an endpoint; not every OpenAI-compatible server supports every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormatMode {
    JsonSchema,
    JsonObject,
    None,
}

impl ResponseFormatMode {
    /// The name used in bot.toml and saved with agents.
    pub fn label(self) -> &'static str {
        match self {
            ResponseFormatMode::JsonSchema => "json_schema",
            ResponseFormatMode::JsonObject => "json_object",
            ResponseFormatMode::None => "none",
        }
    }

    pub fn parse(label: &str) -> Option<Self> {
        [
            ResponseFormatMode::JsonSchema,
            ResponseFormatMode::JsonObject,
            ResponseFormatMode::None,
        ]
        .into_iter()
        .find(|mode| mode.label() == label)
    }
}

/// How much of the reply format the schema sent with `json_schema` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "snake_case")]
pub enum ReplySchemaMode {
    /// The full schema for free models (a local server's grammar enforces each command's
    /// arguments, and its input costs nothing), the compact one for priced models, whose
    /// providers bill the schema as input.
    #[default]
    Auto,
    /// A variant per command with its typed arguments (about 1,400 tokens with every command).
    Full,
    /// The envelope only: the thought fields, a command name and an arguments object, typed.
    Compact,
}

/// When requests carry `prompt_cache_key`, the agent's key to the provider's prompt cache: OpenAI
/// routes requests with the same key and prefix to the same cache, so an agent's calls, which
/// share their start, are served from it more often. Servers that are not OpenAI's may refuse a
/// field they do not know, so it is sent only to OpenAI's own API unless an operator says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "snake_case")]
pub enum PromptCacheKeyMode {
    /// Only when `base_url` is OpenAI's own API (`https://api.openai.com/…`).
    #[default]
    Auto,
    /// To any server (one known to take it, as Azure OpenAI and many proxies do).
    Always,
    Never,
}

/// Context size and reply reserve of one model, and whether it reasons (unset: worked out from
/// its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub context_tokens: u32,
    pub max_tokens: u32,
    #[serde(default)]
    pub reasoning: Option<bool>,
}

/// Which API shape the endpoint speaks. Azure OpenAI is chosen explicitly, never guessed from a
/// host name: its deployment URL takes an `api-version` query and the key as an `api-key` header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    #[default]
    Openai,
    Azure,
}

/// Where a model's context window came from; anything but a guess is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextSource {
    Configured,
    Catalogue,
    /// The server's `/models` listing said so (llama.cpp, vLLM, LM Studio, OpenRouter).
    Reported,
    Guessed,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    pub base_url: String,
    pub model: String,
    /// Used for the watchdog's rethink; empty means "use `model`".
    pub smart_model: String,
    pub response_format: ResponseFormatMode,
    /// When each cycle's reply is streamed (server-sent events), see `StreamMode`.
    pub stream: StreamMode,
    /// With `json_schema`: the full schema or the compact envelope (see `ReplySchemaMode`).
    pub reply_schema: ReplySchemaMode,
    /// When requests name the agent's prompt-cache key (see `PromptCacheKeyMode`).
    pub prompt_cache_key: PromptCacheKeyMode,
    pub timeout_secs: u64,
    pub max_attempts: u32,
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    pub temperature: Option<f32>,
    /// Per-model overrides of the built-in context table.
    pub models: BTreeMap<String, ModelSpec>,
    pub provider: Provider,
    /// Azure OpenAI's `api-version` query parameter; required with `provider = "azure"`.
    pub api_version: Option<String>,
    /// Sent to reasoning models only (`minimal`, `low`, `medium`, `high`…); unset: the model's
    /// default. Lower effort spends fewer (output-priced) reasoning tokens per cycle.
    pub reasoning_effort: Option<String>,
    /// The most a cycle's prompt may hold, whatever the model's window: a long-running agent on a
    /// 128k model keeps only the history that fits in this, so its calls cost about what they
    /// cost on a small window. 0: the whole window. An agent may carry its own (the console's
    /// `--prompt-tokens`).
    pub prompt_budget_tokens: u32,
    /// Context windows the server reported at start-up, by model.
    #[serde(skip)]
    pub reported_contexts: BTreeMap<String, u32>,
    #[serde(skip)]
    pub api_key: Option<Secret>,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            smart_model: String::new(),
            response_format: ResponseFormatMode::JsonSchema,
            stream: StreamMode::Auto,
            reply_schema: ReplySchemaMode::Auto,
            prompt_cache_key: PromptCacheKeyMode::Auto,
            timeout_secs: 120,
            max_attempts: 6,
            retry_initial_ms: 1000,
            retry_max_ms: 30_000,
            temperature: None,
            models: BTreeMap::new(),
            provider: Provider::Openai,
            api_version: None,
            reasoning_effort: None,
            prompt_budget_tokens: DEFAULT_PROMPT_BUDGET_TOKENS,
            reported_contexts: BTreeMap::new(),
            api_key: None,
        }
    }
}

/// An unknown model's window: a conservative 4k, so an unknown local model is never sent more than
/// it can take. Operators set the real one in `[llm.models]`.
pub(crate) const FALLBACK_MODEL: ModelSpec = ModelSpec {
    context_tokens: 4_096,
    max_tokens: 1_000,
    reasoning: None,
};

/// Enough for the fixed parts, two steps in full and a few dozen step lines.
pub const DEFAULT_PROMPT_BUDGET_TOKENS: u32 = 16_000;
/// Below this a prompt cannot hold the fixed parts and a step.
pub const MIN_PROMPT_BUDGET_TOKENS: u32 = 2_000;

/// The least a reasoning model's call may answer in (see `LlmConfig::reply_tokens`).
pub const REASONING_REPLY_FLOOR: u32 = 2_000;

impl LlmConfig {
    pub fn model_spec(&self, model: &str) -> ModelSpec {
        self.model_spec_with_source(model).0
    }

    /// The window a cycle's prompt is built for: the model's, narrowed to the prompt budget (the
    /// agent's own, else the configured one) plus the reply reserve.
    pub fn context_limits(&self, model: &str, agent_budget: Option<u32>) -> ContextLimits {
        let spec = self.model_spec(model);
        let budget = agent_budget.unwrap_or(self.prompt_budget_tokens);
        let context_tokens = match budget {
            0 => spec.context_tokens,
            budget => spec
                .context_tokens
                .min(budget.saturating_add(spec.max_tokens)),
        };
        ContextLimits {
            context_tokens,
            max_tokens: spec.max_tokens,
        }
    }

    /// The model's window and reply reserve, and where the window came from: `[llm.models]`,
    /// the catalogue, the server's report, or the 4k guess.
    pub fn model_spec_with_source(&self, model: &str) -> (ModelSpec, ContextSource) {
        if let Some(spec) = self.models.get(model) {
            return (*spec, ContextSource::Configured);
        }
        if let Some(known) = models::known(model) {
            let spec = ModelSpec {
                context_tokens: known.context_tokens,
                max_tokens: known.max_tokens,
                reasoning: Some(known.reasoning),
            };
            return (spec, ContextSource::Catalogue);
        }
        if let Some(&context_tokens) = self.reported_contexts.get(model) {
            // A reported window keeps a quarter for the reply, up to the usual reserve.
            let spec = ModelSpec {
                context_tokens,
                max_tokens: (context_tokens / 4).clamp(1, FALLBACK_MODEL.max_tokens),
                reasoning: None,
            };
            return (spec, ContextSource::Reported);
        }
        (FALLBACK_MODEL, ContextSource::Guessed)
    }

    /// What the log says when `model`'s window is the 4k guess.
    pub fn guessed_context_warning(&self, model: &str) -> Option<String> {
        let (spec, source) = self.model_spec_with_source(model);
        (source == ContextSource::Guessed).then(|| {
            format!(
                "model {model}: its context window is unknown (not in [llm.models], not in the \
                 built-in table, not reported by the server); assuming {} tokens. Set \
                 [llm.models.\"{model}\"] context_tokens and max_tokens",
                spec.context_tokens
            )
        })
    }

    /// The reply budget a request for `model` goes out with. A reasoning model thinks inside its
    /// reply budget, so a short reply (a 200-token summary) would be all thinking and no answer:
    /// it gets at least `REASONING_REPLY_FLOOR`, up to the model's reserve.
    pub fn reply_tokens(&self, model: &str, wanted: u32) -> u32 {
        if self.is_reasoning(model) {
            wanted.max(REASONING_REPLY_FLOOR.min(self.model_spec(model).max_tokens))
        } else {
            wanted
        }
    }

    /// The fewest reply tokens a call may be cut to when the budget cannot cover its whole
    /// reserve: reasoning models keep their floor, others `REPLY_FLOOR_TOKENS`.
    pub fn reply_floor(&self, model: &str) -> u32 {
        if self.is_reasoning(model) {
            REASONING_REPLY_FLOOR
        } else {
            crate::core::budget::REPLY_FLOOR_TOKENS
        }
    }

    /// Whether requests for `model` take `max_completion_tokens` and no temperature.
    pub fn is_reasoning(&self, model: &str) -> bool {
        self.models
            .get(model)
            .and_then(|spec| spec.reasoning)
            .unwrap_or_else(|| models::is_reasoning(model))
    }

    pub fn smart_model(&self) -> Option<&str> {
        (!self.smart_model.is_empty()).then_some(self.smart_model.as_str())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Stop asking the model after this many cycles; 0 means no limit.
    pub cycle_limit: u64,
    /// The N offered by Approve ×N when the user gives none.
    pub approve_n_default: u32,
    /// How many of the newest steps the Progress section shows in full before switching to summaries.
    pub full_steps: usize,
    /// How many older steps the Progress section always shows as a line (the window allowing);
    /// older ones leave it in blocks and are kept in the workspace and long-term memory.
    pub step_lines: usize,
    /// Replaced by `[policy]`; kept only to tell operators so (see `validate`), and not shown.
    #[serde(skip_serializing)]
    pub automatic: Option<Vec<Risk>>,
    /// Commands switched off for every agent.
    pub disabled_commands: Vec<String>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            cycle_limit: 0,
            approve_n_default: 5,
            full_steps: 2,
            step_lines: crate::core::prompt::DEFAULT_STEP_LINES,
            automatic: None,
            disabled_commands: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceConfig {
    pub max_file_bytes: u64,
    pub max_agent_bytes: u64,
    /// Tool output longer than this is cut (with a marker) before it reaches the history.
    pub max_output_chars: usize,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        WorkspaceConfig {
            max_file_bytes: 1024 * 1024,
            max_agent_bytes: 16 * 1024 * 1024,
            max_output_chars: 20_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Where the sled store lives; empty means the platform data directory. With `url`, what
    /// each process keeps for itself (saved vector indexes).
    pub data_dir: Option<PathBuf>,
    /// A PostgreSQL database (`postgres://user:password@host:port/database`) that holds the store
    /// instead of sled, shared by every process given it. Also AUTOTHREAD_STORE_URL.
    pub url: Option<super::Secret>,
    /// sled's page cache in MiB.
    pub cache_mb: u64,
    /// The bot's flushes start at most once per this many milliseconds (0: as soon as asked);
    /// the console, with one agent, never waits.
    pub flush_window_ms: u64,
    /// With `url`: how long a process's lease on an agent lasts unrenewed (renewed every third of
    /// it), so how soon another process continues the agents of one that died.
    pub lease_secs: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            data_dir: None,
            url: None,
            cache_mb: crate::store::DEFAULT_CACHE_BYTES >> 20,
            flush_window_ms: crate::store::BOT_FLUSH_WINDOW.as_millis() as u64,
            lease_secs: DEFAULT_LEASE_SECS,
        }
    }
}

/// An agent's lease by default (`store.lease_secs`).
pub const DEFAULT_LEASE_SECS: u64 = 15;

/// The shortest lease `store.lease_secs` accepts: renewed every third of it, a shorter one would
/// be lost to one slow round trip.
pub const MIN_LEASE_SECS: u64 = 3;

impl StoreConfig {
    /// How long an agent's lease lasts unrenewed.
    pub fn lease_duration(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.lease_secs.max(MIN_LEASE_SECS))
    }

    pub fn cache_bytes(&self) -> u64 {
        self.cache_mb.max(1) << 20
    }

    /// The bot's flush window (see `store::durable`), at most a second: longer would only slow
    /// every step.
    pub fn flush_window(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.flush_window_ms.min(1000))
    }
}

/// What a deployment watches: the local HTTP listener and the graceful shutdown.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct OpsConfig {
    /// Where `run` serves /healthz, /readyz and /metrics; empty: no listener. Also
    /// AUTOTHREAD_OPS_LISTEN. Port 0 picks a free port (the log says which).
    pub listen: String,
    /// On SIGTERM or SIGINT, how long calls and commands under way may take to finish.
    pub shutdown_grace_secs: u64,
}

impl Default for OpsConfig {
    fn default() -> Self {
        OpsConfig {
            listen: "127.0.0.1:9464".into(),
            shutdown_grace_secs: 20,
        }
    }
}

/// Long-term memory: the embedding endpoint and models, recall, and the vector index.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    pub enabled: bool,
    /// The embeddings endpoint, including /v1; unset: `llm.base_url`. Also OPENAI_EMBED_BASE.
    pub base_url: Option<String>,
    /// The model that embeds what is stored.
    pub passage_model: String,
    /// The model that embeds searches; empty: `passage_model` (E5 models need their own).
    pub query_model: String,
    /// Asks the endpoint for vectors of this many dimensions (OpenAI's text-embedding-3 models
    /// shorten theirs on request); unset: the model's own. Each memory stores 4 bytes a dimension.
    pub dimensions: Option<u32>,
    /// Texts per embeddings request.
    pub batch_size: usize,
    /// Memories searched for each cycle's recall.
    pub recall_top_k: usize,
    /// The memory section's share of the model's context, and its ceiling in tokens.
    pub recall_context_percent: usize,
    pub max_recall_tokens: usize,
    /// Longest memory a cycle writes, in characters.
    pub memory_chars: usize,
    /// Memories less similar to the cycle's query than this (cosine, -1 to 1) are not recalled
    /// unless pinned: a weak match costs tokens and tells the agent nothing.
    pub min_relevance: f32,
    /// Below this many memories an agent is searched exactly (it is faster there; see the benchmark).
    pub exact_below: usize,
    /// Vectors kept in memory across all agents' indexes; the least recently used agents go first.
    pub max_cached_vectors: usize,
    /// HNSW parameters: links per node, candidates while building, candidates while searching.
    pub hnsw_m: usize,
    pub hnsw_ef_construction: usize,
    pub hnsw_ef_search: usize,
    /// A cycle waits at most this long for one embeddings request, and tries it at most
    /// `max_attempts` times: memory is an aid, so it gets a tighter bound than the chat call.
    pub timeout_secs: u64,
    pub max_attempts: u32,
    /// Transient failures in a row (5xx, timeouts) that turn memory off, first for
    /// `cooldown_secs`, doubling up to `probe_interval_secs`.
    pub failures_to_open: u32,
    pub cooldown_secs: u64,
    /// How long memory stays off after the endpoint refused a request (a 4xx, or 501 from a
    /// server without embeddings) before it is tried again.
    pub probe_interval_secs: u64,
    /// Memories an agent may have waiting for the endpoint; past this the oldest are dropped.
    pub max_queued_per_agent: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            enabled: true,
            base_url: None,
            passage_model: "text-embedding-3-small".into(),
            query_model: String::new(),
            dimensions: None,
            batch_size: 32,
            recall_top_k: 10,
            recall_context_percent: 25,
            max_recall_tokens: 2500,
            memory_chars: 1200,
            min_relevance: 0.2,
            exact_below: 5_000,
            max_cached_vectors: 1_000_000,
            hnsw_m: 16,
            hnsw_ef_construction: 200,
            hnsw_ef_search: 64,
            timeout_secs: 10,
            max_attempts: 2,
            failures_to_open: 3,
            cooldown_secs: 30,
            probe_interval_secs: 600,
            max_queued_per_agent: 200,
        }
    }
}

impl MemoryConfig {
    pub fn query_model(&self) -> &str {
        if self.query_model.is_empty() {
            &self.passage_model
        } else {
            &self.query_model
        }
    }
}

/// What each risk class does: `[policy]` for every server (and the console), `[policy.guilds."ID"]`
/// for one server. Server admins may change their server's within `server_admins_may_loosen_to`;
/// agents' owners may narrow further, never widen.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(try_from = "BTreeMap<String, PolicyEntry>")]
pub struct PolicyConfig {
    /// The bot-wide action of each class the config names (the others keep their default).
    pub classes: BTreeMap<Risk, ClassAction>,
    /// Per server (by its id), the classes it changes.
    pub guilds: BTreeMap<String, BTreeMap<Risk, ClassAction>>,
    /// `server_admins_may_loosen_to`: the actions server admins may choose for a class the
    /// config sets stricter (`["remember"]` by default).
    pub admin_leeway: AdminLeeway,
}

/// The key of `[policy]` listing what server admins may loosen a class to.
const LEEWAY_KEY: &str = "server_admins_may_loosen_to";

/// One key of `[policy]`: a class's action, the admins' leeway, or the `guilds` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum PolicyEntry {
    Action(String),
    Actions(Vec<String>),
    Guilds(BTreeMap<String, BTreeMap<Risk, ClassAction>>),
}

/// Why a `[policy]` entry is refused; serde puts the text into the config's load error.
#[derive(Debug, thiserror::Error)]
pub enum PolicyEntryError {
    #[error("{key} = {text:?} is not an action: use \"auto\", \"remember\", \"ask\" or \"deny\"")]
    NotAnAction { key: String, text: String },
    #[error("unknown policy entry {key:?}: expected a class ({classes}) set to \"auto\", \"remember\", \"ask\" or \"deny\", {LEEWAY_KEY} = [...], or [policy.guilds.\"ID\"]")]
    Unknown { key: String, classes: String },
    #[error("{LEEWAY_KEY} holds {text:?}: list \"auto\", \"remember\" or \"ask\" (the actions server admins may loosen a class to)")]
    NotALeeway { text: String },
}

impl TryFrom<BTreeMap<String, PolicyEntry>> for PolicyConfig {
    type Error = PolicyEntryError;

    fn try_from(entries: BTreeMap<String, PolicyEntry>) -> Result<Self, PolicyEntryError> {
        let mut config = PolicyConfig::default();
        for (key, entry) in entries {
            match (Risk::parse(&key), entry) {
                (Some(risk), PolicyEntry::Action(text)) => {
                    let action =
                        ClassAction::parse(&text).ok_or_else(|| PolicyEntryError::NotAnAction {
                            key: key.clone(),
                            text: text.clone(),
                        })?;
                    config.classes.insert(risk, action);
                }
                (None, PolicyEntry::Guilds(guilds)) if key == "guilds" => config.guilds = guilds,
                (None, PolicyEntry::Actions(actions)) if key == LEEWAY_KEY => {
                    let parsed = actions
                        .iter()
                        .map(|text| match ClassAction::parse(text) {
                            Some(action) if action != ClassAction::Deny => Ok(action),
                            _ => Err(PolicyEntryError::NotALeeway { text: text.clone() }),
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    config.admin_leeway = AdminLeeway::new(parsed);
                }
                _ => {
                    let classes: Vec<&str> = ALL_RISKS.iter().map(|r| r.label()).collect();
                    return Err(PolicyEntryError::Unknown {
                        key,
                        classes: classes.join(", "),
                    });
                }
            }
        }
        Ok(config)
    }
}

/// Written as it is read: each class with the action in force (its default when the config
/// names none), and the servers' changes under `guilds`.
#[cfg(test)]
impl serde::Serialize for PolicyConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let in_force = self.for_guild(None);
        let mut map = serializer.serialize_map(Some(ALL_RISKS.len() + 1))?;
        for risk in ALL_RISKS {
            map.serialize_entry(risk.label(), &in_force.action(risk))?;
        }
        map.serialize_entry("guilds", &self.guilds)?;
        map.end()
    }
}

impl PolicyConfig {
    /// The policy of the server an agent lives in, `choices` being its admins' (the store's
    /// `server_policy`; none outside a server).
    pub fn for_agent(
        &self,
        agent: &crate::core::state::AgentState,
        choices: &AdminChoices,
    ) -> Policy {
        self.for_server(agent.money.spender.guild.as_ref(), choices)
    }

    /// A server's policy: the operator's for it with its admins' choices the operator allows.
    pub fn for_server(&self, guild: Option<&GuildId>, choices: &AdminChoices) -> Policy {
        let operator = self.for_guild(guild);
        match guild {
            Some(_) => operator.with_admin_choices(choices, &self.admin_leeway),
            // Outside a server there are no server admins.
            None => operator,
        }
    }

    /// The operator's policy for one server (`None`: the console, or an agent outside any
    /// server): what the config says, before the server's admins' choices.
    pub fn for_guild(&self, guild: Option<&GuildId>) -> Policy {
        let bot_wide = Policy::default().with_all(&self.classes);
        match guild.and_then(|g| self.guilds.get(g.as_str())) {
            Some(changes) => bot_wide.with_all(changes),
            None => bot_wide,
        }
    }
}

/// Sub-agents (`start_agent` and friends): helper chats an agent delegates to, paid by it.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(default, deny_unknown_fields)]
pub struct SubagentConfig {
    pub enabled: bool,
    /// Sub-agents one agent may have at once.
    pub max_per_agent: usize,
    /// Messages a sub-agent's chat keeps; older exchanges are dropped from what it is sent.
    pub max_messages: usize,
    /// The longest reply a sub-agent may give, in tokens.
    pub reply_max_tokens: u32,
}

impl Default for SubagentConfig {
    fn default() -> Self {
        SubagentConfig {
            enabled: true,
            max_per_agent: 5,
            max_messages: 40,
            reply_max_tokens: 800,
        }
    }
}
