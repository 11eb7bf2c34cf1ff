//! The agent's state as plain data (`AgentState`): profile, phase, the pending proposal, counters,
//! the taint, the brake, its rules and the episode history, with `Phase`, `Proposal`,
//! `PauseReason`, `AgentSettings` (the model and the saved endpoint), `Spender` and `UsageTotals`.
//!
//! `awaits_decision_on(cycle)` is the staleness question every click asks; `view()` gives the
//! `AgentView` a running command may know (id, name, cycle, model), never the state itself. A field
//! added here needs `#[serde(default)]` or a store migration, since every stored record must still
//! read.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::brake::BrakeState;
use super::budget::{BudgetStop, Micros, Pacing, SpendNote};
use super::commands::Risk;
use super::history::{EarlierSteps, Episode, WHOLE_STEPS_KEPT};
use super::memory::MemoryHit;
use super::reply::{CommandCall, Thoughts};
use super::usage::UsageTotals;

/// Who the agent is: AutoGPT 0.5's generated profile (or the 0.2-style one given by the user).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    pub name: String,
    pub role: String,
    pub best_practices: Vec<String>,
    pub constraints: Vec<String>,
}

impl Profile {
    /// Used when profile generation fails, so a task never stalls on an unusable answer.
    pub fn fallback() -> Profile {
        Profile {
            name: "Autothread_GPT".into(),
            role: "an autonomous assistant that completes the user's task step by step, using only the commands available to it".into(),
            best_practices: Vec::new(),
            constraints: Vec::new(),
        }
    }
}

/// Why an agent is not running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PauseReason {
    /// A human paused it.
    ByUser { by: crate::person::Person },
    /// A human answered "n" / Deny; the proposal is kept and shown again on resume.
    Denied { by: crate::person::Person },
    /// The model gave three unusable replies in a row.
    InvalidReplies { last_error: String },
    /// The model endpoint kept failing after all retries.
    ModelError { message: String },
    /// The configured cycle limit was reached.
    CycleLimit { limit: u64 },
    /// A budget cannot pay for the next model call; raising it resumes the agent.
    Budget {
        message: String,
        /// Which budget ran out, and how far; `None` for pauses saved before this was kept.
        #[serde(default)]
        stop: Option<BudgetStop>,
    },
    /// The runaway brake parked it: it spent too fast or made no progress. `spent` and `limit`
    /// are the agent's spend and budget when it parked.
    Runaway {
        why: String,
        spent: Micros,
        limit: Micros,
    },
    /// The model's commands were refused several times in a row (denied by policy, unknown,
    /// repeated), so a human should look before more calls are paid for.
    Refusals { last: String },
    /// Nobody decided on the card in time (its class's deadline); the proposal is kept.
    Unanswered { cycle: u64, waited: String },
}

impl PauseReason {
    pub fn describe(&self) -> String {
        match self {
            PauseReason::ByUser { by } => format!("paused by {}", by.name),
            PauseReason::Denied { by } => {
                format!("stopped by {}; the proposal is kept", by.name)
            }
            PauseReason::InvalidReplies { last_error } => format!(
                "paused after 3 invalid replies from the model in a row (last: {last_error})"
            ),
            PauseReason::ModelError { message } => {
                format!("paused because the model endpoint failed: {message}")
            }
            PauseReason::CycleLimit { limit } => format!("paused at the cycle limit ({limit})"),
            PauseReason::Budget { message, .. } => {
                format!("paused: {message}")
            }
            PauseReason::Runaway { why, spent, .. } => format!(
                "parked by the runaway brake: {why} (spent {} so far)",
                super::budget::format_usd(*spent)
            ),
            PauseReason::Refusals { last } => {
                format!("paused after 3 refused commands in a row (last: {last})")
            }
            PauseReason::Unanswered { cycle, waited } => format!(
                "parked: nobody decided on cycle {cycle} within {waited}; the proposal is kept"
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// Waiting for the model to generate a profile from the task.
    Creating,
    /// Waiting for the model's next reply.
    Thinking,
    /// A proposal is shown; a human decides.
    AwaitingDecision,
    /// Waiting for the model's critique of the pending proposal.
    Critiquing,
    /// The approved command is running (the journal says so too).
    Executing,
    Paused(PauseReason),
    Finished {
        reason: String,
    },
}

impl Phase {
    pub fn label(&self) -> &'static str {
        match self {
            Phase::Creating => "creating",
            Phase::Thinking => "thinking",
            Phase::AwaitingDecision => "awaiting decision",
            Phase::Critiquing => "critiquing",
            Phase::Executing => "executing",
            Phase::Paused(_) => "paused",
            Phase::Finished { .. } => "finished",
        }
    }

    /// Phases in which the agent makes progress by itself and should be resumed after a restart.
    pub fn is_live(&self) -> bool {
        !matches!(self, Phase::Paused(_) | Phase::Finished { .. })
    }
}

/// A command the model proposed for a cycle, as shown to the humans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub cycle: u64,
    pub thoughts: Thoughts,
    pub command: CommandCall,
    pub risk: Risk,
    /// Set when a restart found this command half-run: it is asked again, never re-run silently.
    pub interrupted: bool,
    /// Who approved (or asked for the critique); it goes into the episode for the transcript.
    pub approved_by: Option<crate::person::ActedBy>,
    /// The cost of the next step and what is left, for the card.
    #[serde(default)]
    pub spend: Option<SpendNote>,
    /// Why Approve ×N or continuous mode stopped at this proposal (the soft cap).
    #[serde(default)]
    pub auto_stop: Option<String>,
    /// The rate limit the agent waited for before this proposal, if any.
    #[serde(default)]
    pub paced: Option<String>,
    /// Who changed the model's arguments, and which, oldest first (the last few are kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<ArgumentEdit>,
    /// Who has approved so far, when the class needs more than one approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<crate::person::Person>,
    /// How many times people edited the command: a card's buttons carry it, so that a click
    /// refers to the version it showed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub revision: u32,
    /// How many distinct approvals the command's class needs (0 or 1: one).
    #[serde(default, skip_serializing_if = "needs_one_approval")]
    pub approvals_needed: u32,
    /// What the command would send out, when the agent has read untrusted content: a person
    /// must approve it, and the card shows it in full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outgoing: Option<crate::taint::Outgoing>,
    /// When the card expires and what happens then (its class's rule, when it has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<crate::expiry::Deadline>,
    /// The scopes an "approve & remember" rule made from this card may have, narrowest first;
    /// empty where no rule may be made (a class that asks every time, a quorum, data going out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remember: Vec<crate::rules::RuleScope>,
    /// Set when the agent makes no progress: the card is the stuck panel (rethink, hint, skip,
    /// stop, or approve anyway), and nothing approves it automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck: Option<crate::watchdog::Stuck>,
    /// The script a rule approved this command for, as the rule bound it: checked just before it
    /// runs (see `rules::ScriptCheck`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_check: Option<crate::rules::ScriptCheck>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn needs_one_approval(needed: &u32) -> bool {
    *needed <= 1
}

/// One person's edit of a proposal's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArgumentEdit {
    pub by: crate::person::Person,
    /// The names of the arguments changed, added or removed.
    pub arguments: Vec<String>,
}

/// How many edits a proposal remembers: a card names the newest ones.
pub const MAX_EDITS_KEPT: usize = 5;

impl ArgumentEdit {
    /// "alice (filename, text)"
    pub fn describe(&self) -> String {
        format!("{} ({})", self.by.name, self.arguments.join(", "))
    }
}

impl Proposal {
    /// "1 of 2 approvals: alice" while a quorum is being gathered, "2 of 2 approvals: alice, bob"
    /// once reached; nothing for a one-approval class.
    pub fn approval_progress(&self) -> Option<String> {
        (self.approvals_needed > 1)
            .then(|| crate::quorum::progress_line(&self.approvals, self.approvals_needed))
    }

    /// Who edited which arguments, "alice (filename); bob (text)", or nothing when the model's
    /// arguments stand.
    pub fn editors(&self) -> Option<String> {
        (!self.edits.is_empty()).then(|| {
            let edits: Vec<String> = self.edits.iter().map(ArgumentEdit::describe).collect();
            edits.join("; ")
        })
    }

    /// The money line under a proposal: the next step's estimated cost, what is left, and any
    /// rate limit waited for. Empty when spend is not tracked.
    pub fn money_line(&self) -> String {
        let mut parts = Vec::new();
        if let Some(spend) = &self.spend {
            parts.push(spend.render());
        }
        if let Some(paced) = &self.paced {
            parts.push(paced.clone());
        }
        parts.join(" · ")
    }
}

/// What a person may change about an agent's settings as they resume it (the console's flags);
/// `None` keeps what the agent had.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumeSettings {
    /// Whether automatic-class commands run without asking from now on.
    pub continuous: bool,
    pub budget: Option<Micros>,
    pub cycle_limit: Option<u64>,
    pub prompt_budget_tokens: Option<u32>,
}

/// Per-agent settings chosen at creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSettings {
    pub model: String,
    /// Run automatic-class commands without asking.
    pub continuous: bool,
    /// Stop after this many cycles (0: no limit).
    pub cycle_limit: u64,
    /// The agent's own budget in micro-dollars; `None` uses the configured default.
    #[serde(default)]
    pub budget: Option<Micros>,
    /// The owner's narrowing of the server's command policy, by risk class.
    #[serde(default)]
    pub policy: super::policy::PolicyOverrides,
    /// The server the agent talks to, saved so that resuming it never sends its history
    /// elsewhere; `None` for agents saved before endpoints were kept.
    #[serde(default)]
    pub endpoint: Option<Endpoint>,
    /// The agent's own cap on a cycle's prompt (`llm.prompt_budget_tokens` when unset).
    #[serde(default)]
    pub prompt_budget_tokens: Option<u32>,
}

/// Where an agent's model lives, as it was when the agent was created (or last moved).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub base_url: String,
    /// How structured output is asked for there (`json_schema`, `json_object` or `none`).
    pub response_format: String,
    /// The embeddings server, when it is not `base_url`.
    #[serde(default)]
    pub embed_base_url: Option<String>,
    /// Set when the endpoint is an Azure OpenAI deployment: the `api-version` it is called with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure_api_version: Option<String>,
}

/// Who pays for an agent besides itself: its owner's and its server's budgets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spender {
    pub user: Option<String>,
    pub guild: Option<GuildId>,
}

/// The start of an Agent Protocol caller's spender key (`api:<token name>`).
pub const API_SPENDER_PREFIX: &str = "api:";

/// Where an agent was started, as its spender tells: things kept per place (an MCP server's
/// instance) are kept apart by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Home {
    /// A Discord server.
    Guild(GuildId),
    /// The Agent Protocol, whichever caller.
    Api,
    /// The terminal console (and any agent saved without a server).
    Console,
}

impl Spender {
    /// Where the agent it pays for was started.
    pub fn home(&self) -> Home {
        match (&self.guild, &self.user) {
            (Some(guild), _) => Home::Guild(guild.clone()),
            (None, Some(user)) if user.starts_with(API_SPENDER_PREFIX) => Home::Api,
            (None, _) => Home::Console,
        }
    }
}

/// A server's id as the core keeps it: opaque text (Discord's snowflake, written out), so that it
/// cannot be mixed up with a user's or an agent's id, and is stored as the plain string it
/// always was.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GuildId(String);

impl GuildId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<u64> for GuildId {
    fn from(id: u64) -> Self {
        GuildId(id.to_string())
    }
}

impl From<&str> for GuildId {
    fn from(id: &str) -> Self {
        GuildId(id.to_string())
    }
}

impl std::fmt::Display for GuildId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One agent: who it is, and its state in four groups, so that a new field has an obvious place.
/// The groups are flattened in the stored record, which keeps the shape it had before they existed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    pub id: String,
    #[serde(flatten)]
    pub brief: AgentBrief,
    #[serde(flatten)]
    pub progress: AgentProgress,
    #[serde(flatten)]
    pub money: AgentMoney,
    #[serde(flatten)]
    pub safety: AgentSafety,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What the agent was asked to do and how: its task, profile and settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentBrief {
    pub task: String,
    /// Tasks given after the agent finished, oldest first.
    pub follow_ups: Vec<String>,
    pub profile: Option<Profile>,
    pub settings: AgentSettings,
    /// The Agent Protocol caller (an API token's name) that created an agent whose owner is a
    /// Discord person (a task bound to a Discord thread): the caller still drives it over the
    /// API. Unset for every other agent, whose spender says who started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_caller: Option<String>,
}

/// Where the agent is: its phase, its cycle, the step on the table and the steps behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentProgress {
    pub phase: Phase,
    /// The cycle being worked on, starting at 1.
    pub cycle: u64,
    /// Cycles this agent has run since its cycle limit was last reset (by a resume).
    pub cycles_since_resume: u64,
    pub pending: Option<Proposal>,
    /// Identifies the model call the agent is waiting for; replies to older calls are ignored.
    pub call_seq: u64,
    /// Pause once the running command has finished.
    pub pause_requested: Option<crate::person::Person>,
    /// Finish once the running command has finished (who asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_requested: Option<crate::person::Person>,
    /// Set while the agent waits for a rate limit before a model call.
    #[serde(default)]
    pub paced: Option<Pacing>,
    /// The memories recalled for the current cycle. The record keeps them without their texts,
    /// which the memory store holds: the texts made up most of a record written three times a
    /// cycle. An actor that loads the agent reads them back (`Memory::with_texts`).
    #[serde(default, serialize_with = "hits_by_reference")]
    pub recalled: Vec<MemoryHit>,
    /// The cycle after which this agent's own history begins: 0 for an agent started afresh,
    /// the cycle it was forked after for a fork, `None` for an agent stored before forks. Its
    /// workspace can be read back only from there on (see `store::snapshots`), and its spend
    /// chart starts there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_from: Option<u64>,
    /// The newest steps, whole (at most `WHOLE_STEPS_KEPT` once recorded through
    /// `record_episode`). Stored in their own tree, one record per cycle; loaded back by the store.
    #[serde(skip)]
    pub episodes: Vec<Episode>,
    /// The steps before those, as their Progress lines, bounded; the store keeps them all.
    #[serde(skip)]
    pub earlier: EarlierSteps,
}

/// What the agent has spent and who pays for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentMoney {
    pub usage: UsageTotals,
    #[serde(default)]
    pub spender: Spender,
    /// Tokens of the last cycle prompt, for the next step's cost estimate.
    #[serde(default)]
    pub last_prompt_tokens: u64,
    /// The agent's settled spend when its last cycle closed, so each step knows its own cost
    /// (`None` for agents saved before costs were kept, until their next cycle closes).
    #[serde(default)]
    pub spent_at_last_cycle: Option<Micros>,
}

/// What keeps the agent in check: approvals left, counters in a row, the runaway brake, the taint
/// and its remembered rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSafety {
    pub auto_approvals_left: u32,
    pub invalid_replies_in_row: u32,
    /// Proposed commands refused in a row (by policy, as unknown or as duplicates).
    #[serde(default)]
    pub refusals_in_row: u32,
    /// The watchdog's one rethink for the current cycle has been used.
    pub rethink_used: bool,
    /// A person asked for a rethink of the card at this cycle: the reply is shown to them as a
    /// card at this revision (so clicks on the old card are stale), never run unattended and not
    /// judged for progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rethink_requested: Option<u32>,
    /// What the runaway brake has seen.
    #[serde(default)]
    pub brake: BrakeState,
    /// When the agent first read untrusted content; from then on, a command that can carry data
    /// out needs a person (see `core::taint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tainted: Option<crate::taint::Taint>,
    /// The agent's own approve-and-remember rules (at most `MAX_RULES_PER_AGENT` live ones);
    /// its server's are kept in the store, shared by its agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<crate::rules::ApprovalRule>,
}

impl AgentState {
    pub fn new(
        id: String,
        task: String,
        profile: Option<Profile>,
        settings: AgentSettings,
        now: DateTime<Utc>,
    ) -> Self {
        AgentState {
            id,
            brief: AgentBrief {
                task,
                follow_ups: Vec::new(),
                profile,
                settings,
                api_caller: None,
            },
            progress: AgentProgress {
                phase: Phase::Creating,
                cycle: 1,
                cycles_since_resume: 0,
                pending: None,
                call_seq: 0,
                pause_requested: None,
                finish_requested: None,
                paced: None,
                recalled: Vec::new(),
                history_from: Some(0),
                episodes: Vec::new(),
                earlier: EarlierSteps::default(),
            },
            money: AgentMoney {
                usage: UsageTotals::default(),
                spender: Spender::default(),
                last_prompt_tokens: 0,
                spent_at_last_cycle: Some(Micros::ZERO),
            },
            safety: AgentSafety {
                auto_approvals_left: 0,
                invalid_replies_in_row: 0,
                refusals_in_row: 0,
                rethink_used: false,
                rethink_requested: None,
                brake: BrakeState::default(),
                tainted: None,
                rules: Vec::new(),
            },
            created_at: now,
            updated_at: now,
        }
    }

    /// Makes a resting agent ready to think again after its history was cut back to an earlier
    /// step (`/agent rewind`): its next cycle is numbered after every cycle it had, so that no card
    /// or record of the undone cycles can act on the new step, and everything about the step in
    /// flight (the proposal, approvals left, counters in a row, requests, the runaway brake) starts
    /// afresh. The taint stays: sub-agents started since are kept, and what they read may come
    /// back.
    pub fn restart_after_rewind(&mut self, now: DateTime<Utc>) {
        self.progress.cycle += 1;
        self.progress.phase = Phase::Thinking;
        self.progress.pending = None;
        self.safety.auto_approvals_left = 0;
        self.safety.invalid_replies_in_row = 0;
        self.safety.refusals_in_row = 0;
        self.safety.rethink_used = false;
        self.safety.rethink_requested = None;
        self.progress.pause_requested = None;
        self.progress.finish_requested = None;
        self.progress.paced = None;
        self.progress.recalled = Vec::new();
        self.progress.cycles_since_resume = 0;
        self.safety.brake = Default::default();
        self.updated_at = now;
    }

    /// Marks the pending proposal approved by `by` and running: the one change starting a command
    /// makes, whether the step starts it or the store finds it started (a record stored beside the
    /// journal's start of it). Returns the proposal, or `None` when nothing is pending.
    pub fn start_pending_command(
        &mut self,
        by: Option<crate::person::ActedBy>,
    ) -> Option<&Proposal> {
        let pending = self.progress.pending.as_mut()?;
        pending.approved_by = by;
        // The card no longer waits; if it is shown again (a stale file), it gets a new deadline.
        pending.deadline = None;
        self.progress.phase = Phase::Executing;
        self.progress.pending.as_ref()
    }

    /// Applies what a person changed as they resumed the agent.
    pub fn resume_with(&mut self, change: ResumeSettings) {
        self.brief.settings.continuous = change.continuous;
        if let Some(budget) = change.budget {
            self.brief.settings.budget = Some(budget);
        }
        if let Some(limit) = change.cycle_limit {
            self.brief.settings.cycle_limit = limit;
        }
        if change.prompt_budget_tokens.is_some() {
            self.brief.settings.prompt_budget_tokens = change.prompt_budget_tokens;
        }
    }

    /// Keeps the server the agent talks to from now on, so that resuming it later never sends
    /// its history elsewhere.
    pub fn keep_endpoint(&mut self, endpoint: Endpoint) {
        self.brief.settings.endpoint = Some(endpoint);
    }

    pub fn name(&self) -> &str {
        self.brief
            .profile
            .as_ref()
            .map(|p| p.name.as_str())
            .unwrap_or("(unnamed agent)")
    }

    /// The task as the model sees it, with any follow-ups.
    pub fn full_task(&self) -> String {
        let mut text = self.brief.task.clone();
        for (i, follow_up) in self.brief.follow_ups.iter().enumerate() {
            text.push_str(&format!("\n\nFollow-up task {}: {}", i + 1, follow_up));
        }
        text
    }

    pub fn episode(&self, cycle: u64) -> Option<&Episode> {
        self.progress.episodes.iter().find(|e| e.cycle == cycle)
    }

    pub fn last_episode(&self) -> Option<&Episode> {
        self.progress.episodes.last()
    }

    /// Every step the agent has taken, counting those no longer held in memory.
    pub fn step_count(&self) -> u64 {
        self.progress.earlier.len() + self.progress.episodes.len() as u64
    }

    /// Adds the newest step; the oldest whole one beyond `WHOLE_STEPS_KEPT` becomes a line.
    pub fn record_episode(&mut self, episode: Episode) {
        self.progress.episodes.push(episode);
        if self.progress.episodes.len() > WHOLE_STEPS_KEPT {
            let leaving = self.progress.episodes.remove(0);
            self.progress.earlier.push(&leaving);
        }
    }

    /// Whether the agent waits for a decision on the proposal of `cycle`: the one question every
    /// click, form and thread message asks before deciding.
    pub fn awaits_decision_on(&self, cycle: u64) -> bool {
        self.progress.phase == Phase::AwaitingDecision && self.pending_cycle() == Some(cycle)
    }

    /// What a running command may know of its agent.
    pub fn view(&self) -> AgentView {
        AgentView {
            id: self.id.clone(),
            name: self.name().to_string(),
            cycle: self.progress.cycle,
            model: self.brief.settings.model.clone(),
        }
    }

    /// Whether commands of automatic classes run without asking: continuous mode, or Approve ×N
    /// with approvals left.
    pub fn runs_unattended(&self) -> bool {
        self.brief.settings.continuous || self.safety.auto_approvals_left > 0
    }

    /// The cycle of the proposal on the table, if any.
    pub fn pending_cycle(&self) -> Option<u64> {
        self.progress.pending.as_ref().map(|p| p.cycle)
    }
}

/// An agent as a running command and `ask_user` see it: who it is and which step it is on,
/// without its history (which commands have no use for, and which would be copied per command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentView {
    pub id: String,
    pub name: String,
    pub cycle: u64,
    pub model: String,
}

#[cfg(any(test, feature = "test-support"))]
impl AgentState {
    /// A fresh agent for unit tests: no profile, model "m", asking before every command.
    pub fn for_test(id: &str) -> Self {
        AgentState::new(
            id.into(),
            "task".into(),
            None,
            AgentSettings {
                model: "m".into(),
                continuous: false,
                cycle_limit: 0,
                budget: None,
                policy: Default::default(),
                endpoint: None,
                prompt_budget_tokens: None,
            },
            chrono::DateTime::<Utc>::UNIX_EPOCH,
        )
    }
}

/// `recalled` as the record keeps it: each hit without its text.
fn hits_by_reference<S: serde::Serializer>(
    hits: &[MemoryHit],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(hits.iter().map(|hit| MemoryHit {
        text: String::new(),
        ..hit.clone()
    }))
}
