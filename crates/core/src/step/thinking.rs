//! The thinking half of a cycle: summaries and recall before it, the prompt (fitted, with the
//! memories Progress does not already show and the reply format stated once), the model calls, and
//! the cost a card shows.
//!
//! `begin_cycle` asks for summaries of older episodes (only those whose outcome the mechanical line
//! would cut) and, with memory on, emits `Recall`; it also applies the cycle limit and the runaway
//! brake. `build_prompt` fits the prompt (see `prompt::CyclePrompt`), `think` and `ask_for_reply`
//! emit `CallModel`, `reply_schema` lists only the commands the policy shows (`visible_commands`),
//! and `spend_note` is the card's cost line.

use super::{ReplyFormat, Stepper};
use crate::budget::{BudgetView, Micros, SpendNote};
use crate::commands::CommandSet;
use crate::event::{CallPurpose, Effect, ModelCall};
use crate::history::summary_request;
use crate::memory::{fit_memories, recall_query, MemoryHit};
use crate::message::Message;
use crate::policy::ClassAction;
use crate::prompt::{
    profile_messages, profile_schema, BuiltPrompt, CyclePrompt, PromptExtras, PromptInputs,
};
use crate::state::{PauseReason, Phase};

const SUMMARY_MAX_TOKENS: u32 = 200;
const MAX_SUMMARIES_PER_CYCLE: usize = 4;
const PROFILE_MAX_TOKENS: u32 = 800;
/// How many of the newest steps, besides the task, make up the recall query. One: the task and
/// its follow-ups say what the agent is after, the newest step what it is doing; more steps would
/// drown a new question in the words of its recent routine, whose memories the Progress section
/// shows anyway.
const RECALL_QUERY_STEPS: usize = 1;

/// Which model a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ModelChoice {
    /// The agent's own model.
    Usual,
    /// The configured smarter model (`ModelCall::smart`), for a rethink.
    Smart,
}

impl Stepper<'_, '_> {
    /// The model a rethink goes to: the smarter one where one is configured.
    pub(super) fn rethink_model(&self) -> ModelChoice {
        match self.ctx.smart_model_available {
            true => ModelChoice::Smart,
            false => ModelChoice::Usual,
        }
    }

    /// Asks the model for the agent's profile.
    pub(super) fn request_profile(&mut self) {
        let messages = profile_messages(&self.state.brief.task);
        self.call_model(
            CallPurpose::Profile,
            messages,
            PROFILE_MAX_TOKENS.min(self.ctx.limits.max_tokens),
            Some(profile_schema()),
            ModelChoice::Usual,
        );
    }

    /// Emits a model call under a fresh sequence number, so that replies to older calls are dropped.
    pub(super) fn call_model(
        &mut self,
        purpose: CallPurpose,
        messages: Vec<Message>,
        max_tokens: u32,
        json_schema: Option<serde_json::Value>,
        model: ModelChoice,
    ) {
        self.state.progress.call_seq += 1;
        self.fx.push(Effect::CallModel(ModelCall {
            seq: self.state.progress.call_seq,
            purpose,
            messages,
            max_tokens,
            json_schema,
            smart: model == ModelChoice::Smart,
        }));
    }

    /// The cycle prompt with the budget line as the ledger stands now and the recalled memories.
    /// Recalled memories of steps the Progress section shows (in full or as a line) would say
    /// the same thing twice, so the prompt is first fitted without them to learn which steps it
    /// shows; only memories beyond those go in.
    pub(super) fn build_prompt(&self) -> BuiltPrompt {
        let (state, ctx) = (&*self.state, self.ctx);
        // The memories are given to `CyclePrompt::build`, once it is known which fit.
        let extras = PromptExtras {
            memories: Vec::new(),
            budget: ctx
                .budget
                .map(|view| view.message(self.next_call_worst(view)))
                .or_else(|| ctx.extras.budget.clone()),
        };
        let commands = self.visible_commands();
        // Providers that bill the schema read it as part of the prompt; a local server turns the
        // full schema into a grammar, which takes no room in the window.
        let schema_tokens = match ctx.reply_format {
            ReplyFormat::CompactSchema => self
                .reply_schema()
                .map_or(0, |schema| ctx.counter.count(&schema.to_string())),
            ReplyFormat::FullSchema | ReplyFormat::Instructions => 0,
        };
        let inputs = PromptInputs {
            state,
            commands: &commands,
            now: ctx.now,
            limits: ctx.limits,
            extras: &extras,
            full_steps: ctx.full_steps,
            step_lines: ctx.step_lines,
            counter: ctx.counter,
            format_in_prompt: ctx.reply_format == ReplyFormat::Instructions,
            schema_tokens,
        };
        let prompt = CyclePrompt::new(&inputs);
        let memories = match &ctx.memory {
            Some(memory) => fit_memories(
                &state.progress.recalled,
                &prompt.shown_without_memories(),
                memory.min_relevance,
                memory.recall_tokens(ctx.limits.context_tokens),
                ctx.counter,
            ),
            None => ctx.extras.memories.clone(),
        };
        prompt.build(&memories)
    }

    /// The schema the reply must follow, in the form the endpoint gets it; `None` when the format
    /// is stated in the prompt instead.
    pub(super) fn reply_schema(&self) -> Option<serde_json::Value> {
        match self.ctx.reply_format {
            ReplyFormat::FullSchema => Some(self.visible_commands().reply_schema()),
            ReplyFormat::CompactSchema => Some(self.visible_commands().compact_reply_schema()),
            ReplyFormat::Instructions => None,
        }
    }

    /// The commands the model is offered: those its policy does not deny. A denied command the model
    /// names anyway is refused with the reason (`propose`).
    pub(super) fn visible_commands(&self) -> CommandSet {
        let (state, ctx) = (&*self.state, self.ctx);
        CommandSet {
            specs: ctx
                .commands
                .specs
                .iter()
                .filter(|spec| {
                    ctx.policy
                        .action_for(&state.brief.settings.policy, &spec.name, spec.risk)
                        != ClassAction::Deny
                })
                .cloned()
                .collect(),
        }
    }

    /// The worst case of a cycle call of the size last seen, for the budget thresholds.
    pub(super) fn next_call_worst(&self, view: &BudgetView) -> Micros {
        view.price.cost(
            self.state.money.last_prompt_tokens,
            self.ctx.limits.max_tokens as u64,
        )
    }

    /// The messages of the cycle prompt as it stands now.
    pub(super) fn cycle_prompt(&self) -> Vec<Message> {
        self.build_prompt().messages
    }

    /// Starts a cycle: honours a requested pause and the cycle limit, asks for summaries of the
    /// episodes that lack one (the runtime runs them beside the main call), then asks the model.
    pub(super) fn begin_cycle(&mut self) {
        if let Some(by) = self.state.progress.finish_requested.take() {
            self.finish(format!("Finished by {}.", by.name));
            return;
        }
        if let Some(by) = self.state.progress.pause_requested.take() {
            self.pause(PauseReason::ByUser { by });
            return;
        }
        let limit = self.state.brief.settings.cycle_limit;
        if limit > 0 && self.state.progress.cycles_since_resume >= limit {
            self.pause(PauseReason::CycleLimit { limit });
            return;
        }
        // The brake watches unattended runs: a person approving each step is the brake. A
        // remembered rule approves steps without a person too.
        let rules_in_force = self
            .state
            .safety
            .rules
            .iter()
            .chain(self.ctx.server_rules)
            .any(|rule| rule.live(self.ctx.now));
        if let Some(limits) = self
            .ctx
            .brake
            .as_ref()
            .filter(|_| self.state.runs_unattended() || rules_in_force)
        {
            let state = &*self.state;
            if let Some(why) =
                state
                    .safety
                    .brake
                    .check(&state.progress.episodes, self.ctx.now, limits)
            {
                // Nobody is asked for a while under Approve ×N or continuous mode: that ends here.
                self.state.safety.auto_approvals_left = 0;
                let (spent, limit) = self
                    .ctx
                    .budget
                    .map_or((Micros::ZERO, Micros::ZERO), |view| {
                        (view.agent_spent, view.agent_limit)
                    });
                self.pause(PauseReason::Runaway { why, spent, limit });
                return;
            }
        }
        let (state, ctx) = (&mut *self.state, self.ctx);
        state.progress.phase = Phase::Thinking;
        state.safety.rethink_used = false;
        state.progress.paced = None;
        let input_chars = (ctx.limits.send_limit() * 3).max(2000);
        // Newest first and bounded, so that resuming an old agent does not fire hundreds of calls at once;
        // the rest are condensed over the next cycles.
        // A step whose outcome fits its mechanical line is never sent to the model.
        let unsummarised = state
            .progress
            .episodes
            .iter()
            .rev()
            .filter(|e| e.summary.is_none() && e.needs_model_summary());
        for episode in unsummarised.take(MAX_SUMMARIES_PER_CYCLE) {
            self.fx.push(Effect::CallModel(ModelCall {
                seq: 0,
                purpose: CallPurpose::Summary {
                    cycle: episode.cycle,
                },
                messages: summary_request(episode, input_chars),
                max_tokens: SUMMARY_MAX_TOKENS.min(ctx.limits.max_tokens),
                json_schema: None,
                smart: false,
            }));
        }
        if ctx.memory.is_some() {
            // Long-term memory first: the runtime searches it and answers with `Recalled`.
            state.progress.call_seq += 1;
            self.fx.push(Effect::Recall {
                seq: state.progress.call_seq,
                query: recall_query(
                    &state.full_task(),
                    &state.progress.episodes,
                    RECALL_QUERY_STEPS,
                ),
            });
            return;
        }
        self.think();
    }

    /// Takes the memories a recall found and asks the model, if the cycle is still waiting for them.
    pub(super) fn on_recalled(&mut self, seq: u64, hits: Vec<MemoryHit>) {
        if seq == self.state.progress.call_seq && self.state.progress.phase == Phase::Thinking {
            self.state.progress.recalled = hits;
            self.think();
        }
    }

    /// Asks the model for the cycle's step, with the prompt as it stands now.
    pub(super) fn think(&mut self) {
        let built = self.build_prompt();
        self.state.money.last_prompt_tokens = built.prompt_tokens as u64;
        let send_limit = self.ctx.limits.send_limit();
        if built.prompt_tokens > send_limit {
            self.fx.push(Effect::Notify(format!(
                "The prompt needs {} tokens but the model's context leaves {} after the reply reserve; raise context_tokens or lower max_tokens for this model.",
                built.prompt_tokens,
                send_limit
            )));
        }
        self.ask_for_reply(CallPurpose::Think, built.messages, ModelChoice::Usual);
    }

    /// A call whose answer must be an agent reply (thoughts and one command), in the reply schema.
    pub(super) fn ask_for_reply(
        &mut self,
        purpose: CallPurpose,
        messages: Vec<Message>,
        model: ModelChoice,
    ) {
        let schema = self.reply_schema();
        let max_tokens = self.ctx.limits.max_tokens;
        self.call_model(purpose, messages, max_tokens, schema, model);
    }
    /// What the next call may cost, for the proposal card.
    pub(super) fn spend_note(&self, view: &BudgetView) -> SpendNote {
        SpendNote::estimate(
            view,
            self.state.money.last_prompt_tokens,
            &self.state.money.usage,
            self.ctx.limits.max_tokens,
        )
    }
}
