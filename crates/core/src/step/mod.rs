//! `step`: the whole decision logic of the agent loop as a pure function of state, event and
//! context. `step(&mut state, event, &ctx)` applies one `Event` to the state in place and returns,
//! in order, the `Effect`s the runtime must carry out; the runtime stores the state after every
//! step, so no old state is kept. The event handlers are methods of the private `Stepper` (the
//! state, the context, the effects so far), one `on_*` per event, so a handler can call the shared
//! steps (`propose`, `refuse_command`, `pause`, `finish`) without passing them around. `thinking`
//! holds the prompt and the model calls, `record` the episode, `decide` and `edit` a person's
//! answer to a card, `control` the human and money events, `expire` a card's deadline, `remember`
//! the approval rules, `context` what `step` may consult.
//!
//! A cycle: `begin_cycle` asks for summaries of older episodes and, with memory on, emits `Recall`
//! and waits for `Recalled`; `think` emits `CallModel` (purpose `Think`). The reply comes back as
//! `ModelReplied`; `on_cycle_reply` parses it (`parse_reply`), validates the command
//! (`CommandSet::validate`) and consults the watchdog; `propose` applies the policy, the taint rule
//! and the rules, stores a `Proposal` in `state.pending`, enters `AwaitingDecision` and emits
//! `ShowProposal` (or starts the command at once when it is approved automatically). A proposal the
//! watchdog or `no_progress` flags becomes the stuck panel (`Proposal::stuck`), never approved
//! automatically. A decision (`on_decision`) moves to `Executing` and emits `Execute`; the result
//! comes back as `CommandFinished`, and `on_command_finished` records the episode and begins the
//! next cycle. Each main model call carries `state.call_seq`, and replies to superseded calls are
//! ignored. `MAX_INVALID_REPLIES` and `MAX_REFUSALS` in a row pause the agent.

use super::audit::{AuditEntry, AuditEvent, ShownCommand};
use super::budget::BudgetView;
use super::commands::{ValidCall, FINISH};
use super::decision::Decision;
use super::event::{CallPurpose, Effect, Event};
use super::history::{Episode, Outcome};
use super::memory::cycle_memory_text;
use super::person::{ActedBy, Person};
use super::policy::ClassAction;
use super::prompt::{reask_messages, rethink_messages, self_critique_messages};
use super::reply::{parse_reply, CommandCall, Thoughts};
use super::rules::ApprovalRule;
use super::state::{AgentState, PauseReason, Phase, Profile, Proposal};
use super::taint::{outgoing_data, Outgoing, Taint};
use super::text::truncate_chars;
use super::usage::Usage;
use super::watchdog::{no_progress, repeated_after_rethink, repeats_last_step, Stuck};

mod context;
mod control;
mod decide;
mod edit;
mod expire;
mod record;
mod remember;
mod thinking;
use thinking::ModelChoice;

pub use context::{MemoryPolicy, ReplyFormat, StepCtx};
pub use edit::{argument_text, edited_value};

/// What a decision on a proposal that is no longer pending is told.
pub const NO_LONGER_PENDING: &str = "this proposal is no longer pending";

/// The longest refusal (and refused call's arguments) kept in the history, in characters.
const MAX_REFUSAL_CHARS: usize = 2_000;

/// A refused call as the history keeps it: its arguments as they came when they are short, or
/// their beginning as one text when they are not (a reply with thousands of arguments).
fn bounded_call(call: CommandCall) -> CommandCall {
    let json = serde_json::to_string(&call.args).unwrap_or_default();
    if json.chars().count() <= MAX_REFUSAL_CHARS {
        return call;
    }
    let mut args = serde_json::Map::new();
    args.insert(
        "arguments_cut".into(),
        serde_json::Value::String(truncate_chars(&json, MAX_REFUSAL_CHARS)),
    );
    CommandCall {
        name: truncate_chars(&call.name, 100),
        args,
    }
}

/// Invalid replies in a row that pause the agent (AutoGPT 0.5 stops after three).
pub const MAX_INVALID_REPLIES: u32 = 3;
/// Refused commands in a row that pause the agent: past this the model is not learning from the
/// refusals, and every further cycle is paid for.
pub const MAX_REFUSALS: u32 = 3;
const CRITIQUE_MAX_TOKENS: u32 = 600;
/// Waits for a rate limit shorter than this are not announced (they would only add noise).
const PACING_NOTICE_SECS: i64 = 5;

/// Applies one event. Effects are returned in the order the runtime must carry them out, after it
/// has stored the new state.
pub fn step(state: &mut AgentState, event: Event, ctx: &StepCtx<'_>) -> Vec<Effect> {
    state.updated_at = ctx.now;
    let mut stepper = Stepper {
        state,
        ctx,
        fx: Vec::new(),
    };
    match event {
        Event::Start => stepper.on_start(),
        Event::ModelReplied {
            seq,
            purpose,
            text,
            usage,
        } => stepper.on_model_reply(seq, purpose, text, usage),
        Event::ModelFailed {
            seq,
            purpose,
            error,
        } => stepper.on_model_failure(seq, purpose, error),
        Event::CallRefused {
            seq,
            purpose,
            reason,
        } => stepper.on_call_refused(seq, purpose, reason),
        Event::Paced {
            seq,
            purpose,
            pacing,
        } => stepper.on_paced(seq, purpose, pacing),
        Event::SetBudget { budget, by } => stepper.on_set_budget(budget, by),
        Event::Continue { by, budget } => stepper.on_continue(by, budget),
        Event::SetPolicy { risk, action, by } => stepper.on_set_policy(risk, action, by),
        Event::Recalled { seq, hits } => stepper.on_recalled(seq, hits),
        Event::Decided {
            cycle,
            decision,
            by,
        } => stepper.on_decision(cycle, decision, by),
        Event::CommandFinished { cycle, outcome } => stepper.on_command_finished(cycle, outcome),
        Event::CommandStale { cycle, why } => stepper.on_command_stale(cycle, why),
        Event::DeadlinePassed { cycle } => stepper.on_deadline_passed(cycle),
        Event::Pause { by } => {
            // A running command is never cut short: the pause waits for it.
            let event = match stepper.state.progress.phase {
                Phase::Executing => AuditEvent::PauseRequested,
                _ => AuditEvent::Paused,
            };
            stepper.on_pause(by.clone());
            stepper.audit_unless_rejected(by, event);
        }
        Event::Finish { by } => {
            let event = match stepper.state.progress.phase {
                Phase::Executing => AuditEvent::FinishRequested,
                _ => AuditEvent::Finished,
            };
            stepper.on_finish(by.clone());
            stepper.audit_unless_rejected(by, event);
        }
        Event::Resume { by, follow_up } => {
            stepper.on_resume(follow_up);
            stepper.audit_unless_rejected(by, AuditEvent::Resumed);
        }
        Event::Recovered { interrupted } => stepper.on_recovered(interrupted),
        Event::RevokeRule { id, by } => stepper.on_revoke_rule(id, by),
    }
    stepper.fx
}

/// One application of an event: the state it changes, what it may consult, and the effects it
/// emits, in order.
struct Stepper<'s, 'c> {
    state: &'s mut AgentState,
    ctx: &'c StepCtx<'c>,
    fx: Vec<Effect>,
}

impl Stepper<'_, '_> {
    /// Adds an entry to the audit trail, at the step's time.
    fn audit(&mut self, by: impl Into<ActedBy>, event: AuditEvent) {
        self.fx.push(Effect::Audit(AuditEntry {
            at: self.ctx.now,
            by: by.into(),
            event,
        }));
    }

    /// Audits a human's event that the step applied (it rejected nothing).
    fn audit_unless_rejected(&mut self, by: Person, event: AuditEvent) {
        if !self.fx.iter().any(|e| matches!(e, Effect::Rejected(_))) {
            self.audit(by, event);
        }
    }

    /// What `call` would send out when the agent is tainted and the command can carry data out.
    fn outgoing_of(&self, call: &CommandCall) -> Option<Outgoing> {
        let tainted_by = self.state.safety.tainted.clone()?;
        let spec = self.ctx.commands.get(&call.name)?;
        let (argument, data) = outgoing_data(spec, call)?;
        Some(Outgoing {
            argument,
            data,
            tainted_by,
        })
    }

    /// The pending command as its card shows it, for the trail.
    fn shown_pending(&self) -> Option<ShownCommand> {
        let pending = self.state.progress.pending.as_ref()?;
        Some(ShownCommand::of(&pending.command, pending.revision))
    }

    /// Begins a new agent with its profile, generating one first when it has none.
    fn on_start(&mut self) {
        if self.state.progress.phase != Phase::Creating {
            self.fx
                .push(Effect::Rejected("the agent has already started".into()));
            return;
        }
        if self.state.brief.profile.is_none() {
            self.request_profile();
        } else {
            self.fx.push(Effect::ShowProfile);
            self.begin_cycle();
        }
    }

    /// Closes the cycle without running the proposed command: the model reads `message` as the
    /// result, the humans read `notice`, and the next cycle begins.
    fn refuse_command(
        &mut self,
        command: CommandCall,
        reasoning: String,
        message: String,
        notice: String,
    ) {
        // A refusal is model-made text about model-made input: it is bounded like command output,
        // and so is the refused call kept in the history, whatever the reply held.
        let message = truncate_chars(&message, MAX_REFUSAL_CHARS);
        let notice = truncate_chars(&notice, MAX_REFUSAL_CHARS);
        let command = bounded_call(command);
        self.fx.push(Effect::Notify(notice));
        let last = message.clone();
        self.record_episode(
            command,
            truncate_chars(&reasoning, MAX_REFUSAL_CHARS),
            Outcome::Error(message),
            None,
        );
        self.state.safety.refusals_in_row += 1;
        if self.state.safety.refusals_in_row >= MAX_REFUSALS {
            self.state.safety.refusals_in_row = 0;
            self.pause(PauseReason::Refusals { last });
            return;
        }
        self.begin_cycle();
    }

    /// Ends the agent's task: nothing runs on, and what the model was asked is ignored.
    fn finish(&mut self, reason: String) {
        self.state.progress.call_seq += 1;
        self.state.safety.auto_approvals_left = 0;
        self.state.progress.pause_requested = None;
        self.state.progress.finish_requested = None;
        self.state.progress.phase = Phase::Finished {
            reason: reason.clone(),
        };
        self.fx.push(Effect::Finished { reason });
    }

    /// Stops the agent where it is, for `reason`.
    fn pause(&mut self, reason: PauseReason) {
        // Replies to calls made before the pause must not be applied afterwards.
        self.state.progress.call_seq += 1;
        // A resumed card is a card shown anew: it gets a deadline of its own.
        if let Some(pending) = self.state.progress.pending.as_mut() {
            pending.deadline = None;
        }
        self.state.progress.phase = Phase::Paused(reason.clone());
        self.fx.push(Effect::Paused(reason));
    }

    /// Counts the reply's tokens, then applies it to the call it answers.
    fn on_model_reply(
        &mut self,
        seq: u64,
        purpose: CallPurpose,
        text: String,
        usage: Option<Usage>,
    ) {
        if let Some(usage) = usage {
            self.state.money.usage.add(&usage);
        }
        if let CallPurpose::Summary { cycle } = purpose {
            if let Some(episode) = self
                .state
                .progress
                .episodes
                .iter_mut()
                .find(|e| e.cycle == cycle)
            {
                if episode.summary.is_none() {
                    if let Some(summary) = super::history::clean_summary(&text) {
                        episode.summary = Some(summary);
                        self.fx.push(Effect::EpisodeRecorded { cycle });
                        if let Some(memory) = &self.ctx.memory {
                            self.fx.push(Effect::Remember {
                                cycle,
                                text: cycle_memory_text(episode, memory.text_chars),
                            });
                        }
                    }
                }
            }
            return;
        }
        if seq != self.state.progress.call_seq {
            // A reply to a call that a pause or restart has superseded.
            return;
        }
        match (purpose, &self.state.progress.phase) {
            (CallPurpose::Profile, Phase::Creating) => {
                let profile = super::prompt::parse_profile(&text).unwrap_or_else(|| {
                    self.fx.push(Effect::Notify(
                        "The model's profile was unusable; using the default profile.".into(),
                    ));
                    Profile::fallback()
                });
                self.state.brief.profile = Some(profile);
                self.fx.push(Effect::ShowProfile);
                self.begin_cycle();
            }
            (CallPurpose::Think | CallPurpose::Reask | CallPurpose::Rethink, Phase::Thinking) => {
                self.on_cycle_reply(purpose, text)
            }
            (CallPurpose::SelfCritique, Phase::Critiquing) => {
                let by = self
                    .state
                    .progress
                    .pending
                    .as_ref()
                    .and_then(|p| p.approved_by.clone());
                self.record_from_pending(Outcome::SelfCritique(text.trim().to_string()), by);
                self.begin_cycle();
            }
            _ => {}
        }
    }

    /// Applies the model's answer for the cycle: re-asks for an invalid reply, refuses an invalid
    /// or repeated command, and proposes a valid one.
    fn on_cycle_reply(&mut self, purpose: CallPurpose, text: String) {
        let reply = match parse_reply(&text) {
            Ok((reply, _route)) => reply,
            Err(error) => {
                self.state.safety.invalid_replies_in_row += 1;
                let error = error.to_string();
                if self.state.safety.invalid_replies_in_row >= MAX_INVALID_REPLIES {
                    self.pause(PauseReason::InvalidReplies { last_error: error });
                } else {
                    let messages = reask_messages(self.cycle_prompt(), &text, &error);
                    self.ask_for_reply(CallPurpose::Reask, messages, ModelChoice::Usual);
                }
                return;
            }
        };
        self.state.safety.invalid_replies_in_row = 0;
        // The model is told about the commands it is offered; a denied command it names anyway is
        // validated against the full set so that `propose` can refuse it with the policy's reason.
        let checked = self
            .visible_commands()
            .validate(&reply.command)
            .or_else(|message| {
                self.ctx
                    .commands
                    .validate(&reply.command)
                    .map_err(|_| message)
            });
        let valid = match checked {
            Ok(valid) => valid,
            Err(message) => {
                let notice = format!(
                    "Cycle {}: the model's command was not run: {message}",
                    self.state.progress.cycle
                );
                let (command, reasoning) = (reply.command, reply.thoughts.reasoning);
                self.refuse_command(command, reasoning, message.to_string(), notice);
                return;
            }
        };
        if repeats_last_step(self.state.last_episode(), &valid.call) {
            if !self.state.safety.rethink_used && purpose != CallPurpose::Rethink {
                self.state.safety.rethink_used = true;
                let messages = rethink_messages(self.cycle_prompt(), &valid.call);
                let model = self.rethink_model();
                self.ask_for_reply(CallPurpose::Rethink, messages, model);
            } else {
                // The rethink did not help: a person decides, on the stuck panel.
                let why = repeated_after_rethink(&valid.call);
                self.propose(valid, reply.thoughts, Some(why));
            }
            return;
        }
        // The reply to a person's rethink is the fresh look they asked for: it is shown to them
        // as an ordinary card even though the steps before it still failed.
        let stuck = match self.state.safety.rethink_requested {
            Some(_) => None,
            None => no_progress(&self.state.progress.episodes, &valid.call),
        };
        self.propose(valid, reply.thoughts, stuck);
    }

    /// Shows a valid command for a decision, or runs it at once when it may run unattended; a
    /// command the policy denies is refused instead.
    /// `stuck` says why the agent makes no progress: the card is then the stuck panel.
    fn propose(&mut self, valid: ValidCall, thoughts: Thoughts, stuck: Option<String>) {
        let ctx = self.ctx;
        let stuck = stuck.map(|why| Stuck {
            why,
            smart: ctx.smart_model_available,
        });
        if stuck.is_some() {
            // A stuck agent is shown to a person whatever ran it unattended.
            self.state.safety.auto_approvals_left = 0;
        }
        let rethought = self.state.safety.rethink_requested.take();
        // A person waits for the proposal they asked for: nothing approves it for them.
        let shown_to_a_person = stuck.is_some() || rethought.is_some();
        let unattended = self.state.runs_unattended() && !shown_to_a_person;
        let soft_capped = ctx.budget.is_some_and(BudgetView::soft_cap_reached);
        let auto_stop = match ctx.budget {
            Some(view) if unattended && soft_capped => {
                self.state.safety.auto_approvals_left = 0;
                Some(view.soft_cap_note())
            }
            _ => None,
        };
        if let Some(denial) = ctx.policy.denial(
            &self.state.brief.settings.policy,
            &valid.call.name,
            valid.risk,
        ) {
            let notice = format!(
                "Cycle {}: `{}` was not run: its class ({}) is denied by policy.",
                self.state.progress.cycle,
                valid.call.name,
                valid.risk.label()
            );
            let (call, reasoning) = (valid.call, thoughts.reasoning);
            self.refuse_command(call, reasoning, denial, notice);
            return;
        }
        self.state.safety.refusals_in_row = 0;
        let action = ctx.policy.action_for(
            &self.state.brief.settings.policy,
            &valid.call.name,
            valid.risk,
        );
        let outgoing = self.outgoing_of(&valid.call);
        let sends_out = outgoing.is_some();
        let remember = match stuck {
            Some(_) => Vec::new(),
            None => self.rule_scopes(&valid.call, valid.risk, sends_out),
        };
        // A remembered rule approves like Approve ×N, and stops where it stops: at the soft cap.
        let rule = self.rule_for(&valid.call, valid.risk, sends_out);
        let auto_stop = match (auto_stop, ctx.budget) {
            (None, Some(view)) if rule.is_some() && soft_capped && !shown_to_a_person => {
                Some(view.soft_cap_note())
            }
            (stop, _) => stop,
        };
        let rule = rule.filter(|_| !soft_capped);
        // A class that needs several approvers always asks: Approve ×N is one person's. So does a
        // command that can carry data out of an agent that read untrusted content.
        let automatic = !shown_to_a_person && rule.is_some()
            || (action == ClassAction::Auto
                && unattended
                && !soft_capped
                && ctx.quorum.needed(valid.risk) <= 1
                && !sends_out);
        let proposal = Proposal {
            cycle: self.state.progress.cycle,
            thoughts,
            command: valid.call,
            risk: valid.risk,
            interrupted: false,
            approved_by: None,
            spend: ctx.budget.map(|view| self.spend_note(view)),
            auto_stop,
            paced: self
                .state
                .progress
                .paced
                .take()
                .map(|p| format!("Waited for {}.", p.why)),
            edits: Vec::new(),
            approvals: Vec::new(),
            approvals_needed: ctx.quorum.needed(valid.risk),
            revision: rethought.unwrap_or(0),
            outgoing,
            deadline: None,
            remember,
            stuck,
            script_check: rule
                .as_ref()
                .filter(|_| automatic)
                .and_then(ApprovalRule::script_check),
        };
        self.state.progress.pending = Some(proposal.clone());
        if automatic {
            let by = match &rule {
                // A rule's approval leaves Approve ×N's count as it was.
                Some(rule) => {
                    self.note_rule_use(rule);
                    ActedBy::Automatic(rule.approver())
                }
                None if self.state.brief.settings.continuous => {
                    ActedBy::Automatic("continuous mode".to_string())
                }
                None => {
                    self.state.safety.auto_approvals_left -= 1;
                    ActedBy::Automatic(format!(
                        "Approve ×N ({} left)",
                        self.state.safety.auto_approvals_left
                    ))
                }
            };
            self.audit(
                by.clone(),
                AuditEvent::AutoApproved {
                    cycle: proposal.cycle,
                    command: proposal.command.name.clone(),
                },
            );
            // The card names the rule that approved it; Approve ×N's cards count down instead.
            let proposal = Proposal {
                approved_by: rule.is_some().then(|| by.clone()),
                ..proposal
            };
            self.fx.push(Effect::ShowProposal {
                proposal,
                auto_approved: true,
            });
            self.start_execution(by);
        } else {
            self.state.progress.phase = Phase::AwaitingDecision;
            let deadline = ctx.expiry.deadline(proposal.risk, ctx.now);
            let proposal = match self.state.progress.pending.as_mut() {
                Some(pending) => {
                    pending.deadline = deadline;
                    pending.clone()
                }
                None => proposal,
            };
            self.fx.push(Effect::ShowProposal {
                proposal,
                auto_approved: false,
            });
        }
    }

    /// Has the runtime run the pending command, approved by `by`. Starting it changes only what
    /// `AgentState::start_pending_command` changes, which a restart that finds the command's start
    /// in the journal sets anew: the runtime may let that journal entry stand for a step whose
    /// only other change is a person's approval (see `runtime::storage_plan`).
    fn start_execution(&mut self, by: ActedBy) {
        let Some(pending) = self.state.start_pending_command(Some(by)) else {
            return;
        };
        self.fx.push(Effect::Execute {
            cycle: pending.cycle,
            call: pending.command.clone(),
            risk: pending.risk,
        });
    }

    /// A call failed after the client's retries: the agent falls back where it can and pauses
    /// otherwise.
    fn on_model_failure(&mut self, seq: u64, purpose: CallPurpose, error: String) {
        if matches!(purpose, CallPurpose::Summary { .. }) {
            // Summaries are retried at the next cycle; until then the mechanical one-liner stands in.
            return;
        }
        if seq != self.state.progress.call_seq {
            return;
        }
        match (purpose, &self.state.progress.phase) {
            (CallPurpose::Profile, Phase::Creating) => {
                self.fx.push(Effect::Notify(format!(
                    "Profile generation failed ({error}); using the default profile."
                )));
                self.state.brief.profile = Some(Profile::fallback());
                self.fx.push(Effect::ShowProfile);
                self.begin_cycle();
            }
            (CallPurpose::SelfCritique, Phase::Critiquing) => {
                self.fx.push(Effect::Notify(format!(
                    "The self-critique failed ({error}); the proposal is still waiting for a decision."
                )));
                self.show_pending_again();
            }
            (_, Phase::Thinking) => self.pause(PauseReason::ModelError { message: error }),
            _ => {}
        }
    }

    /// Shows the pending proposal once more and waits for a decision on it.
    fn show_pending_again(&mut self) {
        if let Some(pending) = self.state.progress.pending.as_mut() {
            // The quorum in force now counts (the config may have changed since the proposal).
            pending.approvals_needed = self.ctx.quorum.needed(pending.risk);
            // An edit or an approval keeps the card's deadline; a card shown anew gets a new one.
            if pending.deadline.is_none() {
                pending.deadline = self.ctx.expiry.deadline(pending.risk, self.ctx.now);
            }
            self.state.progress.phase = Phase::AwaitingDecision;
            self.fx.push(Effect::ShowProposal {
                proposal: pending.clone(),
                auto_approved: false,
            });
        }
    }

    /// Picks the agent up after a restart in the phase the journal left it in.
    fn on_recovered(&mut self, interrupted: bool) {
        match self.state.progress.phase {
            Phase::Creating => {
                if self.state.brief.profile.is_none() {
                    self.request_profile();
                } else {
                    self.fx.push(Effect::ShowProfile);
                    self.begin_cycle();
                }
            }
            Phase::Thinking => self.begin_cycle(),
            Phase::AwaitingDecision | Phase::Critiquing => self.show_pending_again(),
            Phase::Executing => {
                if interrupted {
                    // A finish asked for while it ran still stands: the interrupted command is
                    // closed as not run rather than asked about again.
                    if let Some(by) = self.state.progress.finish_requested.take() {
                        self.state.progress.phase = Phase::AwaitingDecision;
                        self.on_finish(by);
                        return;
                    }
                    if let Some(pending) = self.state.progress.pending.as_mut() {
                        pending.interrupted = true;
                        pending.approved_by = None;
                        pending.approvals.clear();
                        pending.script_check = None;
                    }
                    self.state.safety.auto_approvals_left = 0;
                    self.fx.push(Effect::Notify(format!(
                        "Cycle {} was interrupted while its command ran; it was not re-run. Decide again.",
                        self.state.progress.cycle
                    )));
                    self.show_pending_again();
                } else {
                    // The journal has no record of the command starting, so running it now is its first run.
                    let by = self
                        .state
                        .progress
                        .pending
                        .as_ref()
                        .and_then(|p| p.approved_by.clone())
                        .unwrap_or_else(|| ActedBy::Automatic("recovery".into()));
                    self.start_execution(by);
                }
            }
            Phase::Paused(_) | Phase::Finished { .. } => {}
        }
    }
}
