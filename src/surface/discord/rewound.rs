//! What a rewind shows in its agent's thread besides its own notice: the pause that brings the
//! agent to rest is said to be for the rewind (which starts the agent again, so nobody is told to
//! resume it), and the card the rewind superseded is closed.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::{DiscordSurface, ShownCard};
use crate::core::state::{AgentState, PauseReason, Phase, Proposal};
use crate::locks::LockRecovered;
use crate::tools::preview::{preview, Preview};
use crate::tools::AgentFiles;

/// Agents being rewound, with the cycle each goes back to: one entry an agent, which its
/// `RewindMark` removes when the rewind ends, however it ends.
#[derive(Default)]
pub(super) struct Rewinds(Mutex<HashMap<String, u64>>);

impl Rewinds {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, u64>> {
        self.0.lock_recovered()
    }

    /// The cycle `agent` is being rewound to, while it is.
    pub(super) fn cycle_of(&self, agent: &str) -> Option<u64> {
        self.lock().get(agent).copied()
    }
}

/// Marks an agent as being rewound for as long as it lives.
pub(crate) struct RewindMark<'a> {
    rewinds: &'a Rewinds,
    agent: String,
}

impl Drop for RewindMark<'_> {
    fn drop(&mut self) {
        self.rewinds.lock().remove(&self.agent);
    }
}

/// The card an agent waited on before a rewind: its message, the proposal it shows, the change
/// it showed (read before the rewind puts the files back) and how it had ended, when a person
/// had already closed it.
pub(crate) struct PendingCard {
    agent: String,
    name: String,
    thread_id: u64,
    message_id: u64,
    proposal: Proposal,
    changes: Option<Preview>,
    ended: Option<String>,
}

impl DiscordSurface {
    /// Marks `agent` as being rewound to `cycle` until the mark is dropped: a pause meanwhile is
    /// the rewind's, and its notice does not ask for a resume.
    pub(crate) fn mark_rewind(&self, agent: &str, cycle: u64) -> RewindMark<'_> {
        self.rewinds.lock().insert(agent.to_string(), cycle);
        RewindMark {
            rewinds: &self.rewinds,
            agent: agent.to_string(),
        }
    }

    /// The card of `agent`'s pending proposal, as `agent` (a resting agent, about to be
    /// rewound) shows it; `None` when it waits on no card.
    pub(crate) fn pending_card(&self, agent: &AgentState) -> Option<PendingCard> {
        let proposal = agent.progress.pending.as_ref()?;
        let binding = self.binding(&agent.id)?;
        let card = binding.card.filter(|card| card.cycle == proposal.cycle)?;
        let files = AgentFiles::new(&self.store, &agent.id);
        // A denied card says who stopped the agent; closed again, it still says so.
        let ended = match &agent.progress.phase {
            Phase::Paused(PauseReason::Denied { by }) => {
                Some(format!("⛔ Denied (agent stopped) by {}.", by.name))
            }
            _ => None,
        };
        Some(PendingCard {
            agent: agent.id.clone(),
            name: agent.name().to_string(),
            thread_id: binding.thread_id,
            message_id: card.message_id,
            proposal: proposal.clone(),
            changes: preview(&proposal.command, &files),
            ended,
        })
    }

    /// Closes a card a rewind superseded: no buttons, and `why` under it.
    pub(crate) async fn close_superseded(&self, card: &PendingCard, why: &str) {
        let status = match &card.ended {
            Some(ended) => format!("{ended} {why}"),
            None => why.to_string(),
        };
        let shown = ShownCard {
            agent: &card.agent,
            name: &card.name,
            thread_id: card.thread_id,
            message_id: card.message_id,
            proposal: &card.proposal,
            changes: card.changes.as_ref(),
        };
        self.close_shown(shown, &status).await;
    }
}
