//! Which agents the lease keeper leaves alone for a while: those whose actor stopped on an error.
//! An actor that fails gives its lease back, so the next lease period finds the agent live and
//! unowned and would adopt it again; when the failure lasts (a record the store refuses, a
//! database that fails one agent's writes), that restarted it every period, each time loading it,
//! taking its lease and stepping it to the same failure. Instead, each failure in a row keeps the
//! agent from adoption twice as long as the one before (`FIRST_WAIT_PERIODS` lease periods first,
//! at most `LONGEST_WAIT`), logged once per wait; an actor that comes to rest without an error
//! ends its agent's run of failures. A person's own event (a click, a message) still starts the
//! agent at once: only adoption waits.
//!
//! An entry is kept per agent with failures in a row, and goes when the agent next rests without
//! one or is no longer in the store: at most one per agent the store holds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::locks::LockRecovered;

/// The first wait after a failure, in lease periods; each failure in a row doubles it.
const FIRST_WAIT_PERIODS: u32 = 2;

/// The longest an agent is kept from adoption, however often it failed.
const LONGEST_WAIT: Duration = Duration::from_secs(300);

/// An agent's failures in a row, and until when it is not adopted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failing {
    in_a_row: u32,
    until: DateTime<Utc>,
}

/// The agents kept from adoption after their actor failed.
#[derive(Default)]
pub(super) struct Adoption {
    failing: Mutex<HashMap<String, Failing>>,
}

impl Adoption {
    /// Records that the agent's actor stopped on an error at `now`, and returns how long it is
    /// now kept from adoption: `period` × `FIRST_WAIT_PERIODS`, doubled for each failure in a row
    /// before it, at most `LONGEST_WAIT`.
    pub(super) fn failed(&self, agent: &str, now: DateTime<Utc>, period: Duration) -> Duration {
        let mut failing = self.failing.lock_recovered();
        let in_a_row = failing
            .get(agent)
            .map_or(0, |f| f.in_a_row)
            .saturating_add(1);
        let doublings = in_a_row.saturating_sub(1).min(16);
        let wait = period
            .saturating_mul(FIRST_WAIT_PERIODS)
            .saturating_mul(1 << doublings)
            .min(LONGEST_WAIT);
        let until = chrono::Duration::from_std(wait)
            .ok()
            .and_then(|wait| now.checked_add_signed(wait))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        failing.insert(agent.to_owned(), Failing { in_a_row, until });
        wait
    }

    /// The agent's actor came to rest without an error: its run of failures ends.
    pub(super) fn recovered(&self, agent: &str) {
        self.failing.lock_recovered().remove(agent);
    }

    /// Whether the agent is kept from adoption at `now`.
    pub(super) fn waits(&self, agent: &str, now: DateTime<Utc>) -> bool {
        self.failing
            .lock_recovered()
            .get(agent)
            .is_some_and(|failing| failing.until > now)
    }

    /// Forgets the agents `keep` says no longer need an entry (gone from the store).
    pub(super) fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.failing.lock_recovered().retain(|agent, _| keep(agent));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_in_a_row_doubles_the_wait_up_to_the_longest_and_a_rest_ends_the_run() {
        let adoption = Adoption::default();
        let period = Duration::from_secs(5);
        let start = DateTime::<Utc>::UNIX_EPOCH;
        let mut now = start;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let wait = chrono::Duration::from_std(adoption.failed("a", now, period)).unwrap();
            assert!(adoption.waits("a", now));
            assert!(adoption.waits("a", now + wait - chrono::Duration::milliseconds(1)));
            now += wait;
            assert!(
                !adoption.waits("a", now),
                "adopted again once the wait is over"
            );
            waits.push(wait.num_seconds());
        }
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300, 300]);
        // Another agent's failures are its own.
        assert!(!adoption.waits("b", start));
        // At rest without an error, the next failure waits the first wait again.
        adoption.recovered("a");
        assert!(!adoption.waits("a", now));
        assert_eq!(adoption.failed("a", now, period), Duration::from_secs(10));
        // Entries go with the agents that no longer need one.
        adoption.failed("b", now, period);
        adoption.retain(|agent| agent == "b");
        assert!(!adoption.waits("a", now));
        assert!(adoption.waits("b", now));
    }
}
