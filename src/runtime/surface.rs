//! The runtime's port to humans: the `Surface` trait, through which an actor shows an agent's work
//! and asks for decisions. The console and Discord implement it in the surface module; the runtime
//! never names them.
//!
//! Besides showing proposals, results and notices, a surface says whether proposals must be stored
//! before they are shown (`needs_stored_proposals`, true but for the console), whether it shows a
//! live status (`wants_status`, then `status` with a `LiveStatus`) and a long command's progress
//! (`progress`), whether it watches a streamed reply (`watches_stream`, `streamed`), and it carries
//! `ask_user` and `withdraw_question`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::AgentHandle;
use crate::core::budget::Micros;
use crate::core::decision::Decision;
use crate::core::history::Episode;
use crate::core::person::ActedBy;
use crate::core::state::{AgentState, AgentView, PauseReason, Proposal};
use crate::tools::preview::Preview;
use crate::tools::NoAnswer;

/// How a proposal is shown: approved already (by the policy, a rule or Approve ×N), or waiting
/// for a person's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShownAs {
    AutoApproved,
    AwaitingDecision,
}

#[async_trait]
pub trait Surface: Send + Sync {
    async fn show_profile(&self, agent: &AgentState);
    /// Shows a proposal, with what it would change in a file when it writes one; auto-approved
    /// ones are only displayed, the others ask for a decision through `request_decision`.
    async fn show_proposal(
        &self,
        agent: &AgentState,
        proposal: &Proposal,
        shown: ShownAs,
        preview: Option<&Preview>,
    );
    /// Asks the humans to decide; must return promptly and deliver the answer through `handle`.
    async fn request_decision(&self, agent: &AgentState, proposal: &Proposal, handle: AgentHandle);
    async fn show_result(&self, agent: &AgentState, episode: &Episode);
    async fn notify(&self, agent: &AgentState, text: &str);
    async fn paused(&self, agent: &AgentState, reason: &PauseReason);
    async fn finished(&self, agent: &AgentState, reason: &str);
    /// A decision was taken on `proposal`, given as decided: an approval that reached its
    /// class's quorum is counted in it (the card can show who decided, and when).
    async fn decided(
        &self,
        _agent: &AgentState,
        _proposal: &Proposal,
        _decision: &Decision,
        _by: &ActedBy,
    ) {
    }
    /// Nobody decided on the card of `proposal` (as it was shown) in time; `text` says what happened. With
    /// `escalate` the card stays open and the approvers are called (Discord mentions them);
    /// otherwise the card closes.
    async fn expired(&self, agent: &AgentState, _proposal: &Proposal, text: &str, _escalate: bool) {
        self.notify(agent, text).await;
    }
    /// The model is working on the agent's next step (Discord shows a typing indicator).
    async fn thinking(&self, _agent: &AgentState) {}
    /// The `ask_user` command: a question to the humans, answered in text.
    async fn ask_user(&self, agent: &AgentView, question: &str) -> Result<String, NoAnswer>;
    /// Withdraws the question `ask_user` waits on for `agent`, so that it returns at once (the
    /// agent was paused or finished; nobody should be left answering it).
    async fn withdraw_question(&self, _agent: &AgentView) {}
    /// Whether a proposal must be on disk before this surface shows it. Discord's cards must: a
    /// card posted and then lost to a crash would be posted again, a duplicate. A surface that
    /// only prints (the console) may show an auto-approved proposal first, which lets a command
    /// that lands with its result skip the flush before it runs.
    fn needs_stored_proposals(&self) -> bool {
        true
    }
    /// Whether this surface shows a live status; the actor works one out only for those that do.
    fn wants_status(&self) -> bool {
        false
    }
    /// What the agent is doing now changed (Discord keeps a pinned status message up to date).
    /// Must return at once: the actor calls it after every step.
    fn status(&self, _agent: &AgentState, _status: &LiveStatus) {}
    /// A long command's progress ("part 2 of 5"), while it runs. Must return at once.
    fn progress(&self, _agent: &AgentView, _text: &str) {}
    /// Whether a person watches replies stream in here (`llm.stream = "auto"` streams only then).
    fn watches_stream(&self) -> bool {
        false
    }
    /// A piece of the agent's next reply, as the model streams it. Must return at once.
    fn streamed(&self, _agent: &str, _piece: &str) {}
}

/// What an agent is doing now and how far it has come, for a live status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveStatus {
    pub doing: Doing,
    /// When it started doing it.
    pub since: DateTime<Utc>,
    pub cycle: u64,
    /// Settled spend, and what is reserved for calls in flight.
    pub spent: Micros,
    pub reserved: Micros,
    /// The agent's budget, and the share of it from which it no longer runs by itself.
    pub budget: Micros,
    pub soft_cap_percent: u8,
    pub subagents: usize,
}

/// An agent's activity, as a live status names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Doing {
    /// The model writes the agent's profile.
    Starting,
    Thinking,
    /// A card waits for a decision.
    WaitingForApproval,
    /// The model critiques the proposal it made.
    Critiquing,
    /// An approved command runs.
    Running {
        command: String,
    },
    /// A model call waits for a rate limit.
    RateLimited {
        until: DateTime<Utc>,
        why: String,
    },
    Paused {
        why: String,
    },
    Finished,
}

impl Doing {
    /// Whether the model or a command is at work, so Discord should show the bot typing. A
    /// command waiting for a person's answer (`ask_user`) is not: it may wait a day.
    pub fn is_busy(&self) -> bool {
        match self {
            Doing::Starting | Doing::Thinking | Doing::Critiquing => true,
            Doing::Running { command } => command != crate::tools::control::ASK_USER,
            _ => false,
        }
    }

    /// Whether the agent rests (finished or paused) until a person lets it go on.
    pub fn is_resting(&self) -> bool {
        matches!(self, Doing::Finished | Doing::Paused { .. })
    }
}
