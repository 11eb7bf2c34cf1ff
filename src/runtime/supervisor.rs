//! The supervisor: keeps one actor per live agent, starts an actor for a resting agent when an
//! event arrives for it, and after a restart resumes every agent that was thinking, executing or
//! waiting for a decision (`resume_all`, with `Event::Recovered`). Every send and every actor's
//! stop go through one lock, so an agent never has two actors and no event lands in a mailbox
//! nobody reads.
//!
//! Every send (`send`, `decide`) and every start (from `send`, `start_new`, `resume_all`) holds the
//! map's lock, and an actor leaves the map itself under the same lock only after finding its
//! mailbox empty (`Actor::try_stop`, through its registration). `change_resting_and_start` changes
//! a resting agent's stored state and starts it once with the lock held throughout, which is what a
//! rewind needs. `shutdown(grace)` raises the drain (see `drain`) and waits for the actors.
//! `SendError::Busy` says the mailbox is full. `put_upload` writes a file a person gives an agent
//! the same way: through its actor, or under the lock while it rests.
//!
//! When several processes share the store, every start first takes the agent's lease (see
//! `leases`): an agent another process runs is not started here (`SendError::Elsewhere`), and
//! `keep_leases` renews, stops and adopts as the leases say, leaving an agent whose actor failed
//! alone for a doubling while (`adoption`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::core::decision::Decision;
use crate::core::event::Event;
use crate::core::person::Person;
use crate::core::state::AgentState;
use crate::locks::LockRecovered;
use crate::store::{Commit, Fence, StoreError};

use super::adoption::Adoption;
use super::leases::{Leased, Leases};
use super::uploads::{self, Upload, UploadError};
use super::{start_registered, was_interrupted, AgentHandle, DecideError, Deps, Refused, BUSY};

/// Why an event could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("no agent {0}")]
    NoSuchAgent(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the bot is shutting down; try again when it is back")]
    ShuttingDown,
    #[error("{BUSY}")]
    Busy,
    /// Another process sharing the store runs the agent (it holds its lease).
    #[error("agent {0} is run by another process of this bot")]
    Elsewhere(String),
}

pub(super) struct Live {
    handle: AgentHandle,
    pub(super) generation: u64,
    /// The lease token the actor writes with, and how to stop it when the lease is lost.
    fence: Option<Fence>,
    abort: tokio::task::AbortHandle,
}

pub(super) type LiveAgents = Arc<Mutex<HashMap<String, Live>>>;

/// An actor's entry in the supervisor's map, which the actor leaves itself when it stops.
pub(super) struct Registration {
    pub(super) live: LiveAgents,
    pub(super) generation: u64,
}

#[derive(Clone)]
pub struct Supervisor {
    deps: Deps,
    live: LiveAgents,
    generation: Arc<std::sync::atomic::AtomicU64>,
    /// The agents' leases, when the store is shared with other processes (see `leases`).
    leases: Option<Arc<Leases>>,
    /// The agents whose actor failed, which the lease keeper leaves alone a while (see
    /// `adoption`).
    adoption: Arc<Adoption>,
}

/// Which live agents a process runs: those of the servers it serves (see `keep_leases`).
pub type Serves = Arc<dyn Fn(&AgentState) -> bool + Send + Sync>;

impl Supervisor {
    pub fn new(deps: Deps) -> Self {
        let leases = Leases::for_store(
            &deps.store,
            deps.clock.clone(),
            deps.config.store.lease_duration(),
        );
        Supervisor {
            deps,
            live: Arc::new(Mutex::new(HashMap::new())),
            generation: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            leases,
            adoption: Arc::default(),
        }
    }

    /// Takes the agent's lease, when the store is shared.
    /// Holding it, no other process runs the agent: a reservation another process left open for
    /// it belongs to a call cut short there, and is settled at its worst case (see
    /// `budget::ledger`).
    fn take_lease(&self, agent: &str) -> Result<Leased, StoreError> {
        let Some(leases) = &self.leases else {
            return Ok(Leased::Unfenced);
        };
        let leased = leases.take(agent)?;
        if let Leased::Fenced(_) = leased {
            match self.deps.budgets.ledger().settle_left_by_others(agent) {
                Ok(settled) if settled.is_empty() => {}
                Ok(settled) => tracing::warn!(
                    %agent,
                    calls = settled.len(),
                    "settled at their worst case the calls another process left open for the agent"
                ),
                // They stay open, held against the budgets, until a later start settles them.
                Err(error) => {
                    tracing::warn!(%agent, %error, "cannot settle calls another process left open")
                }
            }
        }
        Ok(leased)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.live.lock_recovered()
    }

    /// Starts an actor for `state` with `first` while the caller holds the lock, so that nothing
    /// can start a second one or reach it before it is in the map; it writes with the lease's
    /// `fence`. The actor leaves the map when it comes to rest; an actor that failed is taken out
    /// here, and the lease is given back.
    fn spawn_locked(
        &self,
        live: &mut HashMap<String, Live>,
        state: AgentState,
        first: Event,
        fence: Option<Fence>,
    ) -> AgentHandle {
        let id = state.id.clone();
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let registration = Registration {
            live: self.live.clone(),
            generation,
        };
        let (handle, done) =
            start_registered(state, first, self.deps.clone(), Some(registration), fence);
        live.insert(
            id.clone(),
            Live {
                handle: handle.clone(),
                generation,
                fence,
                abort: done.abort_handle(),
            },
        );
        let registry = self.live.clone();
        let leases = self.leases.clone();
        let (adoption, clock) = (self.adoption.clone(), self.deps.clock.clone());
        // How long the lease keeper leaves a failed agent alone (see `adoption`); without leases
        // nothing adopts agents, so a failure is only logged.
        let failed = move |agent: &str| {
            leases.as_ref().map(|leases| {
                adoption
                    .failed(agent, clock.now(), leases.period())
                    .as_secs()
            })
        };
        let (adoption, leases) = (self.adoption.clone(), self.leases.clone());
        self.deps.runtime.spawn(async move {
            match done.await {
                Ok(Ok(_)) => adoption.recovered(&id),
                Ok(Err(super::RuntimeError::Store(StoreError::LeaseLost { .. }))) => {
                    tracing::warn!(agent = %id, "stopped running the agent: another process took its lease over, and it runs it now")
                }
                Ok(Err(e)) => {
                    let not_adopted_for_secs = failed(&id);
                    tracing::error!(agent = %id, error = %e, ?not_adopted_for_secs, "agent actor stopped with an error")
                }
                Err(e) if e.is_cancelled() => {
                    tracing::warn!(agent = %id, "stopped running the agent: its lease could not be renewed, another process runs it now")
                }
                Err(e) => {
                    let not_adopted_for_secs = failed(&id);
                    tracing::error!(agent = %id, error = %e, ?not_adopted_for_secs, "agent actor panicked")
                }
            }
            let mut live = registry.lock_recovered();
            // No entry: the actor left the map at rest, and no other has started since (a start
            // takes this lock), so its lease goes back under the lock.
            let ours = live.get(&id).is_none_or(|l| l.generation == generation);
            if ours {
                live.remove(&id);
                if let (Some(leases), Some(fence)) = (&leases, fence) {
                    leases.release(&id, fence);
                }
            }
        });
        handle
    }

    /// How many actors have been started since the bot started (for tests and metrics).
    pub fn actors_started(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the agent has a running actor.
    pub fn is_running(&self, agent: &str) -> bool {
        self.lock().contains_key(agent)
    }

    /// Rewrites a resting agent with `change`, which returns its new state, and starts it with
    /// `first`, all under the lock every start takes: no click or message can start the agent
    /// from its old state in between, or a second time. `None` when an actor runs it already
    /// (or the bot is shutting down). For a rewind; the store work is short and rare.
    pub fn change_resting_and_start<T, E>(
        &self,
        agent: &str,
        first: Event,
        change: impl FnOnce() -> Result<(AgentState, T), E>,
    ) -> Option<Result<T, E>> {
        let mut live = self.lock();
        if live.contains_key(agent) || self.deps.drain.is_raised() {
            return None;
        }
        let fence = match self.take_lease(agent) {
            Ok(Leased::Elsewhere) => return None,
            Ok(leased) => leased.fence(),
            Err(error) => {
                tracing::error!(%agent, %error, "cannot take an agent's lease");
                return None;
            }
        };
        Some(change().map(|(state, result)| {
            self.spawn_locked(&mut live, state, first, fence);
            result
        }))
    }

    /// Stores a new agent and starts it.
    pub async fn start_new(&self, state: AgentState) -> Result<AgentHandle, StoreError> {
        self.deps.store.commit(&Commit {
            state: Some(&state),
            ..Default::default()
        })?;
        self.deps.store.flush().await?;
        let mut live = self.lock();
        // An event for the new agent (a pause from its thread) may have started it meanwhile:
        // that actor loaded it from the store, so it is the one to begin it.
        if let Some(running) = live.get(&state.id) {
            let _ = running.handle.offer(Event::Start);
            return Ok(running.handle.clone());
        }
        let fence = match self.take_lease(&state.id)? {
            // A new agent's lease is free unless another process got to it first.
            Leased::Elsewhere => {
                return Err(StoreError::LeaseLost {
                    agent: state.id.clone(),
                })
            }
            leased => leased.fence(),
        };
        Ok(self.spawn_locked(&mut live, state, Event::Start, fence))
    }

    /// Delivers an event; a resting agent is loaded from the store and started with it. The
    /// lock is held throughout, so concurrent sends to a resting agent start one actor.
    pub fn send(&self, agent: &str, event: Event) -> Result<(), SendError> {
        let mut live = self.lock();
        let event = match live.get(agent) {
            None => event,
            Some(running) => match running.handle.offer(event) {
                Ok(()) => return Ok(()),
                Err(Refused::Full(_)) => return Err(SendError::Busy),
                // The actor stopped without leaving the map (it failed): start a new one.
                Err(Refused::Stopped(event)) => event,
            },
        };
        if self.deps.drain.is_raised() {
            return Err(SendError::ShuttingDown);
        }
        let state = self
            .deps
            .store
            .load_agent(agent)?
            .ok_or_else(|| SendError::NoSuchAgent(agent.to_string()))?;
        let fence = match self.take_lease(agent)? {
            Leased::Elsewhere => return Err(SendError::Elsewhere(agent.to_string())),
            leased => leased.fence(),
        };
        self.spawn_locked(&mut live, state, event, fence);
        Ok(())
    }

    /// Puts a file a person gives the agent into its workspace, written by whoever runs the agent
    /// (see `uploads`): a live agent's actor writes it between two of its messages; for a resting
    /// agent it is written here, under the lock every start takes (so no actor starts meanwhile)
    /// and with the agent's lease, given back after. Flushed before it returns.
    pub async fn put_upload(&self, agent: &str, upload: Upload) -> Result<(), UploadError> {
        let answer = {
            let live = self.lock();
            match live.get(agent) {
                Some(running) => Some(running.handle.offer_upload(upload)?),
                None => {
                    if self.deps.drain.is_raised() {
                        return Err(UploadError::ShuttingDown);
                    }
                    let state = self
                        .deps
                        .store
                        .load_agent_record(agent)?
                        .ok_or(UploadError::NoSuchAgent)?;
                    let fence = match self.take_lease(agent)? {
                        Leased::Elsewhere => return Err(UploadError::Elsewhere),
                        leased => leased.fence(),
                    };
                    let put = uploads::put(
                        &self.deps.store,
                        &self.deps.config.workspace,
                        agent,
                        state.progress.cycle,
                        upload,
                        fence,
                    );
                    if let (Some(leases), Some(fence)) = (&self.leases, fence) {
                        leases.release(agent, fence);
                    }
                    put?;
                    None
                }
            }
        };
        if let Some(answer) = answer {
            answer.await.unwrap_or(Err(UploadError::Busy))?;
        }
        self.deps.store.flush().await?;
        Ok(())
    }

    /// A decision for a live agent; the answer says why it was not applied.
    pub async fn decide(
        &self,
        agent: &str,
        cycle: u64,
        decision: Decision,
        by: &Person,
    ) -> Result<(), DecideError> {
        // Into the mailbox under the lock (so the actor cannot stop between), answered after it.
        let answer = match self.lock().get(agent) {
            Some(live) => live.handle.ask_decision(cycle, decision, by)?,
            None => return Err(DecideError::NotPending),
        };
        answer.await.unwrap_or(Err(DecideError::NotRunning))
    }

    /// The graceful shutdown: raises the drain, then waits (at most `grace`) until every actor has
    /// finished what it had under way and stopped. Returns the agents still running at the
    /// deadline; their calls in flight are settled at the next start, as after a crash.
    pub async fn shutdown(&self, grace: std::time::Duration) -> Vec<String> {
        self.deps.drain.raise();
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let running: Vec<String> = self.lock().keys().cloned().collect();
            if running.is_empty() || tokio::time::Instant::now() >= deadline {
                return running;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// After a restart: every agent that was making progress continues; one whose command was
    /// cut short is asked again.
    pub fn resume_all(&self) -> Result<usize, StoreError> {
        self.resume_where(|_| true)
    }

    /// As `resume_all`, for the agents `serves` picks: a process serving one surface resumes
    /// only the agents that surface reaches (`autothread serve` those started over the API), and
    /// one of several processes sharing the store those of its servers. With leases, only an
    /// agent whose lease this process takes: its old owner's expired, or was given back.
    /// An agent whose actor failed lately is left alone until its wait is over (see `adoption`).
    pub fn resume_where(&self, serves: impl Fn(&AgentState) -> bool) -> Result<usize, StoreError> {
        let mut resumed = 0;
        let agents = self.deps.store.list_agents()?;
        let ids: std::collections::HashSet<&str> = agents.iter().map(|a| a.id.as_str()).collect();
        self.adoption.retain(|agent| ids.contains(agent));
        let now = self.deps.clock.now();
        for summary in &agents {
            if self.is_running(&summary.id) || self.adoption.waits(&summary.id, now) {
                continue;
            }
            if let Some(leases) = &self.leases {
                if leases.held_elsewhere(&summary.id)? {
                    continue;
                }
            }
            let Some(state) = self.deps.store.load_agent(&summary.id)? else {
                continue;
            };
            let mut live = self.lock();
            if !state.progress.phase.is_live() || live.contains_key(&state.id) || !serves(&state) {
                continue;
            }
            let fence = match self.take_lease(&state.id)? {
                Leased::Elsewhere => continue,
                leased => leased.fence(),
            };
            let interrupted = was_interrupted(&self.deps.store, &state)?;
            self.spawn_locked(&mut live, state, Event::Recovered { interrupted }, fence);
            resumed += 1;
        }
        Ok(resumed)
    }

    /// With leases (a shared store), every lease period until the drain: renews the leases held,
    /// stops the actors whose lease another process holds now, and adopts the live agents
    /// `serves` picks whose lease expired (see `leases`). Nothing to do for one process on sled.
    pub fn keep_leases(&self, serves: Serves) {
        let Some(leases) = self.leases.clone() else {
            return;
        };
        let supervisor = self.clone();
        self.deps.runtime.spawn(async move {
            let drain = supervisor.deps.drain.clone();
            let mut ticks = tokio::time::interval(leases.period());
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    () = drain.raised() => return,
                }
                let (supervisor, leases, serves) =
                    (supervisor.clone(), leases.clone(), serves.clone());
                let kept = tokio::task::spawn_blocking(move || {
                    for (agent, fence) in leases.renew() {
                        supervisor.stop_lost(&agent, fence);
                    }
                    supervisor.resume_where(|state| serves(state))
                })
                .await;
                match kept {
                    Ok(Ok(0)) => {}
                    Ok(Ok(adopted)) => {
                        tracing::info!(agents = adopted, "adopted agents whose lease expired")
                    }
                    Ok(Err(error)) => tracing::error!(%error, "cannot adopt agents"),
                    Err(error) => tracing::error!(%error, "the lease task failed"),
                }
            }
        });
    }

    /// Stops the actor that wrote with `fence`, whose lease another process holds now: it would
    /// write nothing more anyway (its token is refused), and must not call models or post meanwhile.
    fn stop_lost(&self, agent: &str, fence: Fence) {
        let mut live = self.lock();
        if live.get(agent).is_some_and(|l| l.fence == Some(fence)) {
            if let Some(lost) = live.remove(agent) {
                lost.abort.abort();
            }
        }
    }
}
