//! An agent's spend after each of its cycles after a given one (`spend_after_each_cycle`), read
//! from its stored steps decoding only their `cycle` and `cost`, for the budget burn-down chart.
//! Callers start from where the agent's own history begins, since a fork's copied steps were paid
//! for by its source.

use serde::Deserialize;

use super::steps::Step;
use super::{Store, StoreError};
use crate::core::budget::Micros;

/// The two fields of a stored step the chart needs; the rest of the record is skipped unread.
#[derive(Deserialize)]
struct StepCost {
    cycle: u64,
    #[serde(default)]
    cost: Micros,
}

impl Step for StepCost {
    fn cycle(&self) -> u64 {
        self.cycle
    }
}

impl Store {
    /// `(cycle, spend so far)` after each step the agent has taken after cycle `from`, oldest
    /// first: the running sum of what each of those cycles cost (a fork's steps from before it
    /// began were paid by the agent it came from).
    pub fn spend_after_each_cycle(
        &self,
        agent: &str,
        from: u64,
    ) -> Result<Vec<(u64, Micros)>, StoreError> {
        let mut spent = Micros::ZERO;
        Ok(self
            .steps_in::<StepCost>(agent, from.saturating_add(1), u64::MAX)?
            .into_iter()
            .map(|step| {
                spent = spent.saturating_add(step.cost);
                (step.cycle, spent)
            })
            .collect())
    }
}
