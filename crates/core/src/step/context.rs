//! What `step` may consult besides the state: the context the runtime builds for each event, how
//! the reply format reaches the model, and how much recalled memory a prompt may carry.
//!
//! `ReplyFormat` states the reply format once: the full schema for endpoints where input costs
//! nothing, the compact envelope for those that bill the schema as input, or instructions in the
//! prompt (`Config::reply_format` chooses).

use chrono::{DateTime, Utc};

use crate::brake::BrakeLimits;
use crate::budget::BudgetView;
use crate::commands::CommandSet;
use crate::message::TokenCounter;
use crate::policy::Policy;
use crate::prompt::{ContextLimits, PromptExtras};

/// Everything `step` may consult besides the state; the clock is read by the caller.
pub struct StepCtx<'a> {
    pub now: DateTime<Utc>,
    pub commands: &'a CommandSet,
    pub policy: &'a Policy,
    /// How many distinct approvals each class needs.
    pub quorum: &'a crate::quorum::Quorum,
    /// When each class's cards expire, and what happens then.
    pub expiry: &'a crate::expiry::Expiry,
    /// The approve-and-remember rules of the agent's server (its own are in its state).
    pub server_rules: &'a [crate::rules::ApprovalRule],
    pub counter: &'a dyn TokenCounter,
    pub limits: ContextLimits,
    pub extras: &'a PromptExtras,
    pub full_steps: usize,
    /// The older steps that always get a line in the prompt (see `prompt::lines_shown`).
    pub step_lines: usize,
    pub smart_model_available: bool,
    /// The agent's budget as the ledger stands; `None` where spend is not tracked (unit tests).
    pub budget: Option<&'a BudgetView>,
    /// Long-term memory, when it is on.
    pub memory: Option<MemoryPolicy>,
    /// How the reply format reaches the model.
    pub reply_format: ReplyFormat,
    /// The runaway brake's thresholds; `None` where it is off.
    pub brake: Option<BrakeLimits>,
}

/// How the model learns the reply format. It is stated once: as a schema the endpoint enforces
/// (and reads as part of the prompt, so it is billed), or as instructions in the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplyFormat {
    /// One variant per command with typed arguments: what a local server's grammar enforces
    /// best, sent where input costs nothing.
    #[default]
    FullSchema,
    /// The envelope only (the thought fields, a command's name and its arguments, typed, with
    /// no descriptions and no list of names): a tenth of the full schema's tokens, for endpoints
    /// that bill the schema as input; the prompt lists the commands, and the name and arguments
    /// are checked when the reply is validated.
    CompactSchema,
    /// No schema: the format as instructions in the prompt (json_object or no response format).
    Instructions,
}

/// How much recalled memory a prompt may carry, and how long a cycle's memory may be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryPolicy {
    /// Share of the model's context for the memory section (AutoGPT kept memories and fixed parts
    /// within 2500 of 4000 tokens; the fixed parts took about 1500, leaving a quarter).
    pub context_percent: usize,
    pub max_tokens: usize,
    pub text_chars: usize,
    /// Memories less similar to the query than this (cosine) are not recalled, unless pinned.
    pub min_relevance: f32,
}

impl MemoryPolicy {
    pub fn recall_tokens(&self, context_tokens: u32) -> usize {
        (context_tokens as usize * self.context_percent / 100).min(self.max_tokens)
    }
}
