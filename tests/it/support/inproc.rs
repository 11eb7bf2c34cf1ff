//! In-process stand-ins for running the agent runtime inside a test: a scripted chat model, a
//! deterministic embedder (hashed bag of words), and a surface that records and approves.

use autothread::core::budget::Micros;
use autothread::core::event::CallPurpose;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use autothread::core::decision::Decision;
use autothread::core::history::Episode;
use autothread::core::state::{AgentState, PauseReason, Proposal};
use autothread::core::usage::Usage;
use autothread::llm::embed::{EmbedPurpose, Embedded, Embedder};

use super::fake_openai::hash_embedding;
use autothread::llm::{ChatModel, ChatReply, ChatRequest, LlmError};
use autothread::runtime::AgentHandle;
use autothread::runtime::Surface;
use autothread::tools::preview::Preview;

/// Answers cycle calls from a script and summaries with a fixed line; keeps every cycle prompt.
#[derive(Default)]
pub struct ScriptedModel {
    pub replies: Mutex<VecDeque<String>>,
    pub cycle_prompts: Mutex<Vec<ChatRequest>>,
}

impl ScriptedModel {
    pub fn new(replies: impl IntoIterator<Item = String>) -> Self {
        ScriptedModel {
            replies: Mutex::new(replies.into_iter().collect()),
            cycle_prompts: Mutex::new(Vec::new()),
        }
    }

    pub fn cycle_calls(&self) -> usize {
        self.cycle_prompts.lock().unwrap().len()
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    async fn complete(&self, request: ChatRequest) -> Result<ChatReply, LlmError> {
        let content = if request.purpose == (CallPurpose::Summary { cycle: 0 }).marker() {
            "Summary: did one step.".to_string()
        } else {
            self.cycle_prompts.lock().unwrap().push(request.clone());
            self.replies
                .lock()
                .unwrap()
                .pop_front()
                .ok_or_else(|| LlmError::BadResponse("no scripted reply left".into()))?
        };
        Ok(ChatReply {
            content,
            usage: Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 5,
                cached_prompt_tokens: 0,
                cache_write_tokens: 0,
            }),
        })
    }
}

/// A chat model that answers by rule: `respond` sees each request (summaries are answered with a
/// fixed line); every other request is kept for the test to inspect. Each reply reports 40 prompt
/// and 7 completion tokens, below any call's reservation, so the ledger charges exactly that.
pub struct RuleModel {
    pub respond: Box<dyn Fn(&ChatRequest) -> String + Send + Sync>,
    pub requests: Mutex<Vec<ChatRequest>>,
    pub summaries: AtomicUsize,
}

impl RuleModel {
    pub fn new(respond: impl Fn(&ChatRequest) -> String + Send + Sync + 'static) -> Self {
        RuleModel {
            respond: Box::new(respond),
            requests: Mutex::new(Vec::new()),
            summaries: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl ChatModel for RuleModel {
    async fn complete(&self, request: ChatRequest) -> Result<ChatReply, LlmError> {
        let content = if request.purpose == (CallPurpose::Summary { cycle: 0 }).marker() {
            self.summaries.fetch_add(1, Ordering::SeqCst);
            "Summary: did one step.".to_string()
        } else {
            self.requests.lock().unwrap().push(request.clone());
            (self.respond)(&request)
        };
        Ok(ChatReply {
            content,
            usage: Some(Usage {
                prompt_tokens: 40,
                completion_tokens: 7,
                cached_prompt_tokens: 0,
                cache_write_tokens: 0,
            }),
        })
    }
}

/// The last user message of a request (what a command or a cycle sent last).
pub fn last_user(request: &ChatRequest) -> &str {
    request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == autothread::core::message::Role::User)
        .map(|m| m.content.as_str())
        .unwrap_or("")
}

/// An embedder on `hash_embedding` that can be switched off. It names two models, one for
/// memories and one for queries, as E5-style models need, unless `one_model` is set.
#[derive(Default)]
pub struct HashEmbedder {
    pub down: AtomicBool,
    pub calls: AtomicUsize,
    pub one_model: AtomicBool,
    /// The texts of every call, in order.
    pub inputs: Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl Embedder for HashEmbedder {
    fn model(&self, purpose: EmbedPurpose) -> &str {
        match purpose {
            EmbedPurpose::Query if !self.one_model.load(Ordering::SeqCst) => "hash-query",
            _ => "hash-passage",
        }
    }

    async fn embed(&self, texts: &[String], _purpose: EmbedPurpose) -> Result<Embedded, LlmError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inputs.lock().unwrap().push(texts.to_vec());
        if self.down.load(Ordering::SeqCst) {
            return Err(LlmError::Unavailable {
                attempts: 3,
                detail: "HTTP 503".into(),
                billing: autothread::llm::Billing::MayBeBilled,
            });
        }
        Ok(Embedded {
            vectors: texts.iter().map(|t| hash_embedding(t)).collect(),
            prompt_tokens: Some(texts.iter().map(|t| t.len() as u64 / 4).sum()),
        })
    }
}

/// Records what the humans would see and approves every card (or, with `deny_cards`, denies it,
/// which pauses the agent).
#[derive(Default)]
pub struct Recorder {
    pub notices: Mutex<Vec<String>>,
    pub proposals: Mutex<Vec<u64>>,
    /// Every proposal shown: command name, and whether it ran without a card.
    pub shown: Mutex<Vec<(String, bool)>>,
    /// What each card said its command would send out (for a tainted agent).
    pub outgoing: Mutex<Vec<Option<String>>>,
    /// The diff of every card that writes a file.
    pub previews: Mutex<Vec<String>>,
    pub deny_cards: AtomicBool,
    /// Nobody answers the cards: they wait until their deadline.
    pub leaves_cards_unanswered: AtomicBool,
    /// Shows proposals before they are stored, as the console does.
    pub shows_unstored_proposals: AtomicBool,
    /// Runs once, when the first card is shown (after its diff was made): a test changes the
    /// world between showing and running here.
    pub on_first_card: Mutex<Option<ShowHook>>,
}

/// What `Recorder::on_first_card` runs, with the agent as the card shows it.
pub type ShowHook = Box<dyn FnOnce(&AgentState) + Send>;

#[async_trait]
impl Surface for Recorder {
    fn needs_stored_proposals(&self) -> bool {
        !self.shows_unstored_proposals.load(Ordering::SeqCst)
    }
    async fn show_profile(&self, _agent: &AgentState) {}
    async fn show_proposal(
        &self,
        agent: &AgentState,
        proposal: &Proposal,
        shown: autothread::runtime::ShownAs,
        preview: Option<&Preview>,
    ) {
        let auto = shown == autothread::runtime::ShownAs::AutoApproved;
        if let Some(preview) = preview {
            self.previews.lock().unwrap().push(preview.diff.clone());
        }
        let hook = self.on_first_card.lock().unwrap().take();
        if let Some(hook) = hook {
            hook(agent);
        }
        self.proposals.lock().unwrap().push(proposal.cycle);
        self.outgoing
            .lock()
            .unwrap()
            .push(proposal.outgoing.as_ref().map(|o| o.data.clone()));
        self.shown
            .lock()
            .unwrap()
            .push((proposal.command.name.clone(), auto));
    }
    async fn request_decision(
        &self,
        _agent: &AgentState,
        proposal: &Proposal,
        handle: AgentHandle,
    ) {
        if self.leaves_cards_unanswered.load(Ordering::SeqCst) {
            return;
        }
        let cycle = proposal.cycle;
        let decision = if self.deny_cards.load(Ordering::SeqCst) {
            Decision::Deny
        } else {
            Decision::Approve
        };
        tokio::spawn(async move {
            let tester = autothread::core::person::Person::console("tester");
            let _ = handle.decide(cycle, decision, &tester).await;
        });
    }
    async fn show_result(&self, _agent: &AgentState, _episode: &Episode) {}
    async fn notify(&self, _agent: &AgentState, text: &str) {
        self.notices.lock().unwrap().push(text.to_string());
    }
    async fn paused(&self, _agent: &AgentState, _reason: &PauseReason) {}
    async fn finished(&self, _agent: &AgentState, _reason: &str) {}
    async fn ask_user(
        &self,
        _agent: &autothread::core::state::AgentView,
        _question: &str,
    ) -> Result<String, autothread::tools::NoAnswer> {
        Err(autothread::tools::NoAnswer::NobodyToAsk)
    }
}

/// An agent reply with this command (all thoughts filled).
pub fn reply(command: &str, args: serde_json::Value) -> String {
    serde_json::json!({
        "thoughts": {"text": "t", "reasoning": "r", "plan": "- p", "self_criticism": "c", "speak": "s", "observations": "o"},
        "command": {"name": command, "args": args}
    })
    .to_string()
}

/// The services of an in-process runtime: the given model, surface, config and web, a real
/// ledger in `store`, tiktoken counting, the system clock, memory off.
pub fn deps(
    store: &autothread::store::Store,
    model: std::sync::Arc<dyn ChatModel>,
    surface: std::sync::Arc<dyn Surface>,
    config: autothread::config::Config,
    web: Option<std::sync::Arc<autothread::web::Web>>,
) -> autothread::runtime::Deps {
    use std::sync::Arc;
    let budgets = Arc::new(autothread::budget::Budgets::new(store, &config.budget).unwrap());
    autothread::runtime::Deps {
        store: store.clone(),
        model,
        tools: Arc::new(autothread::tools::Registry::for_config(&config)),
        surface,
        config: Arc::new(config),
        counter: Arc::new(autothread::llm::tokens::TiktokenCounter::for_model(
            "gpt-4o-mini",
        )),
        clock: Arc::new(autothread::clock::SystemClock),
        budgets,
        memory: None,
        web,
        drain: Default::default(),
        runtime: tokio::runtime::Handle::current(),
    }
}

/// A new agent for in-process runs: fallback profile, the given model and settings, paid by
/// user "u" of guild "g".
pub fn agent(id: &str, task: &str, model: &str, continuous: bool) -> AgentState {
    let mut state = AgentState::new(
        id.into(),
        task.into(),
        Some(autothread::core::state::Profile::fallback()),
        autothread::core::state::AgentSettings {
            model: model.into(),
            continuous,
            cycle_limit: 0,
            budget: None,
            policy: Default::default(),
            endpoint: None,
            prompt_budget_tokens: None,
        },
        chrono::Utc::now(),
    );
    state.money.spender = autothread::core::state::Spender {
        user: Some("u".into()),
        guild: Some("g".into()),
    };
    state
}

/// The agent's model as commands see it, answering by rule: every call is kept, costs `cost`
/// micro-dollars, and tokens are counted at four characters each.
/// How a `ToolFake` answers the messages of one call.
pub type Respond = Box<dyn Fn(&[autothread::core::message::Message]) -> String + Send + Sync>;

pub struct ToolFake {
    pub respond: Respond,
    pub calls: Mutex<Vec<Vec<autothread::core::message::Message>>>,
    pub cost: u64,
}

impl ToolFake {
    pub fn new(
        cost: u64,
        respond: impl Fn(&[autothread::core::message::Message]) -> String + Send + Sync + 'static,
    ) -> Self {
        ToolFake {
            respond: Box::new(respond),
            calls: Mutex::new(Vec::new()),
            cost,
        }
    }

    pub fn call_count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

#[async_trait]
impl autothread::tools::ToolModel for ToolFake {
    async fn complete(
        &self,
        _what: &str,
        messages: Vec<autothread::core::message::Message>,
        _max_tokens: u32,
    ) -> Result<autothread::tools::ToolReply, autothread::tools::ToolModelError> {
        let text = (self.respond)(&messages);
        self.calls.lock().unwrap().push(messages);
        Ok(autothread::tools::ToolReply {
            text,
            cost: Micros(self.cost),
        })
    }

    fn count(&self, messages: &[autothread::core::message::Message]) -> usize {
        messages.iter().map(|m| m.content.len() / 4 + 4).sum()
    }

    fn context_tokens(&self) -> u32 {
        4096
    }
}

/// Runs one command for `state` as the runtime would (validated first, aliases mapped), with
/// `model` as the agent's model and the default config but for `web`.
pub async fn run_tool(
    store: &autothread::store::Store,
    model: &dyn autothread::tools::ToolModel,
    state: &AgentState,
    web: Option<&autothread::web::Web>,
    name: &str,
    args: serde_json::Value,
) -> autothread::core::history::Outcome {
    let config = autothread::config::Config::default();
    let registry = autothread::tools::Registry::for_config(&config);
    let valid = registry
        .command_set()
        .validate(&autothread::core::reply::CommandCall {
            name: name.into(),
            args: args.as_object().cloned().unwrap(),
        })
        .unwrap();
    let agent = state.view();
    let payer = autothread::budget::Payer {
        agent: agent.id.clone(),
        spender: state.money.spender.clone(),
        agent_limit: Micros(0),
    };
    let ctx = autothread::tools::ToolCtx {
        agent: &agent,
        now: state.updated_at,
        payer: &payer,
        workspace: autothread::tools::AgentFiles::new(store, &agent.id),
        subagents: autothread::tools::SubAgents::new(store, &agent.id),
        ask_user: &NobodyAsked,
        limits: &config.workspace,
        subagent_limits: &config.subagents,
        memory: None,
        model: Some(model),
        web,
    };
    registry.run(&valid.call, &ctx).await.outcome
}

/// Runs `command` itself (no registry, no validation) for `state`, with the context the runtime
/// would give it: for commands built outside the registry, such as an MCP server's.
pub async fn run_command(
    store: &autothread::store::Store,
    command: &dyn autothread::tools::Command,
    state: &AgentState,
    args: serde_json::Value,
) -> autothread::core::history::Outcome {
    run_command_output(store, command, state, args)
        .await
        .outcome
}

/// As `run_command`, the whole output: its outcome and the workspace changes it asks for.
pub async fn run_command_output(
    store: &autothread::store::Store,
    command: &dyn autothread::tools::Command,
    state: &AgentState,
    args: serde_json::Value,
) -> autothread::tools::ToolOutput {
    let config = autothread::config::Config::default();
    let agent = state.view();
    let payer = autothread::budget::Payer {
        agent: agent.id.clone(),
        spender: state.money.spender.clone(),
        agent_limit: Micros(0),
    };
    let ctx = autothread::tools::ToolCtx {
        agent: &agent,
        now: state.updated_at,
        payer: &payer,
        workspace: autothread::tools::AgentFiles::new(store, &agent.id),
        subagents: autothread::tools::SubAgents::new(store, &agent.id),
        ask_user: &NobodyAsked,
        limits: &config.workspace,
        subagent_limits: &config.subagents,
        memory: None,
        model: None,
        web: None,
    };
    let call = autothread::core::reply::CommandCall {
        name: command.spec().name,
        args: args.as_object().cloned().unwrap(),
    };
    command.run(&call, &ctx).await
}

/// Commands run by `run_tool` have nobody to ask.
struct NobodyAsked;

#[async_trait::async_trait]
impl autothread::tools::AskUser for NobodyAsked {
    async fn ask(&self, _question: &str) -> Result<String, autothread::tools::NoAnswer> {
        Err(autothread::tools::NoAnswer::NobodyToAsk)
    }
}

/// A clock that stands still until the test moves it (its `sleep` returns at once): for code that
/// only reads dates, such as the memory breaker's cooldowns.
pub struct SteppedClock(Mutex<chrono::DateTime<chrono::Utc>>);

impl Default for SteppedClock {
    fn default() -> Self {
        SteppedClock(Mutex::new(chrono::Utc::now()))
    }
}

impl SteppedClock {
    pub fn advance(&self, by: chrono::Duration) {
        *self.0.lock().unwrap() += by;
    }
}

impl autothread::clock::Clock for SteppedClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        *self.0.lock().unwrap()
    }

    fn sleep(
        &self,
        _duration: std::time::Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(std::future::ready(()))
    }
}

/// Our clock seam on top of governor's fake clock: `sleep` returns once the test has advanced
/// the fake time far enough.
#[derive(Clone, Default)]
pub struct FakeClock {
    pub time: governor::clock::FakeRelativeClock,
    advanced: std::sync::Arc<tokio::sync::Notify>,
}

impl FakeClock {
    pub fn nanos(&self) -> u64 {
        use governor::clock::Clock as _;
        self.time.now().into()
    }

    pub fn advance(&self, by: std::time::Duration) {
        self.time.advance(by);
        self.advanced.notify_waiters();
    }
}

impl autothread::clock::Clock for FakeClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::<chrono::Utc>::UNIX_EPOCH
            + chrono::Duration::nanoseconds(self.nanos() as i64)
    }

    fn sleep(
        &self,
        duration: std::time::Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let clock = self.clone();
        let until = self.nanos() + duration.as_nanos() as u64;
        Box::pin(async move {
            loop {
                let advanced = clock.advanced.notified();
                tokio::pin!(advanced);
                advanced.as_mut().enable();
                if clock.nanos() >= until {
                    return;
                }
                advanced.await;
            }
        })
    }
}
