//! The runtime: one actor task per live agent owns its state, feeds events through `core::step`,
//! stores the result, then carries out the effects (model calls, commands, surface output).
//!
//! `start` starts one actor and returns its `AgentHandle` and a `JoinHandle` that yields the final
//! state; `Deps` is everything an actor uses; `was_interrupted` reads the journal for a restart's
//! `Event::Recovered`. The private `Actor` handles one message at a time in `apply`: a decision is
//! first claimed in the store (`claim_decision`, the compare-and-swap that makes the first click
//! win; an edit claims none), then the budget view is computed and `step` runs, then the step's
//! memory calls are reserved (`memory_calls`), then `persist` stores it, then `carry_out` performs
//! each effect in order. `carry_out` also makes a file command's `preview` for its card and keeps
//! its `FileBase`, so the command can be checked against what the card showed. `apply` reads the
//! server's rules and its admins' policy choices from the store at each step, so a change made by
//! another agent's card or by an admin applies from the next proposal on.
//!
//! An actor stops once its agent rests (paused or finished) with nothing in flight, leaving the
//! supervisor's map under its lock (`Actor::try_stop`). Each main model call carries `seq =
//! state.call_seq`, and `step` ignores replies to superseded calls. Summaries of older episodes run
//! beside the main call (`seq` 0, newest first, at most four a cycle, one in flight per episode:
//! `Actor::summaries_in_flight`).

mod adoption;
mod deadline;
mod drain;
mod execute;
mod handle;
mod leases;
mod live;
mod memory_calls;
mod metered;
mod persist;
mod policy;
mod storage_plan;
pub mod supervisor;
mod surface;
pub mod uploads;

pub use drain::Drain;
pub use handle::{ActorMsg, AgentHandle, DecideError, Refused, BUSY, MAILBOX_CAPACITY};
use memory_calls::{PreparedCall, ThinkAhead};
use metered::AgentModel;
pub use surface::{Doing, LiveStatus, ShownAs, Surface};

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::budget::Budgets;
use crate::clock::Clock;
use crate::config::Config;
use crate::core::audit::AuditEntry;
use crate::core::decision::Decision;
use crate::core::event::{CallPurpose, Effect, Event};
use crate::core::expiry::Expiry;
use crate::core::history::Outcome;
use crate::core::message::TokenCounter;
use crate::core::person::ActedBy;
use crate::core::policy::Policy;
use crate::core::prompt::{ContextLimits, PromptExtras};
use crate::core::quorum::Quorum;
use crate::core::reply::CommandCall;
use crate::core::rules::{RuleDraft, RuleScope};
use crate::core::state::{AgentState, Phase};
use crate::core::step::{step, StepCtx, NO_LONGER_PENDING};
use crate::llm::ChatModel;
use crate::locks::LockRecovered;
use crate::store::{DecisionRecord, JournalEntry, Store, StoreError, WorkspaceOp};
use crate::tools::preview::{preview, FileBase};
use crate::tools::{AgentFiles, Registry};

/// The services an actor uses.
#[derive(Clone)]
pub struct Deps {
    pub store: Store,
    pub model: Arc<dyn ChatModel>,
    pub tools: Arc<Registry>,
    pub surface: Arc<dyn Surface>,
    pub config: Arc<Config>,
    pub counter: Arc<dyn TokenCounter>,
    pub clock: Arc<dyn Clock>,
    pub budgets: Arc<Budgets>,
    /// Long-term memory; `None` when it is switched off.
    pub memory: Option<Arc<crate::memory::Memory>>,
    /// Web search and page fetching; `None` when the web commands are off.
    pub web: Option<Arc<crate::web::Web>>,
    /// Raised when the process shuts down gracefully.
    pub drain: Drain,
    /// The runtime the actors run on. The Discord bot keeps its gateway on a runtime of its own,
    /// so that a click is acknowledged however busy the agents are; an actor started from a
    /// click must still land here.
    pub runtime: tokio::runtime::Handle,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Whether a restart found the agent's command half-run, per the journal.
pub fn was_interrupted(store: &Store, state: &AgentState) -> Result<bool, StoreError> {
    if state.progress.phase != Phase::Executing {
        return Ok(false);
    }
    Ok(matches!(
        store.journal_entry(&state.id, state.progress.cycle)?,
        Some(JournalEntry::Executing { .. })
    ))
}

struct Actor {
    state: AgentState,
    deps: Deps,
    handle: AgentHandle,
    policy: Policy,
    summaries_in_flight: HashSet<u64>,
    last_result_shown: u64,
    tasks: JoinSet<()>,
    /// Held by each memory write while it runs: a cycle's memory is written after the previous
    /// cycle's, so memories keep their order and a failing endpoint sees one request at a time
    /// (its first refusal turns memory off before the next write is admitted).
    memory_writes: Arc<tokio::sync::Mutex<()>>,
    /// The supervisor's entry for this actor, which it leaves when it stops (`None` for an actor
    /// started on its own, as the console does).
    registration: Option<supervisor::Registration>,
    /// The lease token the agent's steps are written with, when the store is shared (see
    /// `leases`): a write after another process took the lease over is refused, and the actor
    /// stops.
    fence: Option<crate::store::Fence>,
    /// The file the newest card's command writes, as it was when the card was shown: (cycle,
    /// path, fingerprint). Kept in memory only, since a restart shows the card again.
    shown_base: Option<(u64, String, FileBase)>,
    /// How many distinct approvals each class needs in the agent's server.
    quorum: Quorum,
    /// When each class's cards expire in the agent's server.
    expiry: Expiry,
    /// The card deadline a timer was last set for (cycle, time), so that showing the same card
    /// again sets no second timer.
    armed_deadline: Option<(u64, chrono::DateTime<chrono::Utc>)>,
    deadline_timer: Option<deadline::DeadlineTimer>,
    /// The live status last reported to the surface (see `live`).
    live: Option<surface::LiveStatus>,
    /// The cycle's model call, reserved with the step that leads to it (see `memory_calls`).
    think_ahead: Option<ThinkAhead>,
    /// The prompt of the last cycle's model call, in tokens: what a reservation made ahead goes by.
    last_think_prompt_tokens: Option<u64>,
    /// Trail entries of a step that was not stored on its own (a command that lands with its
    /// result, started where proposals need not be stored first): the next write takes them.
    unstored_audit: Vec<AuditEntry>,
}

/// Starts an agent's actor. It runs until the agent rests (paused or finished) with no work in
/// flight, then yields the final state. The console runs one agent this way; Discord's supervisor
/// starts a new actor whenever a resting agent is resumed.
pub fn start(
    state: AgentState,
    first: Event,
    deps: Deps,
) -> (
    AgentHandle,
    tokio::task::JoinHandle<Result<AgentState, RuntimeError>>,
) {
    start_registered(state, first, deps, None, None)
}

/// `start`, for an actor the supervisor keeps an entry for.
fn start_registered(
    state: AgentState,
    first: Event,
    deps: Deps,
    registration: Option<supervisor::Registration>,
    fence: Option<crate::store::Fence>,
) -> (
    AgentHandle,
    tokio::task::JoinHandle<Result<AgentState, RuntimeError>>,
) {
    let (tx, rx) = mpsc::channel(handle::MAILBOX_CAPACITY);
    let handle = AgentHandle {
        id: state.id.clone(),
        tx,
    };
    let runtime = deps.runtime.clone();
    let mut state = state;
    if state
        .progress
        .recalled
        .iter()
        .any(|hit| hit.text.is_empty())
    {
        // Loaded from the store, which keeps recalled memories by reference.
        let hits = std::mem::take(&mut state.progress.recalled);
        if let Some(memory) = &deps.memory {
            state.progress.recalled = memory.with_texts(&state.id, hits);
        }
    }
    let actor = Actor {
        last_result_shown: state.progress.episodes.last().map(|e| e.cycle).unwrap_or(0),
        policy: policy::server_policy(&deps.config, &deps.store, &state)
            .unwrap_or_else(|| policy::asking(&deps.config, &state)),
        // A quorum needs several people: the console, outside any server, has one.
        quorum: match state.money.spender.guild.as_ref() {
            Some(guild) => deps.config.approvals.for_guild(Some(guild)),
            None => Quorum::default(),
        },
        // The console's one person answers when they are back: its cards wait.
        expiry: match state.money.spender.guild.as_ref() {
            Some(guild) => deps.config.approvals.expiry_for(guild),
            None => Expiry::default(),
        },
        armed_deadline: None,
        deadline_timer: None,
        live: None,
        think_ahead: None,
        last_think_prompt_tokens: None,
        unstored_audit: Vec::new(),
        state,
        deps,
        handle: handle.clone(),
        summaries_in_flight: HashSet::new(),
        tasks: JoinSet::new(),
        memory_writes: Arc::default(),
        registration,
        fence,
        shown_base: None,
    };
    (handle, runtime.spawn(actor.run(first, rx)))
}

type Executed = (u64, CommandCall, Outcome, Vec<WorkspaceOp>);

impl Actor {
    async fn run(
        mut self,
        first: Event,
        mut rx: mpsc::Receiver<ActorMsg>,
    ) -> Result<AgentState, RuntimeError> {
        self.apply(first, None, None).await?;
        self.report_status();
        let drain = self.deps.drain.clone();
        loop {
            let resting = !self.state.progress.phase.is_live() || drain.is_raised();
            if resting && self.tasks.is_empty() {
                match self.try_stop(&mut rx) {
                    Some(msg) => {
                        self.receive(msg).await?;
                        continue;
                    }
                    None => break,
                }
            }
            tokio::select! {
                Some(msg) = rx.recv() => self.receive(msg).await?,
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Err(e) = joined {
                        tracing::error!(agent = %self.state.id, error = %e, "an agent task failed");
                    }
                }
                // Wakes an idle actor so that it sees the drain.
                () = drain.raised(), if !drain.is_raised() => {}
            }
        }
        // Messages already queued (the last summaries, a late click, the reply of a call that
        // finished during a drain) are applied before returning.
        while let Ok(msg) = rx.try_recv() {
            self.receive(msg).await?;
        }
        // During a drain those can start memory writes; they finish rather than being dropped.
        while let Some(joined) = self.tasks.join_next().await {
            if let Err(e) = joined {
                tracing::error!(agent = %self.state.id, error = %e, "an agent task failed");
            }
        }
        // The rest of the actor, with any reservation made ahead, is dropped here: given back.
        Ok(self.state)
    }

    /// Stops unless a message is waiting, which is returned instead. Under the supervisor's lock,
    /// through which every send goes, the mailbox is found empty and the entry removed in one
    /// step: a send either lands before (and is applied) or finds no actor (and starts a new one),
    /// never in a mailbox nobody reads.
    fn try_stop(&mut self, rx: &mut mpsc::Receiver<ActorMsg>) -> Option<ActorMsg> {
        let registration = self.registration.as_ref();
        let mut live = registration.map(|r| r.live.lock_recovered());
        if let Ok(msg) = rx.try_recv() {
            return Some(msg);
        }
        if let (Some(live), Some(registration)) = (live.as_mut(), registration) {
            if live.get(&self.state.id).map(|l| l.generation) == Some(registration.generation) {
                live.remove(&self.state.id);
            }
        }
        rx.close();
        None
    }

    async fn receive(&mut self, msg: ActorMsg) -> Result<(), RuntimeError> {
        let received = self.receive_one(msg).await;
        self.report_status();
        received
    }

    async fn receive_one(&mut self, msg: ActorMsg) -> Result<(), RuntimeError> {
        match msg {
            ActorMsg::Event { event, reply } => {
                if matches!(event, Event::Pause { .. } | Event::Finish { .. }) {
                    self.withdraw_open_question().await;
                }
                self.apply(event, reply, None).await
            }
            ActorMsg::Executed {
                cycle,
                call,
                outcome,
                ops,
            } => {
                let event = Event::CommandFinished {
                    cycle,
                    outcome: outcome.clone(),
                };
                self.apply(event, None, Some((cycle, call, outcome, ops)))
                    .await
            }
            ActorMsg::Upload { upload, reply } => {
                let put = uploads::put(
                    &self.deps.store,
                    &self.deps.config.workspace,
                    &self.state.id,
                    self.state.progress.cycle,
                    upload,
                    self.fence,
                );
                // A write the lease refused means another process runs the agent now: this
                // actor stops, as after any fenced write that lost.
                let lost = matches!(
                    put,
                    Err(uploads::UploadError::Store(StoreError::LeaseLost { .. }))
                );
                let _ = reply.send(put);
                if lost {
                    return Err(RuntimeError::Store(StoreError::LeaseLost {
                        agent: self.state.id.clone(),
                    }));
                }
                Ok(())
            }
        }
    }

    fn limits(&self) -> ContextLimits {
        let settings = &self.state.brief.settings;
        self.deps
            .config
            .llm
            .context_limits(&settings.model, settings.prompt_budget_tokens)
    }

    /// A person's "approve & remember" of a script binds the script's contents as they are now:
    /// the rule then covers this file only while it stays so (see `rules::ScriptCheck`). A
    /// script that cannot be read leaves the draft unbound, and the core keeps no rule for it.
    fn bind_remembered_script(&self, event: Event) -> Event {
        let Event::Decided {
            cycle,
            decision: Decision::Remember(draft),
            by,
        } = event
        else {
            return event;
        };
        let contents = match &draft.scope {
            RuleScope::ExactScript { path, .. } => {
                match crate::tools::AgentFiles::new(&self.deps.store, &self.state.id).read(path) {
                    Ok(Some(bytes)) => Some(crate::core::digest::sha256_tagged(&bytes)),
                    Ok(None) => None,
                    Err(e) => {
                        tracing::warn!(agent = %self.state.id, error = %e, "cannot read a script to remember");
                        None
                    }
                }
            }
            _ => None,
        };
        let draft = match contents {
            Some(contents) => Box::new(RuleDraft {
                scope: draft.scope.binding_script(contents),
                ..*draft
            }),
            None => draft,
        };
        Event::Decided {
            cycle,
            decision: Decision::Remember(draft),
            by,
        }
    }

    async fn apply(
        &mut self,
        event: Event,
        reply: Option<oneshot::Sender<Result<(), DecideError>>>,
        executed: Option<Executed>,
    ) -> Result<(), RuntimeError> {
        let event = self.bind_remembered_script(event);
        // An edit changes the proposal but decides nothing: it claims no decision and leaves
        // the card open.
        if let Event::Decided {
            cycle,
            decision,
            by,
        } = &event
        {
            // An approval short of its class's quorum is counted, not claimed: the card stays
            // open for the others.
            let short_of_quorum = decision.is_approval()
                && self.state.progress.pending.as_ref().is_some_and(|p| {
                    p.cycle == *cycle && !self.quorum.is_final(p.risk, &p.approvals, by)
                });
            if matches!(decision, Decision::Edit(_)) || short_of_quorum {
                if !self.state.awaits_decision_on(*cycle) {
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(DecideError::NotPending));
                    }
                    return Ok(());
                }
            } else {
                // The card closes on the proposal as decided: the approval that decides it is
                // counted, so a quorum's card shows every approver, not the count before.
                let decided = self
                    .state
                    .progress
                    .pending
                    .as_ref()
                    .filter(|p| p.cycle == *cycle)
                    .map(|p| {
                        let mut decided = p.clone();
                        if decision.is_approval() {
                            self.quorum.approve(p.risk, &mut decided.approvals, by);
                        }
                        decided
                    });
                // The approval that reaches a quorum decides for everyone who approved.
                let by = &match self.state.progress.pending.as_ref() {
                    Some(p)
                        if p.cycle == *cycle
                            && !p.approvals.is_empty()
                            && decision.is_approval() =>
                    {
                        let mut people = p.approvals.clone();
                        people.push(by.clone());
                        ActedBy::People(people)
                    }
                    _ => ActedBy::person(by.clone()),
                };
                match self.claim_decision(*cycle, decision, by) {
                    Ok(Ok(())) => {}
                    Ok(Err(why)) => {
                        if let Some(reply) = reply {
                            let _ = reply.send(Err(why));
                        }
                        return Ok(());
                    }
                    // Another process runs the agent now: this actor stops, and the click is
                    // answered as one that reached no running agent.
                    Err(lost) => {
                        if let Some(reply) = reply {
                            let _ = reply.send(Err(DecideError::NotRunning));
                        }
                        return Err(lost.into());
                    }
                }
                if let Some(decided) = decided {
                    self.deps
                        .surface
                        .decided(&self.state, &decided, decision, by)
                        .await;
                }
            }
        }
        if let Event::ModelReplied {
            purpose: CallPurpose::Summary { cycle },
            ..
        }
        | Event::ModelFailed {
            purpose: CallPurpose::Summary { cycle },
            ..
        }
        | Event::CallRefused {
            purpose: CallPurpose::Summary { cycle },
            ..
        } = &event
        {
            self.summaries_in_flight.remove(cycle);
        }
        let cause = storage_plan::Cause::of(&event);
        let extras = PromptExtras::default();
        let limits = self.limits();
        // A budget being changed by this very event already counts for the prompt it leads to.
        let new_limit = match &event {
            Event::SetBudget { budget, .. }
            | Event::Continue {
                budget: Some(budget),
                ..
            } => Some(*budget),
            _ => None,
        };
        let budget = match self
            .deps
            .budgets
            .view(&self.state, new_limit, self.deps.clock.now())
        {
            Ok(mut view) => {
                // The cycle's own call, reserved ahead, is not spend yet: the prompt and the
                // caps see the budget as they would without it.
                if let Some(ahead) = &self.think_ahead {
                    view.agent_used = view.agent_used.saturating_sub(ahead.amount());
                    view.remaining = view.remaining.saturating_add(ahead.amount());
                }
                Some(view)
            }
            Err(e) => {
                tracing::error!(agent = %self.state.id, error = %e, "cannot read the spend ledger");
                None
            }
        };
        // The server's policy is read for each step too: its admins may have changed it, and the
        // next proposal follows them. When it cannot be read, the last one read stands.
        if let Some(policy) =
            policy::server_policy(&self.deps.config, &self.deps.store, &self.state)
        {
            self.policy = policy;
        }
        // The commands as they are now (an MCP server's tools may have changed).
        let commands = self.deps.tools.command_set();
        // The server's rules are read for each step: another agent's card may have made one.
        let server_rules = match &self.state.money.spender.guild {
            Some(guild) => self.deps.store.server_rules(guild).unwrap_or_else(|e| {
                tracing::error!(agent = %self.state.id, error = %e, "cannot read the server's rules");
                Vec::new()
            }),
            None => Vec::new(),
        };
        let effects = {
            let deps = &self.deps;
            let ctx = StepCtx {
                now: deps.clock.now(),
                commands: &commands,
                policy: &self.policy,
                quorum: &self.quorum,
                expiry: &self.expiry,
                server_rules: &server_rules,
                counter: deps.counter.as_ref(),
                limits,
                extras: &extras,
                full_steps: deps.config.agent.full_steps,
                step_lines: deps.config.agent.step_lines,
                smart_model_available: deps.config.llm.smart_model().is_some(),
                reply_format: deps.config.reply_format(&self.state.brief.settings.model),
                budget: budget.as_ref(),
                brake: deps.config.budget.brake_limits(),
                memory: deps.memory.as_ref().map(|_| {
                    let config = &deps.config.memory;
                    crate::core::step::MemoryPolicy {
                        context_percent: config.recall_context_percent,
                        max_tokens: config.max_recall_tokens,
                        text_chars: config.memory_chars,
                        min_relevance: config.min_relevance,
                    }
                }),
            };
            step(&mut self.state, event, &ctx)
        };
        // The paid memory calls this step starts are reserved before its flush, which then makes
        // them durable too, instead of one flush each.
        let mut prepared = self.prepare_memory_calls(&effects);
        let think_ahead = self.reserve_think_ahead(&effects, limits);
        let reservations = match think_ahead.is_some()
            || prepared
                .iter()
                .flatten()
                .any(PreparedCall::needs_durability)
        {
            true => storage_plan::Reservations::ToMakeDurable,
            false => storage_plan::Reservations::None,
        };
        if let Err(e) = self.persist(cause, &effects, executed, reservations).await {
            for call in prepared.iter().flatten() {
                self.abandon(call);
            }
            // Dropping `think_ahead` gives it back.
            return Err(e);
        }
        if think_ahead.is_some() {
            self.think_ahead = think_ahead;
        }
        let mut rejection = None;
        let mut steps = effects.into_iter().zip(prepared.drain(..));
        while let Some((effect, prepared)) = steps.next() {
            if let Effect::Rejected(why) = effect {
                rejection = Some(why);
            } else if let Err(e) = self.carry_out(effect, prepared).await {
                // The step is stored: the recalls it prepared and did not reach are given back,
                // and its memory is still written.
                for prepared in steps.filter_map(|(_, prepared)| prepared) {
                    self.give_up(prepared);
                }
                return Err(e);
            }
        }
        if let Some(reply) = reply {
            // Only decisions carry a reply. `step` rejects one when its cycle is not the pending
            // one (which `claim_decision` normally catches first), or an edit it cannot apply.
            let answer = match rejection {
                None => Ok(()),
                Some(why) if why == NO_LONGER_PENDING => Err(DecideError::NotPending),
                Some(why) => Err(DecideError::NotApplied(why)),
            };
            let _ = reply.send(answer);
        } else if let Some(why) = rejection {
            self.deps.surface.notify(&self.state, &why).await;
        }
        self.drop_unused_think_ahead();
        Ok(())
    }

    /// The compare-and-swap on (agent, cycle): only the first decision for a cycle is applied.
    /// Fenced by the agent's lease: when another process took it over, the `LeaseLost` comes back
    /// as the outer error, and the actor stops.
    fn claim_decision(
        &self,
        cycle: u64,
        decision: &Decision,
        by: &ActedBy,
    ) -> Result<Result<(), DecideError>, StoreError> {
        if !self.state.awaits_decision_on(cycle) {
            // Tell a late clicker who won, when the card they clicked was decided by someone else.
            return Ok(Err(DecideError::late(
                &self.deps.store,
                &self.state.id,
                cycle,
            )));
        }
        let record = DecisionRecord {
            decision: decision.clone(),
            by: by.clone(),
            at: self.deps.clock.now(),
        };
        match self
            .deps
            .store
            .record_decision_fenced(&self.state.id, cycle, &record, self.fence)
        {
            Ok(Ok(())) => Ok(Ok(())),
            Ok(Err(winner)) => Ok(Err(DecideError::AlreadyDecided { by: winner.by })),
            Err(lost @ StoreError::LeaseLost { .. }) => Err(lost),
            Err(e) => {
                tracing::error!(agent = %self.state.id, error = %e, "cannot record a decision");
                Ok(Err(DecideError::Storage))
            }
        }
    }

    async fn carry_out(
        &mut self,
        effect: Effect,
        prepared: Option<PreparedCall>,
    ) -> Result<(), RuntimeError> {
        let surface = self.deps.surface.clone();
        if self.deps.drain.is_raised()
            && matches!(
                effect,
                Effect::CallModel(_) | Effect::Execute { .. } | Effect::Recall { .. }
            )
        {
            // Nothing new starts during a drain; the restart begins it again (see `Drain`).
            tracing::debug!(agent = %self.state.id, "not started: the bot is shutting down");
            if let Some(call) = prepared {
                self.give_up(call);
            }
            return Ok(());
        }
        match effect {
            Effect::CallModel(call) => {
                if call.purpose == CallPurpose::Think {
                    // Every cycle asks the model once with this purpose (re-asks are extra).
                    metrics::counter!(crate::ops::names::CYCLES).increment(1);
                }
                if matches!(
                    call.purpose,
                    CallPurpose::Think | CallPurpose::Reask | CallPurpose::Rethink
                ) {
                    surface.thinking(&self.state).await;
                }
                self.call_model(call)
            }
            Effect::ShowProfile => surface.show_profile(&self.state).await,
            Effect::ShowProposal {
                proposal,
                auto_approved,
            } => {
                if !auto_approved {
                    // The proposal now waits for a decision, so any decision stored for this cycle
                    // belongs to an earlier showing (a Deny before a resume, or a run interrupted by
                    // a crash) and must not block the new one.
                    self.deps.store.clear_decision_fenced(
                        &self.state.id,
                        proposal.cycle,
                        self.fence,
                    )?;
                }
                // The card shows what a file command would change, and the approval covers that:
                // `execute` checks the file is still as it was shown.
                let files = AgentFiles::new(&self.deps.store, &self.state.id);
                let preview = preview(&proposal.command, &files);
                self.shown_base = preview
                    .as_ref()
                    .map(|p| (proposal.cycle, p.path.clone(), p.base));
                let shown = match auto_approved {
                    true => ShownAs::AutoApproved,
                    false => ShownAs::AwaitingDecision,
                };
                surface
                    .show_proposal(&self.state, &proposal, shown, preview.as_ref())
                    .await;
                if !auto_approved {
                    surface
                        .request_decision(&self.state, &proposal, self.handle.clone())
                        .await;
                    self.arm_deadline(&proposal);
                }
            }
            Effect::Expired {
                proposal,
                text,
                escalate,
            } => {
                surface
                    .expired(&self.state, &proposal, &text, escalate)
                    .await
            }
            // `persist` has journalled it as executing, durably, unless it lands with its result.
            Effect::Execute { cycle, call, .. } => self.execute(cycle, call),
            Effect::EpisodeRecorded { cycle } => {
                if cycle > self.last_result_shown {
                    self.last_result_shown = cycle;
                    if let Some(episode) = self.state.episode(cycle) {
                        surface.show_result(&self.state, episode).await;
                    }
                }
            }
            Effect::Notify(text) => surface.notify(&self.state, &text).await,
            Effect::Paused(reason) => surface.paused(&self.state, &reason).await,
            Effect::Finished { reason } => surface.finished(&self.state, &reason).await,
            Effect::Rejected(why) => surface.notify(&self.state, &why).await,
            // Written by `persist` with the step's state.
            Effect::Audit(_) => {}
            Effect::SaveServerRule(_) => {
                if let Some(guild) = &self.state.money.spender.guild {
                    let now = self.deps.clock.now();
                    if let Err(e) = self.deps.store.prune_server_rules(guild, now) {
                        tracing::warn!(agent = %self.state.id, error = %e, "cannot drop expired rules");
                    }
                }
            }
            Effect::ServerRuleUsed { id } => {
                if let Some(guild) = &self.state.money.spender.guild {
                    let now = self.deps.clock.now();
                    // The trail has the use already; the count on the rule is for `/agent rules`.
                    if let Err(e) = self.deps.store.count_server_rule_use(guild, &id, now) {
                        tracing::warn!(agent = %self.state.id, rule = %id, error = %e, "cannot count a rule's use");
                    }
                }
            }
            Effect::Recall { seq, query } => self.recall(seq, query, prepared),
            Effect::Remember { cycle, text } => self.remember(cycle, text, prepared),
        }
        Ok(())
    }
}
