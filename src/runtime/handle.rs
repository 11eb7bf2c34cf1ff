//! The address of a live agent: `AgentHandle` (events and decisions in), the `ActorMsg`s its
//! mailbox carries, and `DecideError`, why a decision was not applied.

use tokio::sync::{mpsc, oneshot};

use crate::core::event::{Decision, Event};
use crate::core::history::Outcome;
use crate::core::reply::CommandCall;
use crate::store::WorkspaceOp;

/// Why a decision was not applied. Its `Display` is the sentence shown to the person who
/// decided, on every surface.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// Someone else's decision for this cycle came first.
    #[error("This proposal is no longer pending: already decided by {by}.")]
    AlreadyDecided { by: String },
    /// The card is for a cycle the agent is no longer waiting on.
    #[error("This proposal is no longer pending.")]
    NotPending,
    /// The agent's actor was gone, or stopped before it answered.
    #[error("The agent is no longer running.")]
    NotRunning,
    /// The compare-and-swap could not be written; trying again may work.
    #[error("The decision could not be stored; try again.")]
    Storage,
}

impl DecideError {
    /// Whether trying the same decision again could succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, DecideError::Storage)
    }
}

/// Messages an agent's actor receives.
pub enum ActorMsg {
    Event {
        event: Event,
        reply: Option<oneshot::Sender<Result<(), DecideError>>>,
    },
    /// A command finished; its staged workspace changes travel with it.
    Executed {
        cycle: u64,
        call: CommandCall,
        outcome: Outcome,
        ops: Vec<WorkspaceOp>,
    },
}

/// The address of a live agent. Cloneable; everything outside the actor talks to it through this.
#[derive(Clone)]
pub struct AgentHandle {
    pub id: String,
    pub(super) tx: mpsc::UnboundedSender<ActorMsg>,
}

impl AgentHandle {
    pub fn send(&self, event: Event) {
        let _ = self.tx.send(ActorMsg::Event { event, reply: None });
    }

    /// Like `send`, but says whether the actor was still there to receive it.
    pub fn try_send(&self, event: Event) -> bool {
        self.tx.send(ActorMsg::Event { event, reply: None }).is_ok()
    }

    /// Delivers a decision; the answer says whether it was applied, or why not (stale, already decided).
    pub async fn decide(
        &self,
        cycle: u64,
        decision: Decision,
        by: &str,
    ) -> Result<(), DecideError> {
        let (reply, answer) = oneshot::channel();
        let event = Event::Decided {
            cycle,
            decision,
            by: by.to_string(),
        };
        if self
            .tx
            .send(ActorMsg::Event {
                event,
                reply: Some(reply),
            })
            .is_err()
        {
            return Err(DecideError::NotRunning);
        }
        answer.await.unwrap_or(Err(DecideError::NotRunning))
    }
}
