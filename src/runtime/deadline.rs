//! The timer behind a card's deadline: when a card that waits for a decision has one, a task on the
//! clock seam sleeps until then and reports `Event::DeadlinePassed`; the core decides whether it
//! still applies. A card shown again after a restart sets its timer again (at once when its
//! deadline passed while the bot was down).
//!
//! `Actor::arm_deadline` starts one task per card deadline (once per cycle and time), outside the
//! actor's own tasks so that a parked agent's actor need not wait for it; the task offers the event
//! to the agent's handle.

use super::handle::ActorMsg;
use super::Actor;
use crate::core::event::Event;
use crate::core::state::Proposal;

/// The one timer an actor keeps for its card's deadline: dropped (a new deadline, or the actor
/// stopping), it stops, so sleeping timers never outnumber actors.
pub(super) struct DeadlineTimer(tokio::task::AbortHandle);

impl Drop for DeadlineTimer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Actor {
    pub(super) fn arm_deadline(&mut self, proposal: &Proposal) {
        let Some(deadline) = proposal.deadline else {
            return;
        };
        let key = (proposal.cycle, deadline.at);
        if self.armed_deadline == Some(key) {
            return;
        }
        self.armed_deadline = Some(key);
        let wait = (deadline.at - self.deps.clock.now())
            .to_std()
            .unwrap_or_default();
        let sleep = self.deps.clock.sleep(wait);
        let handle = self.handle.clone();
        let cycle = proposal.cycle;
        // Not one of the actor's tasks, which it waits for before it stops: a parked agent's
        // actor stops at once, and its timer with it. The report waits for room in the mailbox.
        let timer = self.deps.runtime.spawn(async move {
            sleep.await;
            handle
                .report(ActorMsg::Event {
                    event: Event::DeadlinePassed { cycle },
                    reply: None,
                })
                .await;
        });
        self.deadline_timer = Some(DeadlineTimer(timer.abort_handle()));
    }
}
