//! The supervisor: keeps one actor per live agent, starts an actor for a resting agent when an
//! event arrives for it, and after a restart resumes every agent that was thinking, executing or
//! waiting for a decision.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::core::event::{Decision, Event};
use crate::core::state::AgentState;
use crate::store::{Commit, StoreError};

use super::{start, was_interrupted, AgentHandle, DecideError, Deps};

/// Why an event could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("no agent {0}")]
    NoSuchAgent(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the bot is shutting down; try again when it is back")]
    ShuttingDown,
}

struct Live {
    handle: AgentHandle,
    generation: u64,
}

#[derive(Clone)]
pub struct Supervisor {
    deps: Deps,
    live: Arc<Mutex<HashMap<String, Live>>>,
    generation: Arc<std::sync::atomic::AtomicU64>,
}

impl Supervisor {
    pub fn new(deps: Deps) -> Self {
        Supervisor {
            deps,
            live: Arc::new(Mutex::new(HashMap::new())),
            generation: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    /// Starts an actor for `state` with `first`, and forgets it when it comes to rest.
    fn spawn(&self, state: AgentState, first: Event) -> AgentHandle {
        let id = state.id.clone();
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (handle, done) = start(state, first, self.deps.clone());
        self.live.lock().unwrap_or_else(|e| e.into_inner()).insert(
            id.clone(),
            Live {
                handle: handle.clone(),
                generation,
            },
        );
        let live = self.live.clone();
        tokio::spawn(async move {
            match done.await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::error!(agent = %id, error = %e, "agent actor stopped with an error")
                }
                Err(e) => tracing::error!(agent = %id, error = %e, "agent actor panicked"),
            }
            let mut live = live.lock().unwrap_or_else(|e| e.into_inner());
            if live.get(&id).map(|l| l.generation) == Some(generation) {
                live.remove(&id);
            }
        });
        handle
    }

    /// Stores a new agent and starts it.
    pub async fn start_new(&self, state: AgentState) -> Result<AgentHandle, StoreError> {
        self.deps.store.commit(&Commit {
            state: Some(&state),
            ..Default::default()
        })?;
        self.deps.store.flush().await?;
        Ok(self.spawn(state, Event::Start))
    }

    fn live_handle(&self, agent: &str) -> Option<AgentHandle> {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
            .map(|l| l.handle.clone())
    }

    /// Delivers an event; a resting agent is loaded from the store and started with it.
    pub fn send(&self, agent: &str, event: Event) -> Result<(), SendError> {
        if let Some(handle) = self.live_handle(agent) {
            if handle.try_send(event.clone()) {
                return Ok(());
            }
        }
        if self.deps.drain.is_raised() {
            return Err(SendError::ShuttingDown);
        }
        let state = self
            .deps
            .store
            .load_agent(agent)?
            .ok_or_else(|| SendError::NoSuchAgent(agent.to_string()))?;
        self.spawn(state, event);
        Ok(())
    }

    /// A decision for a live agent; the answer says why it was not applied.
    pub async fn decide(
        &self,
        agent: &str,
        cycle: u64,
        decision: Decision,
        by: &str,
    ) -> Result<(), DecideError> {
        match self.live_handle(agent) {
            Some(handle) => handle.decide(cycle, decision, by).await,
            None => Err(DecideError::NotPending),
        }
    }

    /// The graceful shutdown: raises the drain, then waits (at most `grace`) until every actor has
    /// finished what it had under way and stopped. Returns the agents still running at the
    /// deadline; their calls in flight are settled at the next start, as after a crash.
    pub async fn shutdown(&self, grace: std::time::Duration) -> Vec<String> {
        self.deps.drain.raise();
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let running: Vec<String> = self
                .live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .cloned()
                .collect();
            if running.is_empty() || tokio::time::Instant::now() >= deadline {
                return running;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// After a restart: every agent that was making progress continues; one whose command was
    /// cut short is asked again.
    pub fn resume_all(&self) -> Result<usize, StoreError> {
        let mut resumed = 0;
        for summary in self.deps.store.list_agents()? {
            let Some(state) = self.deps.store.load_agent(&summary.id)? else {
                continue;
            };
            if !state.phase.is_live() || self.live_handle(&state.id).is_some() {
                continue;
            }
            let interrupted = was_interrupted(&self.deps.store, &state)?;
            self.spawn(state, Event::Recovered { interrupted });
            resumed += 1;
        }
        Ok(resumed)
    }
}
