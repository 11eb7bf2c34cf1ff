//! The closed set of things that can happen to an agent (`Event`), and the effects `step` asks the
//! runtime to carry out (`Effect`), in one vocabulary for the loop; with `ModelCall`, `Decision`,
//! `Usage` and `CallPurpose`, whose `marker()` is the name sent in the purpose header (tests route
//! requests by it). `APPROVE_N_MAX` bounds Approve ×N on every surface.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::budget::{Micros, Pacing};
use super::commands::Risk;
use super::decision::Decision;
use super::history::Outcome;
use super::memory::MemoryHit;
use super::message::Message;
use super::reply::CommandCall;
use super::state::{PauseReason, Proposal};
use super::usage::Usage;

/// Why a model call was made; its reply is routed by this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CallPurpose {
    Profile,
    Think,
    /// A second chance after an unusable reply, quoting the parse error.
    Reask,
    /// The watchdog's second look after a repeated command.
    Rethink,
    SelfCritique,
    Summary {
        cycle: u64,
    },
}

impl CallPurpose {
    /// A stable name for the call's purpose, sent with the request so that logs, proxies and
    /// test fakes can tell calls apart without reading the prompt.
    pub fn marker(self) -> &'static str {
        match self {
            CallPurpose::Profile => "profile",
            CallPurpose::Think => "think",
            CallPurpose::Reask => "reask",
            CallPurpose::Rethink => "rethink",
            CallPurpose::SelfCritique => "self_critique",
            CallPurpose::Summary { .. } => "summary",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A new agent begins (generating its profile first when it has none).
    Start,
    ModelReplied {
        seq: u64,
        purpose: CallPurpose,
        text: String,
        usage: Option<Usage>,
    },
    /// The call failed after the client's retries.
    ModelFailed {
        seq: u64,
        purpose: CallPurpose,
        error: String,
    },
    /// The call was not made: no budget can pay for its worst case.
    CallRefused {
        seq: u64,
        purpose: CallPurpose,
        reason: String,
    },
    /// The call waits for a rate limit.
    Paced {
        seq: u64,
        purpose: CallPurpose,
        pacing: Pacing,
    },
    /// The memories a `Recall` found (empty when memory could not be searched).
    Recalled {
        seq: u64,
        hits: Vec<MemoryHit>,
    },
    /// Someone with the right changed the agent's own budget.
    SetBudget {
        budget: Micros,
        by: crate::person::Person,
    },
    /// The agent's owner narrowed (or, with `None`, cleared the narrowing of) a risk class.
    SetPolicy {
        risk: Risk,
        action: Option<crate::policy::ClassAction>,
        by: crate::person::Person,
    },
    Decided {
        cycle: u64,
        decision: Decision,
        by: crate::person::Person,
    },
    CommandFinished {
        cycle: u64,
        outcome: Outcome,
    },
    /// The approved command was not run: what it acts on changed after its card was shown (a file
    /// it writes), so the approval no longer covers it.
    CommandStale {
        cycle: u64,
        why: String,
    },
    /// The runtime's timer for the card of `cycle` fired: if the card still waits and its
    /// deadline has passed, its class's action on expiry happens.
    DeadlinePassed {
        cycle: u64,
    },
    Pause {
        by: crate::person::Person,
    },
    /// A person ends the agent's task (it can be given a follow-up later): at once, or when its
    /// running command returns.
    Finish {
        by: crate::person::Person,
    },
    Resume {
        by: crate::person::Person,
        follow_up: Option<String>,
    },
    /// Revoke the agent's own rule `id` (a server's rules are revoked in the store, not through
    /// one agent).
    RevokeRule {
        id: String,
        by: crate::person::Person,
    },
    /// A parked agent's card: go on, with a new budget for the agent if one is given.
    Continue {
        by: crate::person::Person,
        budget: Option<Micros>,
    },
    /// The agent was loaded after a restart; `interrupted` says the journal shows its command
    /// started and never finished.
    Recovered {
        interrupted: bool,
    },
}

/// A request for the model, fully prepared by the core.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    pub seq: u64,
    pub purpose: CallPurpose,
    pub messages: Vec<Message>,
    pub max_tokens: u32,
    /// Structured output wanted (when the endpoint supports it).
    pub json_schema: Option<Value>,
    /// Use the configured smarter model.
    pub smart: bool,
}

// Effects live for one step and are few, so a proposal is carried inline rather than boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    CallModel(ModelCall),
    ShowProfile,
    ShowProposal {
        proposal: Proposal,
        auto_approved: bool,
    },
    /// Run the command (the runtime journals it first).
    Execute {
        cycle: u64,
        call: CommandCall,
        risk: Risk,
    },
    /// Search long-term memory with `query`; answer with `Event::Recalled` carrying `seq`.
    Recall {
        seq: u64,
        query: String,
    },
    /// Write a memory of `cycle` (embedded and stored by the runtime; queued if that fails).
    Remember {
        cycle: u64,
        text: String,
    },
    /// The episode of `cycle` was added or changed and must be stored.
    EpisodeRecorded {
        cycle: u64,
    },
    /// Something the humans should read (a command error, a fallback, a pause).
    Notify(String),
    Paused(PauseReason),
    Finished {
        reason: String,
    },
    /// The event could not be applied (a stale click, a resume of a running agent); the text says why.
    Rejected(String),
    /// Nobody decided on the card of `cycle` in time: `text` says what happened. With `escalate`,
    /// the card stays open and the server's approvers are called; otherwise the card is closed.
    Expired {
        proposal: Proposal,
        text: String,
        escalate: bool,
    },
    /// An entry for the audit trail, stored with the step's state (nothing to carry out).
    Audit(crate::audit::AuditEntry),
    /// Keep a new rule for every agent of the agent's server (written with the step's state).
    SaveServerRule(crate::rules::ApprovalRule),
    /// The server's rule `id` approved a command: count the use.
    ServerRuleUsed {
        id: String,
    },
}
