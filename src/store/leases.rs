//! Leases: which process runs each agent when several share one store (PostgreSQL). The `leases`
//! tree holds, per agent id, the owner (a process's random `LeaseOwner`), a fencing token and
//! when the lease expires. Every change is a compare-and-swap on that one value, so two processes
//! racing for an agent cannot both win.
//!
//! `acquire_lease` succeeds when there is no lease, when it has expired, or when this owner holds
//! it; taking one over that expired (this owner's included) gives it the next token, so a token
//! is never handed out twice. `renew_lease` extends a lease only while it still carries this
//! owner's token; `release_lease` marks it expired and keeps its token, for the next owner to go
//! past. The clock only decides when another process may take a lease over; what keeps a late
//! writer out is the token: the runtime's writes of an agent's steps go through
//! `commit_fenced` and its kin (see `kv::fenced`), which land only while the lease carries the
//! writer's token, and fail with `StoreError::LeaseLost` otherwise.
//!
//! A lease's value: the token (8 bytes, big-endian; the kv layer's fence check reads these), the
//! expiry in milliseconds since the epoch (8 bytes, big-endian), then the owner (16 bytes).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::ahead::Writes;
use super::{kv, Commit, Store, StoreError};
use crate::core::audit::AuditEntry;
use crate::core::reply::CommandCall;

/// The process holding a lease: random, new every time a process starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseOwner([u8; 16]);

impl LeaseOwner {
    pub fn random() -> LeaseOwner {
        LeaseOwner(*uuid::Uuid::new_v4().as_bytes())
    }
}

impl std::fmt::Display for LeaseOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", uuid::Uuid::from_bytes(self.0).simple())
    }
}

/// A lease's fencing token: what a writer must still hold for its writes to land.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fence(pub u64);

/// One agent's lease as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: LeaseOwner,
    pub fence: Fence,
    pub expires_at: DateTime<Utc>,
}

/// What `acquire_lease` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// This owner holds the lease, with this token.
    Held(Fence),
    /// Another owner holds it until `expires_at`.
    Elsewhere {
        owner: LeaseOwner,
        expires_at: DateTime<Utc>,
    },
}

/// What `renew_lease` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The lease carries another token (or another owner): this owner no longer runs the agent.
    Lost,
}

/// How many compare-and-swaps a lease change tries before it reports the contention.
const LEASE_ATTEMPTS: u32 = 16;

impl Lease {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        out.extend_from_slice(&self.fence.0.to_be_bytes());
        out.extend_from_slice(&self.expires_at.timestamp_millis().to_be_bytes());
        out.extend_from_slice(&self.owner.0);
        out
    }

    fn decode(agent: &str, raw: &[u8]) -> Result<Lease, StoreError> {
        let corrupt = || StoreError::Corrupt(format!("the lease of agent {agent} is cut short"));
        let (fence, rest) = raw.split_first_chunk::<8>().ok_or_else(corrupt)?;
        let (expires, rest) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
        let owner = <[u8; 16]>::try_from(rest).map_err(|_| corrupt())?;
        Ok(Lease {
            owner: LeaseOwner(owner),
            fence: Fence(u64::from_be_bytes(*fence)),
            expires_at: DateTime::from_timestamp_millis(i64::from_be_bytes(*expires))
                .ok_or_else(corrupt)?,
        })
    }
}

/// `now + ttl`, saturating far in the future rather than failing.
fn until(now: DateTime<Utc>, ttl: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(ttl)
        .ok()
        .and_then(|ttl| now.checked_add_signed(ttl))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl Store {
    /// The agent's lease, if it ever had one.
    pub fn lease(&self, agent: &str) -> Result<Option<Lease>, StoreError> {
        self.leases
            .get(agent.as_bytes())?
            .map(|raw| Lease::decode(agent, &raw))
            .transpose()
    }

    /// Changes the agent's lease to what `change` makes of it (`None`: leave it), by
    /// compare-and-swap, reading again when another process changed it meanwhile.
    fn change_lease<T>(
        &self,
        agent: &str,
        mut change: impl FnMut(Option<&Lease>) -> (Option<Lease>, T),
    ) -> Result<T, StoreError> {
        for _ in 0..LEASE_ATTEMPTS {
            let raw = self.leases.get(agent.as_bytes())?;
            let lease = raw.as_deref().map(|raw| Lease::decode(agent, raw));
            let lease = lease.transpose()?;
            let (new, outcome) = change(lease.as_ref());
            let Some(new) = new else {
                return Ok(outcome);
            };
            let swapped = self.leases.compare_and_swap(
                agent.as_bytes(),
                raw.as_deref(),
                Some(new.encode()),
            )?;
            if swapped.is_ok() {
                return Ok(outcome);
            }
        }
        Err(kv::Error::Contended(LEASE_ATTEMPTS).into())
    }

    /// Takes the agent's lease for `owner` until `now + ttl`, unless another owner holds it and
    /// it has not expired.
    pub fn acquire_lease(
        &self,
        agent: &str,
        owner: LeaseOwner,
        now: DateTime<Utc>,
        ttl: Duration,
    ) -> Result<Acquired, StoreError> {
        self.change_lease(agent, |lease| {
            let fence = match lease {
                None => Fence(1),
                Some(held) if held.expires_at > now && held.owner == owner => held.fence,
                Some(held) if held.expires_at > now => {
                    let elsewhere = Acquired::Elsewhere {
                        owner: held.owner,
                        expires_at: held.expires_at,
                    };
                    return (None, elsewhere);
                }
                // Expired: whoever held it may still be writing, so the next owner writes with a
                // token of its own, which shuts the old one out.
                Some(expired) => Fence(expired.fence.0 + 1),
            };
            let lease = Lease {
                owner,
                fence,
                expires_at: until(now, ttl),
            };
            (Some(lease), Acquired::Held(fence))
        })
    }

    /// Extends the lease to `now + ttl` if it still carries `owner`'s `fence`.
    pub fn renew_lease(
        &self,
        agent: &str,
        owner: LeaseOwner,
        fence: Fence,
        now: DateTime<Utc>,
        ttl: Duration,
    ) -> Result<Renewal, StoreError> {
        self.change_lease(agent, |lease| match lease {
            Some(held) if held.owner == owner && held.fence == fence => {
                let renewed = Lease {
                    expires_at: until(now, ttl),
                    ..held.clone()
                };
                (Some(renewed), Renewal::Renewed)
            }
            _ => (None, Renewal::Lost),
        })
    }

    /// Lets the lease go (it reads as expired, and keeps its token) if it still carries
    /// `owner`'s `fence`; otherwise leaves it to whoever holds it.
    pub fn release_lease(
        &self,
        agent: &str,
        owner: LeaseOwner,
        fence: Fence,
    ) -> Result<(), StoreError> {
        self.change_lease(agent, |lease| match lease {
            Some(held) if held.owner == owner && held.fence == fence => {
                let released = Lease {
                    expires_at: DateTime::<Utc>::UNIX_EPOCH,
                    ..held.clone()
                };
                (Some(released), ())
            }
            _ => (None, ()),
        })
    }

    /// `commit`, landing only while the agent's lease carries `fence` (none: as `commit`).
    pub fn commit_fenced(
        &self,
        commit: &Commit<'_>,
        fence: Option<Fence>,
    ) -> Result<(), StoreError> {
        self.commit_with(commit, fence)
    }

    /// `record_start`, landing only while the agent's lease carries `fence`.
    pub fn record_start_fenced(
        &self,
        agent: &str,
        cycle: u64,
        call: &CommandCall,
        at: DateTime<Utc>,
        audit: &[&AuditEntry],
        fence: Option<Fence>,
    ) -> Result<(), StoreError> {
        self.record_start_with(agent, cycle, call, at, audit, fence)
    }

    /// `record_executing`, landing only while the agent's lease carries `fence`.
    pub fn record_executing_fenced(
        &self,
        agent: &str,
        cycle: u64,
        call: &CommandCall,
        at: DateTime<Utc>,
        fence: Option<Fence>,
    ) -> Result<(), StoreError> {
        let mut writes = Writes::default();
        writes.put(
            super::ahead::TreeId::Journal,
            super::cycle_key(agent, cycle),
            super::encode(&super::JournalEntry::executing(call, at, None))?,
        );
        self.write_together_fenced(&writes, agent, fence)
    }

    /// The guard of a write fenced by the agent's lease.
    pub(super) fn lease_guard<'a>(&'a self, agent: &'a str, fence: Fence) -> kv::FenceGuard<'a> {
        kv::FenceGuard {
            tree: &self.leases,
            key: agent.as_bytes(),
            fence: fence.0,
        }
    }

    /// Lands `writes` together; with a fence, in one transaction that checks the agent's lease
    /// first (see `kv::fenced`), failing with `LeaseLost` and writing nothing when it moved.
    pub(super) fn write_together_fenced(
        &self,
        writes: &Writes,
        agent: &str,
        fence: Option<Fence>,
    ) -> Result<(), StoreError> {
        match fence {
            None => self.write_together(writes),
            Some(fence) => {
                let guard = self.lease_guard(agent, fence);
                self.write_in_one_transaction(writes, Some(&guard))?
                    .map_err(|kv::FenceMoved| StoreError::LeaseLost {
                        agent: agent.to_owned(),
                    })
            }
        }
    }
}

#[cfg(test)]
#[path = "leases_tests.rs"]
mod tests;
