//! `step`: the whole decision logic of the agent loop as a pure function of state, event and context.

use chrono::{DateTime, Utc};

use super::budget::{BudgetView, Micros, SpendNote};
use super::commands::{CommandSet, ValidCall};
use super::event::{CallPurpose, Decision, Effect, Event, ModelCall};
use super::history::{summary_request, Episode, Outcome};
use super::memory::{cycle_memory_text, fit_memories, recall_query};
use super::policy::{ClassAction, Policy};
use super::prompt::{
    build_cycle_prompt, profile_messages, profile_schema, reask_messages, rethink_messages,
    self_critique_messages, ContextLimits, Message, PromptExtras, PromptInputs, TokenCounter,
};
use super::reply::{parse_reply, CommandCall, Thoughts};
use super::state::{AgentState, PauseReason, Phase, Profile, Proposal};
use super::watchdog::{duplicate_refusal, repeats_last_step};

/// Invalid replies in a row that pause the agent (AutoGPT 0.5 stops after three).
pub const MAX_INVALID_REPLIES: u32 = 3;
/// Refused commands in a row that pause the agent: past this the model is not learning from the
/// refusals, and every further cycle is paid for.
pub const MAX_REFUSALS: u32 = 3;
const SUMMARY_MAX_TOKENS: u32 = 200;
const MAX_SUMMARIES_PER_CYCLE: usize = 4;
const CRITIQUE_MAX_TOKENS: u32 = 600;
const PROFILE_MAX_TOKENS: u32 = 800;
/// Waits for a rate limit shorter than this are not announced (they would only add noise).
const PACING_NOTICE_SECS: i64 = 5;

/// Everything `step` may consult besides the state; the clock is read by the caller.
pub struct StepCtx<'a> {
    pub now: DateTime<Utc>,
    pub commands: &'a CommandSet,
    pub policy: &'a Policy,
    pub counter: &'a dyn TokenCounter,
    pub limits: ContextLimits,
    pub extras: &'a PromptExtras,
    pub full_steps: usize,
    pub smart_model_available: bool,
    /// The agent's budget as the ledger stands; `None` where spend is not tracked (unit tests).
    pub budget: Option<&'a BudgetView>,
    /// Long-term memory, when it is on.
    pub memory: Option<MemoryPolicy>,
}

/// How much recalled memory a prompt may carry, and how long a cycle's memory may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPolicy {
    /// Share of the model's context for the memory section (AutoGPT kept memories and fixed parts
    /// within 2500 of 4000 tokens; the fixed parts took about 1500, leaving a quarter).
    pub context_percent: usize,
    pub max_tokens: usize,
    pub text_chars: usize,
}

impl MemoryPolicy {
    pub fn recall_tokens(&self, context_tokens: u32) -> usize {
        (context_tokens as usize * self.context_percent / 100).min(self.max_tokens)
    }
}

/// How many of the newest steps, besides the task, make up the recall query.
const RECALL_QUERY_STEPS: usize = 3;

/// Applies one event. Effects are returned in the order the runtime must carry them out, after it
/// has stored the new state.
pub fn step(state: &mut AgentState, event: Event, ctx: &StepCtx<'_>) -> Vec<Effect> {
    let mut fx = Vec::new();
    state.updated_at = ctx.now;
    match event {
        Event::Start => on_start(state, ctx, &mut fx),
        Event::ModelReplied {
            seq,
            purpose,
            text,
            usage,
        } => {
            if let Some(usage) = usage {
                state.usage.calls += 1;
                state.usage.prompt_tokens += usage.prompt_tokens;
                state.usage.completion_tokens += usage.completion_tokens;
            }
            on_model_reply(state, ctx, seq, purpose, text, &mut fx)
        }
        Event::ModelFailed {
            seq,
            purpose,
            error,
        } => on_model_failure(state, ctx, seq, purpose, error, &mut fx),
        Event::CallRefused {
            seq,
            purpose,
            reason,
        } => on_call_refused(state, seq, purpose, reason, &mut fx),
        Event::Paced {
            seq,
            purpose,
            pacing,
        } => {
            if seq == state.call_seq && !matches!(purpose, CallPurpose::Summary { .. }) {
                if pacing.until - ctx.now >= chrono::Duration::seconds(PACING_NOTICE_SECS) {
                    fx.push(Effect::Notify(format!(
                        "Rate limited: {}.",
                        pacing.describe()
                    )));
                }
                state.paced = Some(pacing);
            }
        }
        Event::SetBudget { budget, by } => on_set_budget(state, ctx, budget, by, &mut fx),
        Event::SetPolicy { risk, action, by } => {
            on_set_policy(state, ctx, risk, action, by, &mut fx)
        }
        Event::Recalled { seq, hits } => {
            if seq == state.call_seq && state.phase == Phase::Thinking {
                state.recalled = hits;
                think(state, ctx, &mut fx);
            }
        }
        Event::Decided {
            cycle,
            decision,
            by,
        } => on_decision(state, ctx, cycle, decision, by, &mut fx),
        Event::CommandFinished { cycle, outcome } => {
            on_command_finished(state, ctx, cycle, outcome, &mut fx)
        }
        Event::Pause { by } => on_pause(state, by, &mut fx),
        Event::Resume { by: _, follow_up } => on_resume(state, ctx, follow_up, &mut fx),
        Event::Recovered { interrupted } => on_recovered(state, ctx, interrupted, &mut fx),
    }
    fx
}

fn on_start(state: &mut AgentState, ctx: &StepCtx<'_>, fx: &mut Vec<Effect>) {
    if state.phase != Phase::Creating {
        fx.push(Effect::Rejected("the agent has already started".into()));
        return;
    }
    if state.profile.is_none() {
        request_profile(state, ctx, fx);
    } else {
        fx.push(Effect::ShowProfile);
        begin_cycle(state, ctx, fx);
    }
}

fn request_profile(state: &mut AgentState, ctx: &StepCtx<'_>, fx: &mut Vec<Effect>) {
    let messages = profile_messages(&state.task);
    call_model(
        state,
        fx,
        CallPurpose::Profile,
        messages,
        PROFILE_MAX_TOKENS.min(ctx.limits.max_tokens),
        Some(profile_schema()),
        false,
    );
}

fn call_model(
    state: &mut AgentState,
    fx: &mut Vec<Effect>,
    purpose: CallPurpose,
    messages: Vec<Message>,
    max_tokens: u32,
    json_schema: Option<serde_json::Value>,
    smart: bool,
) {
    state.call_seq += 1;
    fx.push(Effect::CallModel(ModelCall {
        seq: state.call_seq,
        purpose,
        messages,
        max_tokens,
        json_schema,
        smart,
    }));
}

/// The cycle prompt with the budget line as the ledger stands now and the recalled memories.
fn build_prompt(state: &AgentState, ctx: &StepCtx<'_>) -> super::prompt::BuiltPrompt {
    let memories = match &ctx.memory {
        Some(memory) => {
            let shown_in_full: Vec<u64> = state
                .episodes
                .iter()
                .rev()
                .take(ctx.full_steps)
                .map(|e| e.cycle)
                .collect();
            fit_memories(
                &state.recalled,
                &shown_in_full,
                memory.recall_tokens(ctx.limits.context_tokens),
                ctx.counter,
            )
        }
        None => ctx.extras.memories.clone(),
    };
    let extras = PromptExtras {
        memories,
        budget: ctx
            .budget
            .map(|view| view.message(next_call_worst(state, view, ctx)))
            .or_else(|| ctx.extras.budget.clone()),
    };
    let commands = visible_commands(state, ctx);
    build_cycle_prompt(&PromptInputs {
        state,
        commands: &commands,
        now: ctx.now,
        limits: ctx.limits,
        extras: &extras,
        full_steps: ctx.full_steps,
        counter: ctx.counter,
    })
}

/// The commands the model is offered: those its policy does not deny. A denied command the model
/// names anyway is refused with the reason (`propose`).
fn visible_commands(state: &AgentState, ctx: &StepCtx<'_>) -> CommandSet {
    CommandSet {
        specs: ctx
            .commands
            .specs
            .iter()
            .filter(|spec| {
                ctx.policy
                    .action_for(&state.settings.policy, &spec.name, spec.risk)
                    != ClassAction::Deny
            })
            .cloned()
            .collect(),
    }
}

/// The worst case of a cycle call of the size last seen, for the budget thresholds.
fn next_call_worst(state: &AgentState, view: &BudgetView, ctx: &StepCtx<'_>) -> Micros {
    view.price
        .cost(state.last_prompt_tokens, ctx.limits.max_tokens as u64)
}

fn cycle_prompt(state: &AgentState, ctx: &StepCtx<'_>) -> Vec<Message> {
    build_prompt(state, ctx).messages
}

/// Starts a cycle: honours a requested pause and the cycle limit, asks for summaries of the
/// episodes that lack one (the runtime runs them beside the main call), then asks the model.
fn begin_cycle(state: &mut AgentState, ctx: &StepCtx<'_>, fx: &mut Vec<Effect>) {
    if let Some(by) = state.pause_requested.take() {
        pause(state, PauseReason::ByUser { by }, fx);
        return;
    }
    let limit = state.settings.cycle_limit;
    if limit > 0 && state.cycles_since_resume >= limit {
        pause(state, PauseReason::CycleLimit { limit }, fx);
        return;
    }
    state.phase = Phase::Thinking;
    state.rethink_used = false;
    state.paced = None;
    let input_chars = (ctx.limits.send_limit() * 3).max(2000);
    // Newest first and bounded, so that resuming an old agent does not fire hundreds of calls at once;
    // the rest are condensed over the next cycles.
    let unsummarised = state.episodes.iter().rev().filter(|e| e.summary.is_none());
    for episode in unsummarised.take(MAX_SUMMARIES_PER_CYCLE) {
        fx.push(Effect::CallModel(ModelCall {
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
        state.call_seq += 1;
        fx.push(Effect::Recall {
            seq: state.call_seq,
            query: recall_query(&state.full_task(), &state.episodes, RECALL_QUERY_STEPS),
        });
        return;
    }
    think(state, ctx, fx);
}

/// Asks the model for the cycle's step, with the prompt as it stands now.
fn think(state: &mut AgentState, ctx: &StepCtx<'_>, fx: &mut Vec<Effect>) {
    let built = build_prompt(state, ctx);
    state.last_prompt_tokens = built.prompt_tokens as u64;
    if built.prompt_tokens > ctx.limits.send_limit() {
        fx.push(Effect::Notify(format!(
            "The prompt needs {} tokens but the model's context leaves {} after the reply reserve; raise context_tokens or lower max_tokens for this model.",
            built.prompt_tokens,
            ctx.limits.send_limit()
        )));
    }
    ask_for_reply(state, ctx, fx, CallPurpose::Think, built.messages, false);
}

/// A call whose answer must be an agent reply (thoughts and one command), in the reply schema.
fn ask_for_reply(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    fx: &mut Vec<Effect>,
    purpose: CallPurpose,
    messages: Vec<Message>,
    smart: bool,
) {
    let schema = Some(visible_commands(state, ctx).reply_schema());
    call_model(
        state,
        fx,
        purpose,
        messages,
        ctx.limits.max_tokens,
        schema,
        smart,
    );
}

/// Closes the cycle without running the proposed command: the model reads `message` as the
/// result, the humans read `notice`, and the next cycle begins.
fn refuse_command(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    fx: &mut Vec<Effect>,
    command: CommandCall,
    reasoning: String,
    message: String,
    notice: String,
) {
    fx.push(Effect::Notify(notice));
    let last = message.clone();
    record_episode(state, command, reasoning, Outcome::Error(message), None, fx);
    state.refusals_in_row += 1;
    if state.refusals_in_row >= MAX_REFUSALS {
        state.refusals_in_row = 0;
        pause(state, PauseReason::Refusals { last }, fx);
        return;
    }
    begin_cycle(state, ctx, fx);
}

fn pause(state: &mut AgentState, reason: PauseReason, fx: &mut Vec<Effect>) {
    // Replies to calls made before the pause must not be applied afterwards.
    state.call_seq += 1;
    state.phase = Phase::Paused(reason.clone());
    fx.push(Effect::Paused(reason));
}

fn on_model_reply(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    seq: u64,
    purpose: CallPurpose,
    text: String,
    fx: &mut Vec<Effect>,
) {
    if let CallPurpose::Summary { cycle } = purpose {
        if let Some(episode) = state.episodes.iter_mut().find(|e| e.cycle == cycle) {
            if episode.summary.is_none() {
                if let Some(summary) = super::history::clean_summary(&text) {
                    episode.summary = Some(summary);
                    fx.push(Effect::EpisodeRecorded { cycle });
                    if let Some(memory) = &ctx.memory {
                        fx.push(Effect::Remember {
                            cycle,
                            text: cycle_memory_text(episode, memory.text_chars),
                        });
                    }
                }
            }
        }
        return;
    }
    if seq != state.call_seq {
        // A reply to a call that a pause or restart has superseded.
        return;
    }
    match (purpose, &state.phase) {
        (CallPurpose::Profile, Phase::Creating) => {
            let profile = super::prompt::parse_profile(&text).unwrap_or_else(|| {
                fx.push(Effect::Notify(
                    "The model's profile was unusable; using the default profile.".into(),
                ));
                Profile::fallback()
            });
            state.profile = Some(profile);
            fx.push(Effect::ShowProfile);
            begin_cycle(state, ctx, fx);
        }
        (CallPurpose::Think | CallPurpose::Reask | CallPurpose::Rethink, Phase::Thinking) => {
            on_cycle_reply(state, ctx, purpose, text, fx)
        }
        (CallPurpose::SelfCritique, Phase::Critiquing) => {
            let by = state.pending.as_ref().and_then(|p| p.approved_by.clone());
            record_from_pending(
                state,
                Outcome::SelfCritique(text.trim().to_string()),
                by,
                fx,
            );
            begin_cycle(state, ctx, fx);
        }
        _ => {}
    }
}

fn on_cycle_reply(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    purpose: CallPurpose,
    text: String,
    fx: &mut Vec<Effect>,
) {
    let reply = match parse_reply(&text) {
        Ok((reply, _route)) => reply,
        Err(error) => {
            state.invalid_replies_in_row += 1;
            let error = error.to_string();
            if state.invalid_replies_in_row >= MAX_INVALID_REPLIES {
                pause(state, PauseReason::InvalidReplies { last_error: error }, fx);
            } else {
                let messages = reask_messages(cycle_prompt(state, ctx), &text, &error);
                ask_for_reply(state, ctx, fx, CallPurpose::Reask, messages, false);
            }
            return;
        }
    };
    state.invalid_replies_in_row = 0;
    // The model is told about the commands it is offered; a denied command it names anyway is
    // validated against the full set so that `propose` can refuse it with the policy's reason.
    let checked = visible_commands(state, ctx)
        .validate(&reply.command)
        .or_else(|message| ctx.commands.validate(&reply.command).map_err(|_| message));
    let valid = match checked {
        Ok(valid) => valid,
        Err(message) => {
            let notice = format!(
                "Cycle {}: the model's command was not run: {message}",
                state.cycle
            );
            let (command, reasoning) = (reply.command, reply.thoughts.reasoning);
            refuse_command(state, ctx, fx, command, reasoning, message, notice);
            return;
        }
    };
    if repeats_last_step(state.last_episode(), &valid.call) {
        if !state.rethink_used && purpose != CallPurpose::Rethink {
            state.rethink_used = true;
            let messages = rethink_messages(cycle_prompt(state, ctx), &valid.call);
            let smart = ctx.smart_model_available;
            ask_for_reply(state, ctx, fx, CallPurpose::Rethink, messages, smart);
        } else {
            let refusal = duplicate_refusal(&valid.call);
            let notice = format!(
                "Cycle {}: refused a duplicate of the command just executed.",
                state.cycle
            );
            let reasoning = reply.thoughts.reasoning;
            refuse_command(state, ctx, fx, valid.call, reasoning, refusal, notice);
        }
        return;
    }
    propose(state, ctx, valid, reply.thoughts, fx);
}

fn propose(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    valid: ValidCall,
    thoughts: Thoughts,
    fx: &mut Vec<Effect>,
) {
    let unattended = state.settings.continuous || state.auto_approvals_left > 0;
    let soft_capped = ctx.budget.is_some_and(BudgetView::soft_cap_reached);
    let auto_stop = match ctx.budget {
        Some(view) if unattended && soft_capped => {
            state.auto_approvals_left = 0;
            Some(view.soft_cap_note())
        }
        _ => None,
    };
    if let Some(denial) = ctx
        .policy
        .denial(&state.settings.policy, &valid.call.name, valid.risk)
    {
        let notice = format!(
            "Cycle {}: `{}` was not run: its class ({}) is denied by policy.",
            state.cycle,
            valid.call.name,
            valid.risk.label()
        );
        let (call, reasoning) = (valid.call, thoughts.reasoning);
        refuse_command(state, ctx, fx, call, reasoning, denial, notice);
        return;
    }
    state.refusals_in_row = 0;
    let action = ctx
        .policy
        .action_for(&state.settings.policy, &valid.call.name, valid.risk);
    let automatic = action == ClassAction::Auto && unattended && !soft_capped;
    let proposal = Proposal {
        cycle: state.cycle,
        thoughts,
        command: valid.call,
        risk: valid.risk,
        interrupted: false,
        approved_by: None,
        spend: ctx.budget.map(|view| spend_note(state, view, ctx)),
        auto_stop,
        paced: state.paced.take().map(|p| format!("Waited for {}.", p.why)),
    };
    state.pending = Some(proposal.clone());
    if automatic {
        if !state.settings.continuous {
            state.auto_approvals_left -= 1;
        }
        let by = if state.settings.continuous {
            "continuous mode".to_string()
        } else {
            format!("Approve ×N ({} left)", state.auto_approvals_left)
        };
        fx.push(Effect::ShowProposal {
            proposal,
            auto_approved: true,
        });
        start_execution(state, by, fx);
    } else {
        state.phase = Phase::AwaitingDecision;
        fx.push(Effect::ShowProposal {
            proposal,
            auto_approved: false,
        });
    }
}

fn spend_note(state: &AgentState, view: &BudgetView, ctx: &StepCtx<'_>) -> SpendNote {
    let average_reply =
        (state.usage.calls > 0).then(|| state.usage.completion_tokens / state.usage.calls);
    SpendNote::estimate(
        view,
        state.last_prompt_tokens,
        average_reply,
        ctx.limits.max_tokens,
    )
}

fn start_execution(state: &mut AgentState, by: String, fx: &mut Vec<Effect>) {
    let Some(pending) = state.pending.as_mut() else {
        return;
    };
    pending.approved_by = Some(by);
    state.phase = Phase::Executing;
    fx.push(Effect::Execute {
        cycle: pending.cycle,
        call: pending.command.clone(),
        risk: pending.risk,
    });
}

fn on_model_failure(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    seq: u64,
    purpose: CallPurpose,
    error: String,
    fx: &mut Vec<Effect>,
) {
    if matches!(purpose, CallPurpose::Summary { .. }) {
        // Summaries are retried at the next cycle; until then the mechanical one-liner stands in.
        return;
    }
    if seq != state.call_seq {
        return;
    }
    match (purpose, &state.phase) {
        (CallPurpose::Profile, Phase::Creating) => {
            fx.push(Effect::Notify(format!(
                "Profile generation failed ({error}); using the default profile."
            )));
            state.profile = Some(Profile::fallback());
            fx.push(Effect::ShowProfile);
            begin_cycle(state, ctx, fx);
        }
        (CallPurpose::SelfCritique, Phase::Critiquing) => {
            fx.push(Effect::Notify(format!(
                "The self-critique failed ({error}); the proposal is still waiting for a decision."
            )));
            show_pending_again(state, fx);
        }
        (_, Phase::Thinking) => pause(state, PauseReason::ModelError { message: error }, fx),
        _ => {}
    }
}

/// The ledger refused a call: no budget can pay for its worst case. The agent pauses where it is
/// (a summary simply waits for a later cycle) and continues when the budget is raised.
fn on_call_refused(
    state: &mut AgentState,
    seq: u64,
    purpose: CallPurpose,
    reason: String,
    fx: &mut Vec<Effect>,
) {
    if matches!(purpose, CallPurpose::Summary { .. }) || seq != state.call_seq {
        return;
    }
    match (purpose, &state.phase) {
        (CallPurpose::SelfCritique, Phase::Critiquing) => {
            fx.push(Effect::Notify(format!(
                "The self-critique was not run: {reason}. The proposal is still waiting for a decision."
            )));
            show_pending_again(state, fx);
        }
        (_, Phase::Thinking | Phase::Creating) => {
            pause(state, PauseReason::Budget { message: reason }, fx)
        }
        _ => {}
    }
}

/// A new budget for the agent; one paused because its budget ran out continues by itself.
fn on_set_budget(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    budget: Micros,
    by: String,
    fx: &mut Vec<Effect>,
) {
    state.settings.budget = Some(budget);
    fx.push(Effect::Notify(format!(
        "{by} set the agent's budget to {}.",
        super::budget::format_usd(budget)
    )));
    if matches!(state.phase, Phase::Paused(PauseReason::Budget { .. })) {
        on_resume(state, ctx, None, fx);
    }
}

/// The owner narrows a class for this agent; the core checks again that it is no wider than the
/// server's policy, so no surface can widen it by mistake.
fn on_set_policy(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    risk: super::commands::Risk,
    action: Option<ClassAction>,
    by: String,
    fx: &mut Vec<Effect>,
) {
    match action {
        Some(action) => {
            if let Err(why) = ctx.policy.check_narrowing(risk, action) {
                fx.push(Effect::Rejected(why));
                return;
            }
            state.settings.policy.insert(risk, action);
        }
        None => {
            state.settings.policy.remove(&risk);
        }
    }
    let (now, _) = ctx.policy.effective(&state.settings.policy, risk);
    fx.push(Effect::Notify(format!(
        "{by} set {} commands to `{}` for this agent.",
        risk.label(),
        now.label()
    )));
}

fn show_pending_again(state: &mut AgentState, fx: &mut Vec<Effect>) {
    if let Some(pending) = &state.pending {
        state.phase = Phase::AwaitingDecision;
        fx.push(Effect::ShowProposal {
            proposal: pending.clone(),
            auto_approved: false,
        });
    }
}

fn on_decision(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    cycle: u64,
    decision: Decision,
    by: String,
    fx: &mut Vec<Effect>,
) {
    if !state.awaits_decision_on(cycle) {
        fx.push(Effect::Rejected(
            "this proposal is no longer pending".to_string(),
        ));
        return;
    }
    if matches!(decision, Decision::Approve | Decision::ApproveN(_)) {
        // The policy may have become stricter since the card was shown (the owner narrowed it,
        // or the bot restarted with a stricter config): the policy in force now decides.
        let denial = state.pending.as_ref().and_then(|p| {
            ctx.policy
                .denial(&state.settings.policy, &p.command.name, p.risk)
        });
        if let Some(denial) = denial {
            state.auto_approvals_left = 0;
            fx.push(Effect::Notify(format!(
                "Cycle {}: the approved command was not run: its class is now denied by policy.",
                state.cycle
            )));
            record_from_pending(state, Outcome::Error(denial), Some(by), fx);
            begin_cycle(state, ctx, fx);
            return;
        }
    }
    match decision {
        Decision::Approve => start_execution(state, by, fx),
        Decision::ApproveN(n) => {
            match ctx.budget.filter(|view| view.soft_cap_reached()) {
                Some(view) => {
                    state.auto_approvals_left = 0;
                    fx.push(Effect::Notify(format!(
                        "Approved this step only. {}",
                        view.soft_cap_note()
                    )));
                }
                None => state.auto_approvals_left = n.saturating_sub(1),
            }
            start_execution(state, by, fx);
        }
        Decision::Deny => {
            state.auto_approvals_left = 0;
            pause(state, PauseReason::Denied { by }, fx);
        }
        Decision::Feedback(text) => {
            state.auto_approvals_left = 0;
            record_from_pending(state, Outcome::HumanFeedback(text), Some(by), fx);
            begin_cycle(state, ctx, fx);
        }
        Decision::SelfCritique => {
            let Some(pending) = state.pending.as_mut() else {
                return;
            };
            pending.approved_by = Some(by);
            let profile = state.profile.clone().unwrap_or_else(Profile::fallback);
            let messages = self_critique_messages(&profile, &pending.thoughts, &pending.command);
            state.phase = Phase::Critiquing;
            call_model(
                state,
                fx,
                CallPurpose::SelfCritique,
                messages,
                CRITIQUE_MAX_TOKENS.min(ctx.limits.max_tokens),
                None,
                false,
            );
        }
    }
}

fn on_command_finished(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    cycle: u64,
    outcome: Outcome,
    fx: &mut Vec<Effect>,
) {
    let Some(pending) = state.pending.clone() else {
        return;
    };
    if state.phase != Phase::Executing || pending.cycle != cycle {
        return;
    }
    let outcome = if ctx.counter.count(outcome.text()) > ctx.limits.max_result_tokens() {
        Outcome::Error(format!(
            "Failure: command {} returned too much output. Do not execute this command again with the same arguments.",
            pending.command.name
        ))
    } else {
        outcome
    };
    let finished = pending.command.name == "finish" && matches!(outcome, Outcome::Success(_));
    record_from_pending(state, outcome, pending.approved_by.clone(), fx);
    if finished {
        let reason = pending
            .command
            .args
            .get("reason")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string();
        state.auto_approvals_left = 0;
        state.phase = Phase::Finished {
            reason: reason.clone(),
        };
        fx.push(Effect::Finished { reason });
    } else {
        begin_cycle(state, ctx, fx);
    }
}

fn record_from_pending(
    state: &mut AgentState,
    outcome: Outcome,
    by: Option<String>,
    fx: &mut Vec<Effect>,
) {
    if let Some(pending) = state.pending.take() {
        record_episode(
            state,
            pending.command,
            pending.thoughts.reasoning,
            outcome,
            by,
            fx,
        );
    }
}

/// Closes the current cycle with an episode and moves to the next cycle number.
fn record_episode(
    state: &mut AgentState,
    command: CommandCall,
    reasoning: String,
    outcome: Outcome,
    decided_by: Option<String>,
    fx: &mut Vec<Effect>,
) {
    let cycle = state.cycle;
    state.episodes.push(Episode {
        cycle,
        command,
        reasoning,
        outcome,
        summary: None,
        decided_by,
    });
    state.pending = None;
    state.cycle += 1;
    state.cycles_since_resume += 1;
    fx.push(Effect::EpisodeRecorded { cycle });
}

fn on_pause(state: &mut AgentState, by: String, fx: &mut Vec<Effect>) {
    match state.phase {
        Phase::Creating | Phase::Thinking | Phase::AwaitingDecision | Phase::Critiquing => {
            if state.phase == Phase::Critiquing {
                state.phase = Phase::AwaitingDecision;
            }
            state.auto_approvals_left = 0;
            pause(state, PauseReason::ByUser { by }, fx);
        }
        Phase::Executing => {
            // A running command is never cut short; the pause takes effect when it returns.
            state.auto_approvals_left = 0;
            state.pause_requested = Some(by);
            fx.push(Effect::Notify(
                "The agent will pause when the running command finishes.".into(),
            ));
        }
        Phase::Paused(_) | Phase::Finished { .. } => fx.push(Effect::Rejected(format!(
            "the agent is already {}",
            state.phase.label()
        ))),
    }
}

fn on_resume(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    follow_up: Option<String>,
    fx: &mut Vec<Effect>,
) {
    let follow_up = follow_up
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    match &state.phase {
        Phase::Finished { .. } => match follow_up {
            Some(task) => {
                state.follow_ups.push(task);
                state.cycles_since_resume = 0;
                begin_cycle(state, ctx, fx);
            }
            None => fx.push(Effect::Rejected(
                "the agent has finished; give it a follow-up task to continue".into(),
            )),
        },
        Phase::Paused(_) => {
            if let Some(task) = follow_up {
                state.follow_ups.push(task);
            }
            state.invalid_replies_in_row = 0;
            state.cycles_since_resume = 0;
            if state.pending.is_some() {
                show_pending_again(state, fx);
            } else if state.profile.is_none() {
                state.phase = Phase::Creating;
                request_profile(state, ctx, fx);
            } else {
                begin_cycle(state, ctx, fx);
            }
        }
        _ => fx.push(Effect::Rejected(format!(
            "the agent is already running ({})",
            state.phase.label()
        ))),
    }
}

fn on_recovered(
    state: &mut AgentState,
    ctx: &StepCtx<'_>,
    interrupted: bool,
    fx: &mut Vec<Effect>,
) {
    match state.phase {
        Phase::Creating => {
            if state.profile.is_none() {
                request_profile(state, ctx, fx);
            } else {
                fx.push(Effect::ShowProfile);
                begin_cycle(state, ctx, fx);
            }
        }
        Phase::Thinking => begin_cycle(state, ctx, fx),
        Phase::AwaitingDecision | Phase::Critiquing => show_pending_again(state, fx),
        Phase::Executing => {
            if interrupted {
                if let Some(pending) = state.pending.as_mut() {
                    pending.interrupted = true;
                    pending.approved_by = None;
                }
                state.auto_approvals_left = 0;
                fx.push(Effect::Notify(format!(
                    "Cycle {} was interrupted while its command ran; it was not re-run. Decide again.",
                    state.cycle
                )));
                show_pending_again(state, fx);
            } else {
                // The journal has no record of the command starting, so running it now is its first run.
                let by = state
                    .pending
                    .as_ref()
                    .and_then(|p| p.approved_by.clone())
                    .unwrap_or_else(|| "recovery".into());
                start_execution(state, by, fx);
            }
        }
        Phase::Paused(_) | Phase::Finished { .. } => {}
    }
}
