//! The embeddings circuit breaker: decides whether memory may call the embeddings endpoint now
//! (`Memory::embed` asks it first), so that an endpoint that cannot work (a 4xx, or 501 from a
//! server without embeddings) or keeps failing never stalls an agent's cycle.
//!
//! An endpoint that refuses the request (a 4xx other than 408 and 429, or 501) turns memory off for
//! `probe_interval` at once: the same request would be refused again, so retrying only costs the
//! cycle time. Transient failures (5xx, timeouts) open the breaker after `failures_to_open` in a
//! row, for a cooldown that doubles up to `probe_interval`. When the breaker's time is up one call
//! goes through as a probe; its success turns memory back on. While it is open, `/agent status`
//! shows memory as off (`MemoryOff`). Embeddings requests have their own timeout and attempts
//! (`memory.timeout_secs`, `memory.max_attempts`), and the queue of memories waiting for the
//! endpoint is capped per agent.

use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};

use crate::llm::LlmError;
use crate::locks::LockRecovered;

/// Why memory is off, and until when; shown in logs and in `/agent status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOff {
    pub reason: String,
    pub until: DateTime<Utc>,
    /// True when the endpoint refused the request (it will not work without a change), false for
    /// transient failures.
    pub refused: bool,
}

impl MemoryOff {
    pub fn describe(&self) -> String {
        format!(
            "off ({}); the embeddings endpoint is tried again at {} UTC",
            self.reason,
            self.until.format("%H:%M:%S")
        )
    }
}

/// The breaker's rules, from `[memory]`.
#[derive(Debug, Clone, Copy)]
pub struct BreakerRules {
    pub failures_to_open: u32,
    pub first_cooldown: Duration,
    pub probe_interval: Duration,
}

#[derive(Debug, Default)]
struct State {
    consecutive_failures: u32,
    /// How long the breaker stayed open the last time it opened for transient failures.
    last_cooldown: Option<Duration>,
    off: Option<MemoryOff>,
    /// A probe is on its way; other callers keep out until it returns.
    probing: bool,
}

/// What a failed call means for the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The endpoint refused the request: the same request would be refused again.
    Refused,
    /// The endpoint was busy, failing or unreachable: it may work in a moment.
    Transient,
}

impl FailureKind {
    pub fn of(error: &LlmError) -> FailureKind {
        match error {
            LlmError::Rejected { status, .. } if refuses_for_good(*status) => FailureKind::Refused,
            _ => FailureKind::Transient,
        }
    }
}

/// 4xx other than timeouts and rate limits, and 501 ("not implemented": llama.cpp's server without
/// `--embeddings`), will not change by themselves.
fn refuses_for_good(status: u16) -> bool {
    (400..500).contains(&status) && status != 408 && status != 429 || status == 501
}

#[derive(Debug)]
pub struct Breaker {
    rules: BreakerRules,
    state: Mutex<State>,
}

/// What `Breaker::record_failure` did, so the caller logs a change once, not every failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// Memory just turned off.
    TurnedOff(MemoryOff),
    /// A probe failed; memory stays off until the new time.
    StillOff(MemoryOff),
    /// Counted; the breaker is still closed.
    Counted,
}

impl Breaker {
    pub fn new(rules: BreakerRules) -> Breaker {
        Breaker {
            rules,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a few counters; a panic elsewhere cannot leave it inconsistent.
        self.state.lock_recovered()
    }

    /// `Ok` when a call may go out now (it is a probe when memory was off); `Err` says why not.
    pub fn admit(&self, now: DateTime<Utc>) -> Result<(), MemoryOff> {
        let mut state = self.lock();
        match &state.off {
            None => Ok(()),
            Some(off) if now < off.until || state.probing => Err(off.clone()),
            Some(_) => {
                state.probing = true;
                Ok(())
            }
        }
    }

    /// `admit` without letting a probe through: whether a call could go out now. A call reserved
    /// in advance asks this first and `admit` again right before it goes out, since other calls
    /// may fail in between.
    pub fn would_admit(&self, now: DateTime<Utc>) -> Result<(), MemoryOff> {
        let state = self.lock();
        match &state.off {
            Some(off) if now < off.until || state.probing => Err(off.clone()),
            _ => Ok(()),
        }
    }

    /// Why memory is off now, if it is.
    pub fn off(&self) -> Option<MemoryOff> {
        self.lock().off.clone()
    }

    /// The admitted call was not made (the budget refused it): a probe may go out again.
    pub fn cancel_probe(&self) {
        self.lock().probing = false;
    }

    /// The call worked: memory is (back) on. Returns true when it had been off.
    pub fn record_success(&self) -> bool {
        let mut state = self.lock();
        let was_off = state.off.take().is_some();
        *state = State::default();
        was_off
    }

    pub fn record_failure(&self, error: &LlmError, now: DateTime<Utc>) -> Transition {
        let mut state = self.lock();
        let was_off = state.off.is_some();
        state.probing = false;
        state.consecutive_failures = state.consecutive_failures.saturating_add(1);
        let kind = FailureKind::of(error);
        let cooldown = match kind {
            FailureKind::Refused => self.rules.probe_interval,
            FailureKind::Transient if was_off => state
                .last_cooldown
                .map_or(self.rules.first_cooldown, |d| d * 2)
                .min(self.rules.probe_interval),
            FailureKind::Transient if state.consecutive_failures >= self.rules.failures_to_open => {
                self.rules.first_cooldown.min(self.rules.probe_interval)
            }
            FailureKind::Transient => return Transition::Counted,
        };
        state.last_cooldown = Some(cooldown);
        let off = MemoryOff {
            reason: short(error),
            until: now + cooldown,
            refused: kind == FailureKind::Refused,
        };
        state.off = Some(off.clone());
        if was_off {
            Transition::StillOff(off)
        } else {
            Transition::TurnedOff(off)
        }
    }
}

/// The error in a few words: the endpoint's message can be a whole HTML page.
fn short(error: &LlmError) -> String {
    let text = error.to_string();
    let mut short: String = text.chars().take(160).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> BreakerRules {
        BreakerRules {
            failures_to_open: 3,
            first_cooldown: Duration::seconds(30),
            probe_interval: Duration::minutes(10),
        }
    }

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + Duration::seconds(seconds)
    }

    fn not_implemented() -> LlmError {
        LlmError::Rejected {
            status: 501,
            message: "This server does not support embeddings.".into(),
        }
    }

    fn unavailable() -> LlmError {
        LlmError::Unavailable {
            attempts: 2,
            detail: "HTTP 503".into(),
            billing: crate::llm::Billing::MayBeBilled,
        }
    }

    #[test]
    fn refusals_are_told_apart_from_transient_failures() {
        for status in [400, 401, 403, 404, 405, 422, 501] {
            let error = LlmError::Rejected {
                status,
                message: String::new(),
            };
            assert_eq!(FailureKind::of(&error), FailureKind::Refused, "{status}");
        }
        for status in [408, 429, 500, 502, 503] {
            let error = LlmError::Rejected {
                status,
                message: String::new(),
            };
            assert_eq!(FailureKind::of(&error), FailureKind::Transient, "{status}");
        }
        assert_eq!(FailureKind::of(&unavailable()), FailureKind::Transient);
    }

    #[test]
    fn a_refusal_turns_memory_off_at_once_until_the_probe_interval() {
        let breaker = Breaker::new(rules());
        assert!(breaker.admit(at(0)).is_ok());
        let Transition::TurnedOff(off) = breaker.record_failure(&not_implemented(), at(0)) else {
            panic!("one refusal turns memory off");
        };
        assert!(off.refused && off.reason.contains("HTTP 501"), "{off:?}");
        assert_eq!(off.until, at(600));
        assert_eq!(breaker.admit(at(599)), Err(off.clone()));
        // At the probe time one call goes through; others wait for it.
        assert!(breaker.admit(at(600)).is_ok());
        assert!(breaker.admit(at(601)).is_err());
        // The probe is refused again: off for another interval, reported as no change.
        assert!(matches!(
            breaker.record_failure(&not_implemented(), at(601)),
            Transition::StillOff(MemoryOff { until, .. }) if until == at(1201)
        ));
        assert!(breaker.admit(at(1201)).is_ok());
        assert!(breaker.record_success());
        assert_eq!(breaker.off(), None);
        assert!(breaker.admit(at(1202)).is_ok());
    }

    #[test]
    fn transient_failures_open_after_a_run_and_back_off_to_the_probe_interval() {
        let breaker = Breaker::new(rules());
        assert_eq!(
            breaker.record_failure(&unavailable(), at(0)),
            Transition::Counted
        );
        // A success in between resets the run.
        assert!(!breaker.record_success());
        assert_eq!(
            breaker.record_failure(&unavailable(), at(1)),
            Transition::Counted
        );
        assert_eq!(
            breaker.record_failure(&unavailable(), at(2)),
            Transition::Counted
        );
        let Transition::TurnedOff(off) = breaker.record_failure(&unavailable(), at(3)) else {
            panic!("the third failure in a row opens the breaker");
        };
        assert!(!off.refused);
        assert_eq!(off.until, at(33));
        let mut now = 33;
        let mut cooldowns = Vec::new();
        for _ in 0..7 {
            assert!(breaker.admit(at(now)).is_ok());
            let Transition::StillOff(off) = breaker.record_failure(&unavailable(), at(now)) else {
                panic!("a failed probe keeps memory off");
            };
            cooldowns.push((off.until - at(now)).num_seconds());
            now = (off.until - at(0)).num_seconds();
        }
        assert_eq!(cooldowns, vec![60, 120, 240, 480, 600, 600, 600]);
    }
}
