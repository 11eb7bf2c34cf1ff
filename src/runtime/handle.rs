//! The address of a live agent: `AgentHandle` (events and decisions in), the `ActorMsg`s its
//! mailbox carries (`Event`, `Executed`, `Upload`), and `DecideError`, why a decision was not applied, whose
//! `Display` is the sentence every surface shows.
//!
//! The mailbox is bounded (`MAILBOX_CAPACITY`), with its last places reserved for the agent's own
//! reports. From outside, `offer` hands the event back with `Refused::Full` or `Refused::Stopped`
//! rather than wait; `ask_decision` and `decide` carry a decision and its answer. The actor's own
//! tasks use `report`, which waits for room, and `note`.

use tokio::sync::{mpsc, oneshot};

use crate::core::decision::Decision;
use crate::core::event::Event;
use crate::core::history::Outcome;
use crate::core::person::Person;
use crate::core::reply::CommandCall;
use crate::store::WorkspaceOp;

use super::uploads::{Upload, UploadError};

/// Why a decision was not applied. Its `Display` is the sentence shown to the person who
/// decided, on every surface.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// Someone else's decision for this cycle came first.
    #[error("This proposal is no longer pending: already decided by {}.", by.names())]
    AlreadyDecided { by: crate::core::person::ActedBy },
    /// The card is for a cycle the agent is no longer waiting on.
    #[error("This proposal is no longer pending.")]
    NotPending,
    /// The agent's actor was gone, or stopped before it answered.
    #[error("The agent is no longer running.")]
    NotRunning,
    /// The compare-and-swap could not be written; trying again may work.
    #[error("The decision could not be stored; try again.")]
    Storage,
    /// The agent's mailbox is full; trying again in a moment may work.
    #[error("{BUSY}")]
    Busy,
    /// The agent did not take it, for the reason given (an edit that does not validate).
    #[error("{0}")]
    NotApplied(String),
}

/// What a person is told when an agent's mailbox is full.
pub const BUSY: &str = "The agent has too many requests waiting; try again in a moment.";

/// Messages a mailbox holds at most. The last `RESERVED_FOR_THE_AGENT` places are kept for the
/// agent's own calls and commands reporting back, so that a flood of clicks can delay a cycle but
/// never lose its result.
pub const MAILBOX_CAPACITY: usize = 128;
const RESERVED_FOR_THE_AGENT: usize = 16;

impl DecideError {
    /// What a click on a card of `cycle` is told once the agent no longer waits on it: who
    /// decided it, when the store knows, else that it is no longer pending.
    pub fn late(store: &crate::store::Store, agent: &str, cycle: u64) -> DecideError {
        match store.decided_by(agent, cycle) {
            Ok(Some(by)) => DecideError::AlreadyDecided { by },
            _ => DecideError::NotPending,
        }
    }

    /// Whether trying the same decision again could succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, DecideError::Storage | DecideError::Busy)
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
    /// A file a person gives the agent, written between two of its messages (see `uploads`).
    Upload {
        upload: Upload,
        reply: oneshot::Sender<Result<(), UploadError>>,
    },
}

/// Why an event from outside was not taken.
#[derive(Debug)]
pub enum Refused {
    /// The mailbox is full (see `MAILBOX_CAPACITY`).
    Full(Event),
    /// The actor has stopped; the event comes back to be delivered to its successor.
    Stopped(Event),
}

/// The address of a live agent. Cloneable; everything outside the actor talks to it through this.
#[derive(Clone)]
pub struct AgentHandle {
    pub id: String,
    pub(super) tx: mpsc::Sender<ActorMsg>,
}

impl AgentHandle {
    /// The agent's own tasks report back here: they wait for room rather than lose a result.
    pub(super) async fn report(&self, msg: ActorMsg) {
        let _ = self.tx.send(msg).await;
    }

    /// The actor's own note to itself (its place is reserved), or a pacing notice, which may be
    /// dropped when the mailbox is full since the call it describes still reports back.
    pub(super) fn note(&self, event: Event) {
        if let Err(mpsc::error::TrySendError::Full(_)) =
            self.tx.try_send(ActorMsg::Event { event, reply: None })
        {
            tracing::warn!(agent = %self.id, "an agent's mailbox is full; a notice was dropped");
        }
    }

    /// Puts an event from outside in the mailbox, leaving the agent's reserved places free; a
    /// refusal gives the event back.
    fn admit(
        &self,
        event: Event,
        reply: Option<oneshot::Sender<Result<(), DecideError>>>,
    ) -> Result<(), Refused> {
        if self.tx.is_closed() {
            return Err(Refused::Stopped(event));
        }
        if self.tx.capacity() <= RESERVED_FOR_THE_AGENT {
            return Err(Refused::Full(event));
        }
        let event_of = |msg: ActorMsg| match msg {
            ActorMsg::Event { event, .. } => event,
            ActorMsg::Executed { .. } | ActorMsg::Upload { .. } => {
                unreachable!("only events are admitted")
            }
        };
        self.tx
            .try_send(ActorMsg::Event { event, reply })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(msg) => Refused::Full(event_of(msg)),
                mpsc::error::TrySendError::Closed(msg) => Refused::Stopped(event_of(msg)),
            })
    }

    /// An event from outside (a person, the supervisor): taken at once, or refused with the reason.
    pub fn offer(&self, event: Event) -> Result<(), Refused> {
        self.admit(event, None)
    }

    /// Puts a decision in the mailbox; the receiver answers whether it was applied, or why not
    /// (stale, already decided).
    pub fn ask_decision(
        &self,
        cycle: u64,
        decision: Decision,
        by: &Person,
    ) -> Result<oneshot::Receiver<Result<(), DecideError>>, DecideError> {
        let (reply, answer) = oneshot::channel();
        let event = Event::Decided {
            cycle,
            decision,
            by: by.clone(),
        };
        match self.admit(event, Some(reply)) {
            Ok(()) => Ok(answer),
            Err(Refused::Full(_)) => Err(DecideError::Busy),
            Err(Refused::Stopped(_)) => Err(DecideError::NotRunning),
        }
    }

    /// Puts an upload in the mailbox, leaving the agent's reserved places free; the receiver
    /// answers whether it was written.
    pub(super) fn offer_upload(
        &self,
        upload: Upload,
    ) -> Result<oneshot::Receiver<Result<(), UploadError>>, UploadError> {
        // A closed mailbox belongs to an actor that failed and has yet to leave the map.
        if self.tx.is_closed() || self.tx.capacity() <= RESERVED_FOR_THE_AGENT {
            return Err(UploadError::Busy);
        }
        let (reply, answer) = oneshot::channel();
        self.tx
            .try_send(ActorMsg::Upload { upload, reply })
            .map_err(|_| UploadError::Busy)?;
        Ok(answer)
    }

    /// Delivers a decision and waits for the answer.
    pub async fn decide(
        &self,
        cycle: u64,
        decision: Decision,
        by: &Person,
    ) -> Result<(), DecideError> {
        let answer = self.ask_decision(cycle, decision, by)?;
        answer.await.unwrap_or(Err(DecideError::NotRunning))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_mailbox_refuses_people_but_keeps_room_for_the_agent() {
        let (tx, mut rx) = mpsc::channel(MAILBOX_CAPACITY);
        let handle = AgentHandle { id: "a".into(), tx };
        let pause = || Event::Pause {
            by: Person::discord(1, "x"),
        };
        let taken = (0..MAILBOX_CAPACITY)
            .take_while(|_| handle.offer(pause()).is_ok())
            .count();
        assert_eq!(taken, MAILBOX_CAPACITY - RESERVED_FOR_THE_AGENT);
        assert!(matches!(handle.offer(pause()), Err(Refused::Full(_))));
        assert_eq!(
            handle
                .ask_decision(1, Decision::Approve, &Person::discord(1, "x"))
                .err(),
            Some(DecideError::Busy)
        );
        assert_eq!(DecideError::Busy.to_string(), BUSY);
        // The agent's own notes still fit.
        for _ in 0..RESERVED_FOR_THE_AGENT {
            handle.note(pause());
        }
        assert_eq!(handle.tx.capacity(), 0);
        // Once the actor has stopped, an event comes back to be delivered elsewhere.
        rx.close();
        while rx.try_recv().is_ok() {}
        assert!(matches!(handle.offer(pause()), Err(Refused::Stopped(_))));
    }
}
