//! Rate limits that smooth bursts of spend (governor, keyed): spend per user per hour, spend per
//! guild per hour, calls per guild per minute. A call passes the gates one after another; at a
//! closed gate it waits, so a limited agent is slowed down, never failed.
//!
//! `Pacer` keeps governor's own clock type as a parameter (`Pacer<C>`), so tests run it on
//! governor's `FakeRelativeClock`; the runtime's `Clock` does the waiting on top of it.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::core::budget::{Micros, MAX_SPEND_PER_HOUR};
use crate::core::state::GuildId;

type Keyed<C> =
    RateLimiter<String, DefaultKeyedStateStore<String>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// The limits, from config; zero switches one off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PaceLimits {
    pub user_spend_per_hour: Micros,
    pub guild_spend_per_hour: Micros,
    pub guild_calls_per_minute: u32,
}

/// What a call would consume, and whose limits apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaceRequest {
    pub user: Option<String>,
    pub guild: Option<GuildId>,
    /// The call's worst-case cost: it is what could be spent, and governor has no refunds.
    pub cost: Micros,
}

/// A closed gate: how long until it opens, and which limit it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub after: Duration,
    pub why: String,
}

struct Gate<C: Clock + Clone> {
    limiter: Keyed<C>,
    burst: u32,
    per_guild: bool,
    counts_spend: bool,
    describe: &'static str,
}

pub struct Pacer<C: Clock + Clone = DefaultClock> {
    gates: Vec<Gate<C>>,
}

impl Pacer<DefaultClock> {
    pub fn new(limits: PaceLimits) -> Self {
        Pacer::with_clock(limits, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Pacer<C> {
    pub fn with_clock(limits: PaceLimits, clock: C) -> Self {
        let mut gates = Vec::new();
        let mut add = |amount: u64, per: Duration, per_guild, counts_spend, describe| {
            let Some(burst) = NonZeroU32::new(amount.min(MAX_SPEND_PER_HOUR.0) as u32) else {
                return;
            };
            let Some(quota) = Quota::with_period(per / burst.get()) else {
                return;
            };
            gates.push(Gate {
                limiter: RateLimiter::new(
                    quota.allow_burst(burst),
                    DefaultKeyedStateStore::default(),
                    clock.clone(),
                ),
                burst: burst.get(),
                per_guild,
                counts_spend,
                describe,
            });
        };
        add(
            limits.guild_calls_per_minute as u64,
            Duration::from_secs(60),
            true,
            false,
            "the server's model calls per minute",
        );
        add(
            limits.user_spend_per_hour.0,
            Duration::from_secs(3600),
            false,
            true,
            "your spend per hour",
        );
        add(
            limits.guild_spend_per_hour.0,
            Duration::from_secs(3600),
            true,
            true,
            "the server's spend per hour",
        );
        Pacer { gates }
    }

    pub fn gates(&self) -> usize {
        self.gates.len()
    }

    /// Tries gate `index` for `request`. Passing consumes its cells; a caller that waits retries
    /// the same gate, so no gate is charged twice for one call.
    pub fn try_gate(&self, index: usize, request: &PaceRequest) -> Result<(), Wait> {
        let gate = &self.gates[index];
        let key = if gate.per_guild {
            request.guild.as_ref().map(GuildId::as_str)
        } else {
            request.user.as_deref()
        };
        let Some(key) = key else {
            return Ok(());
        };
        let cells = if gate.counts_spend {
            // A call dearer than the whole hourly allowance could never pass: it takes the whole
            // allowance instead, so it runs once the hour's window is clear.
            request.cost.0.min(gate.burst as u64) as u32
        } else {
            1
        };
        let Some(cells) = NonZeroU32::new(cells) else {
            return Ok(());
        };
        match gate.limiter.check_key_n(&key.to_string(), cells) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(Wait {
                after: not_until.wait_time_from(gate.limiter.clock().now()),
                why: gate.describe.to_string(),
            }),
            // Unreachable with the clamp above; treated as passing rather than blocking forever.
            Err(_) => Ok(()),
        }
    }

    /// Forgets keys whose limits are back to full, so memory stays bounded by the active keys.
    pub fn retain_recent(&self) {
        for gate in &self.gates {
            gate.limiter.retain_recent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn request(user: &str, guild: &str, cost: Micros) -> PaceRequest {
        PaceRequest {
            user: Some(user.into()),
            guild: Some(guild.into()),
            cost,
        }
    }

    #[test]
    fn calls_per_minute_close_the_gate_until_a_cell_replenishes() {
        let clock = FakeRelativeClock::default();
        let pacer = Pacer::with_clock(
            PaceLimits {
                guild_calls_per_minute: 2,
                ..Default::default()
            },
            clock.clone(),
        );
        assert_eq!(pacer.gates(), 1);
        let r = request("u", "g", Micros(10));
        assert_eq!(pacer.try_gate(0, &r), Ok(()));
        assert_eq!(pacer.try_gate(0, &r), Ok(()));
        let wait = pacer.try_gate(0, &r).unwrap_err();
        assert_eq!(wait.after, Duration::from_secs(30));
        assert_eq!(wait.why, "the server's model calls per minute");
        // Another guild has its own cells.
        assert_eq!(pacer.try_gate(0, &request("u", "h", Micros(10))), Ok(()));
        clock.advance(Duration::from_secs(30));
        assert_eq!(pacer.try_gate(0, &r), Ok(()));
    }

    #[test]
    fn spend_per_hour_is_keyed_by_user_and_clamps_huge_calls() {
        let clock = FakeRelativeClock::default();
        let pacer = Pacer::with_clock(
            PaceLimits {
                user_spend_per_hour: Micros(3600),
                ..Default::default()
            },
            clock.clone(),
        );
        let alice = request("alice", "g", Micros(3000));
        assert_eq!(pacer.try_gate(0, &alice), Ok(()));
        let wait = pacer.try_gate(0, &alice).unwrap_err();
        // 3000 more cells at one per second, 600 of them still there.
        assert_eq!(wait.after, Duration::from_secs(2400));
        assert_eq!(
            pacer.try_gate(0, &request("bob", "g", Micros(3000))),
            Ok(())
        );
        // Free calls and calls without a user pass.
        assert_eq!(pacer.try_gate(0, &request("alice", "g", Micros(0))), Ok(()));
        let anonymous = PaceRequest {
            user: None,
            guild: None,
            cost: Micros(10),
        };
        assert_eq!(pacer.try_gate(0, &anonymous), Ok(()));
        // A call dearer than the hour's allowance takes the whole allowance and passes once clear.
        clock.advance(Duration::from_secs(3600));
        assert_eq!(
            pacer.try_gate(0, &request("alice", "g", Micros(1_000_000))),
            Ok(())
        );
        assert!(pacer
            .try_gate(0, &request("alice", "g", Micros(1)))
            .is_err());
    }
}
