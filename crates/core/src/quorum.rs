//! Quorum: a risk class may need k distinct people to approve its commands before they run. One
//! deny ends the proposal, nobody counts twice, and an edit starts the count again.
//!
//! `Quorum` holds the distinct approvals each class needs (1 to `MAX_QUORUM`), counted by person
//! id; `Tally` says whether an approval reached it, leaves it waiting, or was already counted, and
//! `progress_line` is what the card shows. The runtime claims a decision in the store only with the
//! approval that reaches the quorum.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::commands::Risk;
use super::person::{names, Person};

/// How many distinct approvals each class needs; a class it leaves out needs one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Quorum {
    needed: BTreeMap<Risk, u32>,
}

/// The most approvals a class may ask for: a card lists its approvers.
pub const MAX_QUORUM: u32 = 10;

/// Where a proposal's approvals stand after one more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tally {
    /// Enough people approved: the command runs, approved by all of them.
    Reached,
    /// Counted; `needed` in all.
    Waiting { have: usize, needed: u32 },
    /// This person's approval was already counted.
    AlreadyCounted,
}

impl Quorum {
    /// This quorum with `risk` needing `approvals` (clamped to 1..=MAX_QUORUM).
    pub fn with(mut self, risk: Risk, approvals: u32) -> Self {
        self.needed.insert(risk, approvals.clamp(1, MAX_QUORUM));
        self
    }

    /// This quorum with every class `changes` names set as it says.
    pub fn with_all(self, changes: &BTreeMap<Risk, u32>) -> Self {
        changes
            .iter()
            .fold(self, |quorum, (risk, n)| quorum.with(*risk, *n))
    }

    pub fn needed(&self, risk: Risk) -> u32 {
        self.needed.get(&risk).copied().unwrap_or(1)
    }

    /// Whether an approval by `by` on a proposal already approved by `approvals` would be the
    /// one that reaches the quorum (the runtime claims the decision only then).
    pub fn is_final(&self, risk: Risk, approvals: &[Person], by: &Person) -> bool {
        !approvals.iter().any(|a| a.is(by)) && approvals.len() + 1 >= self.needed(risk) as usize
    }

    /// Counts `by`'s approval into `approvals`: by their id, so a person who renamed between two
    /// clicks is still counted once.
    pub fn approve(&self, risk: Risk, approvals: &mut Vec<Person>, by: &Person) -> Tally {
        if approvals.iter().any(|a| a.is(by)) {
            return Tally::AlreadyCounted;
        }
        approvals.push(by.clone());
        let needed = self.needed(risk);
        if approvals.len() >= needed as usize {
            Tally::Reached
        } else {
            Tally::Waiting {
                have: approvals.len(),
                needed,
            }
        }
    }
}

/// "1 of 2 approvals: alice" on a card waiting on more; "2 of 2 approvals: alice, bob" on the
/// card the quorum decided.
pub fn progress_line(approvals: &[Person], needed: u32) -> String {
    let count = format!("{} of {needed} approvals", approvals.len());
    if approvals.is_empty() {
        count
    } else {
        format!("{count}: {}", names(approvals))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_distinct_people_reach_a_quorum_and_nobody_counts_twice() {
        let alice = &Person::discord(1, "alice");
        let alicia = &Person::discord(1, "alicia");
        let bob = &Person::discord(2, "bob");
        let carol = &Person::discord(3, "carol");
        let quorum = Quorum::default().with(Risk::External, 2);
        assert_eq!(quorum.needed(Risk::Write), 1, "unnamed classes need one");
        let mut approvals = Vec::new();
        assert!(!quorum.is_final(Risk::External, &approvals, alice));
        assert_eq!(
            quorum.approve(Risk::External, &mut approvals, alice),
            Tally::Waiting { have: 1, needed: 2 }
        );
        assert_eq!(progress_line(&approvals, 2), "1 of 2 approvals: alice");
        assert!(!quorum.is_final(Risk::External, &approvals, alice));
        assert_eq!(
            quorum.approve(Risk::External, &mut approvals, alice),
            Tally::AlreadyCounted
        );
        // The same id under a new name is the same person.
        assert!(!quorum.is_final(Risk::External, &approvals, alicia));
        assert_eq!(
            quorum.approve(Risk::External, &mut approvals, alicia),
            Tally::AlreadyCounted
        );
        assert!(quorum.is_final(Risk::External, &approvals, bob));
        assert_eq!(
            quorum.approve(Risk::External, &mut approvals, bob),
            Tally::Reached
        );
        assert_eq!(approvals, [alice.clone(), bob.clone()]);
        let mut single = Vec::new();
        assert!(quorum.is_final(Risk::Write, &single, carol));
        assert_eq!(
            quorum.approve(Risk::Write, &mut single, carol),
            Tally::Reached
        );
    }

    #[test]
    fn a_quorum_is_clamped_to_a_sane_range() {
        let quorum = Quorum::default()
            .with(Risk::Write, 0)
            .with(Risk::External, 99);
        assert_eq!(quorum.needed(Risk::Write), 1);
        assert_eq!(quorum.needed(Risk::External), MAX_QUORUM);
    }
}
