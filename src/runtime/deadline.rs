//! The timer behind a card's deadline: when a card that waits for a decision has one, a task on
//! the clock seam sleeps until then and reports `Event::DeadlinePassed`; the core decides whether
//! it still applies. A card shown again after a restart sets its timer again (at once when its
//! deadline passed while the bot was down).

use super::Actor;
use crate::core::event::Event;
use crate::core::state::Proposal;

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
        // Not one of the actor's tasks: a parked agent's actor stops without waiting for it, and
        // a timer that finds no actor has nothing to expire.
        self.deps.runtime.spawn(async move {
            sleep.await;
            if let Err(refused) = handle.offer(Event::DeadlinePassed { cycle }) {
                tracing::debug!(agent = %handle.id, ?refused, "a card's deadline found no actor");
            }
        });
    }
}
