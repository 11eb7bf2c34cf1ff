//! The runaway brake: an agent that spends too fast (dollars per hour, tokens per minute over a
//! window) or makes no progress (its newest steps repeat each other) is parked before its next
//! cycle, so that Approve ×N or continuous mode cannot spend a budget on a loop.
//!
//! `BrakeLimits` come from `BudgetConfig::brake_limits`; `BrakeState` keeps the spend samples
//! inside the window (one recorded with each cycle's cost, `note_spend`) and the cycle from which a
//! person last let the agent go on. `begin_cycle` checks it only while the agent runs unattended
//! (Approve ×N, continuous mode, or a live rule), and parks it with `PauseReason::Runaway`.

use std::collections::VecDeque;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::budget::{format_usd, Micros};
use super::history::{format_call, Episode, Outcome};

/// The thresholds, from config; a zero turns its check off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BrakeLimits {
    pub usd_per_hour: Micros,
    pub tokens_per_minute: u64,
    pub window: Duration,
    /// The newest this many steps all repeating one another is no progress.
    pub repeat_steps: usize,
}

/// What the agent had spent, in dollars and tokens, when a cycle closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendSample {
    pub at: DateTime<Utc>,
    pub micros: Micros,
    pub tokens: u64,
}

/// The brake's memory: the samples inside the window and the cycle a human last let the agent
/// continue from (steps before it no longer count against it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrakeState {
    pub samples: VecDeque<SpendSample>,
    pub since_cycle: u64,
}

/// Samples kept at most, whatever the window. The state holding them is written several times a
/// cycle, so they are few: a rate over the window needs only its first and last sample.
const MAX_SAMPLES: usize = 40;
/// The window is cut into this many slices, and a slice keeps only its newest sample: a fast
/// agent's cycles (many a second against a fake model) leave one sample per slice, not per
/// cycle. The rate's start is then at most one slice late.
const SAMPLE_SLICES: i32 = 32;

impl BrakeState {
    /// Notes what the agent had spent when a cycle closed, forgetting samples older than the
    /// window. Spend is cumulative, so replacing a slice's sample by a newer one loses nothing
    /// but resolution.
    pub fn record(&mut self, sample: SpendSample, window: Duration) {
        let slice = (window / SAMPLE_SLICES).num_milliseconds().max(1);
        let slice_of = |s: &SpendSample| s.at.timestamp_millis().div_euclid(slice);
        // The oldest sample is never replaced: it is where the window's spend starts.
        if self.samples.len() >= 2
            && self
                .samples
                .back()
                .is_some_and(|last| slice_of(last) == slice_of(&sample))
        {
            self.samples.pop_back();
        }
        self.samples.push_back(sample);
        while self.samples.len() > MAX_SAMPLES
            || self
                .samples
                .front()
                .is_some_and(|s| sample.at - s.at > window)
        {
            self.samples.pop_front();
        }
    }

    /// A human let the agent continue at `cycle`: what came before no longer counts.
    pub fn clear(&mut self, cycle: u64) {
        self.samples.clear();
        self.since_cycle = cycle;
    }

    /// Why the agent should park before its next cycle, if it should.
    pub fn check(
        &self,
        episodes: &[Episode],
        now: DateTime<Utc>,
        limits: &BrakeLimits,
    ) -> Option<String> {
        self.too_fast(now, limits).or_else(|| {
            let counted: Vec<&Episode> = episodes
                .iter()
                .filter(|e| e.cycle >= self.since_cycle)
                .collect();
            no_progress(&counted, limits.repeat_steps)
        })
    }

    /// Spend inside the window beyond what the rates allow over the whole window. Measured over
    /// the fixed window, not extrapolated from the first seconds, so a quick start is no alarm.
    fn too_fast(&self, now: DateTime<Utc>, limits: &BrakeLimits) -> Option<String> {
        let minutes = limits.window.num_minutes().max(1) as u64;
        let in_window: Vec<&SpendSample> = self
            .samples
            .iter()
            .filter(|s| now - s.at <= limits.window)
            .collect();
        let (first, last) = (in_window.first()?, in_window.last()?);
        // The first sample in the window is where its spend starts.
        let spent = last.micros.saturating_sub(first.micros);
        let tokens = last.tokens.saturating_sub(first.tokens);
        let allowed = Micros(limits.usd_per_hour.0.saturating_mul(minutes) / 60);
        if !limits.usd_per_hour.is_zero() && spent > allowed {
            return Some(format!(
                "it spent {} in the last {minutes} minutes, faster than {} an hour",
                format_usd(spent),
                format_usd(limits.usd_per_hour)
            ));
        }
        let allowed_tokens = limits.tokens_per_minute.saturating_mul(minutes);
        if limits.tokens_per_minute > 0 && tokens > allowed_tokens {
            return Some(format!(
                "it used {tokens} tokens in the last {minutes} minutes, more than {} a minute",
                limits.tokens_per_minute
            ));
        }
        None
    }
}

/// Whether two steps are the same move: one command with the same arguments, or with the same
/// result (a search reworded to find the same page, a failing call retried with a new spelling).
/// A short confirmation ("Text appended to report.md") is the same every time and says nothing
/// about progress, so only failures and results with content count as the same result.
fn repeats(a: &Episode, b: &Episode) -> bool {
    let normalise = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let telling = |e: &Episode| {
        matches!(e.outcome, Outcome::Error(_)) || e.outcome.text().chars().count() > 100
    };
    a.command.name == b.command.name
        && (a.command.args == b.command.args
            || (telling(a)
                && telling(b)
                && normalise(a.outcome.text()) == normalise(b.outcome.text())))
}

/// The newest `steps` steps are no progress when each repeats another of them: A, A, A and
/// A, B, A, B are loops; a step unlike the others is progress.
pub fn no_progress(episodes: &[&Episode], steps: usize) -> Option<String> {
    if steps < 2 || episodes.len() < steps {
        return None;
    }
    let newest = &episodes[episodes.len() - steps..];
    let stuck = newest.iter().enumerate().all(|(i, step)| {
        newest
            .iter()
            .enumerate()
            .any(|(j, other)| i != j && repeats(other, step))
    });
    stuck.then(|| {
        let last = newest[steps - 1];
        format!(
            "its last {steps} steps repeat one another (the newest: {})",
            format_call(&last.command, 80)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::CommandCall;
    use serde_json::json;

    fn step(cycle: u64, name: &str, arg: &str, result: &str) -> Episode {
        Episode {
            cycle,
            command: CommandCall {
                name: name.into(),
                args: json!({"q": arg}).as_object().cloned().unwrap(),
            },
            reasoning: String::new(),
            outcome: Outcome::Success(result.into()),
            summary: None,
            decided_by: None,
            edited_by: Vec::new(),
            cost: Micros::ZERO,
        }
    }

    fn limits() -> BrakeLimits {
        BrakeLimits {
            usd_per_hour: Micros(1_200_000),
            tokens_per_minute: 1_000,
            window: Duration::minutes(10),
            repeat_steps: 3,
        }
    }

    #[test]
    fn repeated_commands_or_results_are_no_progress_and_distinct_steps_are_progress() {
        let same = [
            step(1, "web_search", "rust", "a"),
            step(2, "web_search", "rust", "b"),
            step(3, "web_search", "rust", "c"),
        ];
        let refs: Vec<&Episode> = same.iter().collect();
        assert!(no_progress(&refs, 3)
            .unwrap()
            .contains("web_search(q=\"rust\")"));
        // Alternating between two moves is a loop too; a new move in the window is progress.
        let ab = [
            step(1, "read_file", "a", "x"),
            step(2, "read_file", "b", "y"),
            step(3, "read_file", "a", "x"),
            step(4, "read_file", "b", "y"),
        ];
        let refs: Vec<&Episode> = ab.iter().collect();
        assert!(no_progress(&refs, 4).is_some());
        assert_eq!(
            no_progress(&refs, 3),
            None,
            "a at step 3 is alone in the window"
        );
        // Reworded queries that find the same page.
        let page = "the same page of results ".repeat(5);
        let reworded = [
            step(1, "web_search", "rust 1", &page),
            step(2, "web_search", "rust 2", &format!(" {page}")),
            step(3, "web_search", "rust 3", &page.replace(' ', "  ")),
        ];
        let refs: Vec<&Episode> = reworded.iter().collect();
        assert!(no_progress(&refs, 3).is_some());
        // Appending to one report chunk by chunk confirms the same way each time: progress.
        let chunks: Vec<Episode> = (1..=5)
            .map(|i| step(i, "append_to_file", &format!("chunk {i}"), "Text appended."))
            .collect();
        let refs: Vec<&Episode> = chunks.iter().collect();
        assert_eq!(no_progress(&refs, 4), None);
        // Reading one file after another is progress, though the calls look alike.
        let series: Vec<Episode> = (1..=5)
            .map(|i| {
                step(
                    i,
                    "read_file",
                    &format!("part{i}.txt"),
                    &format!("part {i}"),
                )
            })
            .collect();
        let refs: Vec<&Episode> = series.iter().collect();
        assert_eq!(no_progress(&refs, 3), None);
        assert_eq!(no_progress(&refs[..2], 3), None, "too few steps to tell");
    }

    #[test]
    fn spend_over_the_window_trips_and_a_quick_start_does_not() {
        let t0 = DateTime::<Utc>::UNIX_EPOCH;
        let at = |secs: i64, micros: u64, tokens: u64| SpendSample {
            at: t0 + Duration::seconds(secs),
            micros: Micros(micros),
            tokens,
        };
        let mut brake = BrakeState::default();
        // $1.20 an hour over 10 minutes allows $0.20; 1,000 tokens a minute allows 10,000.
        brake.record(at(0, 0, 0), limits().window);
        brake.record(at(5, 150_000, 5_000), limits().window);
        assert_eq!(brake.check(&[], t0 + Duration::seconds(5), &limits()), None);
        brake.record(at(10, 250_000, 6_000), limits().window);
        let why = brake
            .check(&[], t0 + Duration::seconds(10), &limits())
            .unwrap();
        assert!(why.contains("spent $0.25 in the last 10 minutes"), "{why}");

        let mut tokens = BrakeState::default();
        tokens.record(at(0, 0, 0), limits().window);
        tokens.record(at(30, 1_000, 12_000), limits().window);
        let why = tokens
            .check(&[], t0 + Duration::seconds(30), &limits())
            .unwrap();
        assert!(why.contains("12000 tokens"), "{why}");

        // Old samples leave the window, and a human's Continue starts afresh.
        brake.record(at(1_000, 260_000, 6_100), limits().window);
        assert_eq!(brake.samples.len(), 1);
        assert_eq!(
            brake.check(&[], t0 + Duration::seconds(1_000), &limits()),
            None
        );
        let looping: Vec<Episode> = (1..=3).map(|i| step(i, "x", "same", "r")).collect();
        assert!(brake.check(&looping, t0, &limits()).is_some());
        brake.clear(4);
        assert_eq!(brake.check(&looping, t0, &limits()), None);
    }

    #[test]
    fn a_fast_agent_keeps_one_sample_per_slice_and_still_trips() {
        let t0 = Utc::now();
        let window = limits().window;
        let mut brake = BrakeState::default();
        // 2,000 cycles a second apart: 33 minutes, more than three windows.
        for i in 0..2_000i64 {
            let sample = SpendSample {
                at: t0 + Duration::seconds(i),
                micros: Micros(i as u64 * 1_000),
                tokens: 0,
            };
            brake.record(sample, window);
            assert!(brake.samples.len() <= MAX_SAMPLES);
        }
        assert!(
            brake.samples.len() <= SAMPLE_SLICES as usize + 2,
            "{}",
            brake.samples.len()
        );
        // $0.001 a second is $3.60 an hour, over the $1.20 allowed: seen across the window.
        let why = brake
            .check(&[], t0 + Duration::seconds(1_999), &limits())
            .unwrap();
        assert!(why.contains("in the last 10 minutes"), "{why}");
    }
}
