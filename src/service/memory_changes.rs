//! What a person does to memories from any surface: adds a note for an agent, its thread or its
//! server, and pins, unpins or forgets a memory. Each records who and when on the memory and, for
//! an agent's or its thread's memory, in the agent's audit trail; all on disk before the person is
//! told.
//!
//! `AgentService::change_memory` (`MemoryChange`: pin, unpin, forget, at a `MemoryPlace`) and
//! `add_memory_note` serve Discord's buttons and the command line alike. A server's memories carry
//! only their stamps, since no agent's trail is theirs. A trail entry or flush that fails is
//! logged: the change itself happened. A note whose agent was deleted while it was embedded is
//! removed again (`MemoryError::PlaceGone`).

use super::AgentService;
use crate::core::audit::{text_digest, AuditEntry, AuditEvent};
use crate::core::memory::MemoryScope;
use crate::core::person::Person;
use crate::memory::{Memory, MemoryError, MemoryPlace, MemoryRecord, Payer, Pin, Stamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryChange {
    Pin,
    Unpin,
    Forget,
}

impl MemoryChange {
    /// "Pinned", "Unpinned", "Forgot": what a surface tells the person.
    pub fn done(self) -> &'static str {
        match self {
            MemoryChange::Pin => "Pinned",
            MemoryChange::Unpin => "Unpinned",
            MemoryChange::Forget => "Forgot",
        }
    }
}

impl AgentService {
    /// Applies `change` to memory `id` kept at `place`, made by `by`.
    pub async fn change_memory(
        &self,
        memory: &Memory,
        place: &MemoryPlace,
        id: u64,
        change: MemoryChange,
        by: &Person,
    ) -> Result<MemoryRecord, MemoryError> {
        let stamp = Some(self.stamp(by));
        let (record, event) = match change {
            MemoryChange::Pin => (
                memory.pin_stamped(&place.key, id, Pin::On, stamp)?,
                AuditEvent::MemoryPinned { memory: id },
            ),
            MemoryChange::Unpin => (
                memory.pin_stamped(&place.key, id, Pin::Off, stamp)?,
                AuditEvent::MemoryUnpinned { memory: id },
            ),
            MemoryChange::Forget => {
                let record = memory.forget_stamped(&place.key, id, stamp)?;
                let digest = text_digest(&record.text);
                (record, AuditEvent::MemoryForgotten { memory: id, digest })
            }
        };
        self.record_memory_event(place, event, by).await;
        Ok(record)
    }

    /// Adds `text` as a note at `place` from `by`, embedded at `payer`'s expense.
    pub async fn add_memory_note(
        &self,
        memory: &Memory,
        payer: &Payer,
        place: &MemoryPlace,
        cycle: u64,
        text: &str,
        by: &Person,
    ) -> Result<MemoryRecord, MemoryError> {
        let record = memory.add_note(payer, place, cycle, text, by).await?;
        if !self.place_exists(place) {
            // The agent was deleted while the note was embedded: its memories were removed
            // before this one was stored, which nothing could reach or remove later.
            memory.remove_agent(&place.key)?;
            return Err(MemoryError::PlaceGone);
        }
        let event = AuditEvent::MemoryAdded {
            memory: record.id,
            scope: place.scope,
            digest: text_digest(&record.text),
        };
        self.record_memory_event(place, event, by).await;
        Ok(record)
    }

    /// Whether the agent or thread a place belongs to still exists (a server's always does).
    fn place_exists(&self, place: &MemoryPlace) -> bool {
        let found = match place.scope {
            MemoryScope::Agent => self
                .store
                .load_agent_record(&place.key)
                .map(|a| a.is_some()),
            MemoryScope::Thread => match place.thread_id() {
                Some(thread) => self.store.agent_for_thread(thread).map(|a| a.is_some()),
                None => Ok(false),
            },
            MemoryScope::Server => Ok(true),
        };
        // A store that cannot say keeps the note: a lost note is worse than an orphaned one.
        found.unwrap_or(true)
    }

    fn stamp(&self, by: &Person) -> Stamp {
        Stamp {
            by: by.clone(),
            at: self.clock.now(),
        }
    }

    /// Writes a memory change to the trail of the agent it concerns (a server's memories concern
    /// no one agent: their stamps say who and when) and flushes the store. The change happened:
    /// a trail that cannot be written is logged, not reported as if nothing changed.
    async fn record_memory_event(&self, place: &MemoryPlace, event: AuditEvent, by: &Person) {
        let agent = match place.scope {
            MemoryScope::Agent => Some(place.key.clone()),
            MemoryScope::Thread => place
                .thread_id()
                .and_then(|thread| self.store.agent_for_thread(thread).ok().flatten()),
            MemoryScope::Server => None,
        };
        let recorded = match agent {
            Some(agent) => {
                let entry = AuditEntry {
                    at: self.clock.now(),
                    by: by.into(),
                    event,
                };
                match self.store.append_audit(&agent, &entry) {
                    Ok(()) => self.store.flush().await,
                    Err(e) => Err(e),
                }
            }
            None => self.store.flush().await,
        };
        if let Err(e) = recorded {
            tracing::error!(place = %place.key, error = %e, "cannot record a memory change");
        }
    }
}
