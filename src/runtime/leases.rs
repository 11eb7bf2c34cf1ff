//! The leases of the agents this process runs, when several processes share the store
//! (PostgreSQL; the lease itself is `store::leases`). One process on sled holds none: sled's lock on
//! its folder already keeps every other process out, and its writes stay as they were.
//!
//! The supervisor takes an agent's lease before it starts the agent's actor (`Leases::take`), and
//! the actor writes its steps with the lease's token (`Actor::fence`), so that a process whose
//! lease was taken over cannot write over the new owner's steps: that write fails with
//! `StoreError::LeaseLost`, and the actor stops. `Supervisor::keep_leases` runs every
//! `store.lease_secs / 3`: it renews the leases held, stops an actor whose renewal found the lease
//! gone, and adopts the live agents this process serves whose lease has expired (a process that
//! died: its agents continue here within the lease's expiry and one period). An actor that comes
//! to rest gives its lease back (`Leases::release`), as every actor does in a graceful shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Clock;
use crate::locks::LockRecovered;
use crate::store::{Acquired, Fence, LeaseOwner, Renewal, Store, StoreError};

/// Whether this process may run an agent, and with which token it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leased {
    /// No leases here (one process on sled): run it, writing as ever.
    Unfenced,
    /// This process holds the lease: run it, writing with this token.
    Fenced(Fence),
    /// Another process holds the lease: leave the agent to it.
    Elsewhere,
}

impl Leased {
    pub(super) fn fence(self) -> Option<Fence> {
        match self {
            Leased::Fenced(fence) => Some(fence),
            Leased::Unfenced | Leased::Elsewhere => None,
        }
    }
}

/// This process's leases: its owner id, the lease's length, and the token held for each agent it
/// runs.
pub(super) struct Leases {
    owner: LeaseOwner,
    ttl: Duration,
    store: Store,
    clock: Arc<dyn Clock>,
    held: Mutex<HashMap<String, Fence>>,
}

impl Leases {
    /// Leases for a store shared with other processes (PostgreSQL); `None` for sled's.
    pub(super) fn for_store(
        store: &Store,
        clock: Arc<dyn Clock>,
        ttl: Duration,
    ) -> Option<Arc<Leases>> {
        (store.backend() == crate::store::kv::Backend::Postgres).then(|| {
            let owner = LeaseOwner::random();
            tracing::info!(%owner, ttl_secs = ttl.as_secs(), "agents are leased: the store is shared");
            Arc::new(Leases {
                owner,
                ttl,
                store: store.clone(),
                clock,
                held: Mutex::default(),
            })
        })
    }

    /// How often leases are renewed and expired ones adopted: a third of their length, so that
    /// two renewals can fail before a lease expires.
    pub(super) fn period(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(100))
    }

    /// Takes (or keeps) the agent's lease for this process.
    pub(super) fn take(&self, agent: &str) -> Result<Leased, StoreError> {
        let now = self.clock.now();
        match self.store.acquire_lease(agent, self.owner, now, self.ttl)? {
            Acquired::Held(fence) => {
                self.held.lock_recovered().insert(agent.to_owned(), fence);
                Ok(Leased::Fenced(fence))
            }
            Acquired::Elsewhere { .. } => Ok(Leased::Elsewhere),
        }
    }

    /// Whether another process holds the agent's lease now: a cheap look before loading an agent
    /// to adopt it.
    pub(super) fn held_elsewhere(&self, agent: &str) -> Result<bool, StoreError> {
        let now = self.clock.now();
        Ok(self
            .store
            .lease(agent)?
            .is_some_and(|lease| lease.owner != self.owner && lease.expires_at > now))
    }

    /// Gives the agent's lease back when it still carries `fence`.
    pub(super) fn release(&self, agent: &str, fence: Fence) {
        {
            let mut held = self.held.lock_recovered();
            if held.get(agent) == Some(&fence) {
                held.remove(agent);
            }
        }
        if let Err(error) = self.store.release_lease(agent, self.owner, fence) {
            // It expires by itself within the lease's length.
            tracing::warn!(%agent, %error, "cannot give an agent's lease back");
        }
    }

    /// Renews every lease held; returns the agents whose lease another process holds now, with
    /// the token this process had, forgotten here.
    pub(super) fn renew(&self) -> Vec<(String, Fence)> {
        let held: Vec<(String, Fence)> = self
            .held
            .lock_recovered()
            .iter()
            .map(|(agent, fence)| (agent.clone(), *fence))
            .collect();
        let mut lost = Vec::new();
        for (agent, fence) in held {
            let now = self.clock.now();
            match self
                .store
                .renew_lease(&agent, self.owner, fence, now, self.ttl)
            {
                Ok(Renewal::Renewed) => {}
                Ok(Renewal::Lost) => {
                    let mut held = self.held.lock_recovered();
                    if held.get(&agent) == Some(&fence) {
                        held.remove(&agent);
                    }
                    lost.push((agent, fence));
                }
                // The next period tries again; meanwhile the token keeps writes safe.
                Err(error) => tracing::warn!(%agent, %error, "cannot renew an agent's lease"),
            }
        }
        lost
    }
}
