//! A person's answer to a proposal, on any surface.

use serde::{Deserialize, Serialize};

/// The most commands one Approve ×N may approve, on every surface (and for `continuous:N`).
pub const APPROVE_N_MAX: u32 = 100;

/// A human's answer to a proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    Approve,
    /// Run this command and the next N−1 automatic-class commands without asking.
    ApproveN(u32),
    /// Stop; the agent and its proposal are kept.
    Deny,
    /// Do not run the command; the text becomes the cycle's result.
    Feedback(String),
    SelfCritique,
    /// Replace the pending command's arguments with these, then wait for a decision again. An
    /// edit is not a decision: it claims nothing, and the card stays open.
    Edit(Box<serde_json::Map<String, serde_json::Value>>),
    /// Approve, and keep a rule that approves commands like it from now on.
    Remember(Box<crate::rules::RuleDraft>),
    /// Drop the proposal and ask the model again (with the stronger model where there is one),
    /// told why it seems stuck.
    Rethink,
    /// Do not run the command; the agent is told a person skipped it and goes on.
    Skip,
}

impl Decision {
    /// Whether it approves the command: what a quorum counts and a stricter policy can undo.
    pub fn is_approval(&self) -> bool {
        matches!(
            self,
            Decision::Approve | Decision::ApproveN(_) | Decision::Remember(_)
        )
    }
}
