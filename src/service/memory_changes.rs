//! What a person does to one of an agent's memories (pin, unpin, forget), from any surface,
//! applied and recorded in the agent's audit trail, on disk before the person is told.

use super::AgentService;
use crate::core::audit::{AuditEntry, AuditEvent};
use crate::memory::{Memory, MemoryError};

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
    /// Applies `change` to memory `id` of `agent`, made by `by`, and records it in the trail.
    pub async fn change_memory(
        &self,
        memory: &Memory,
        agent: &str,
        id: u64,
        change: MemoryChange,
        by: &str,
    ) -> Result<(), MemoryError> {
        let event = match change {
            MemoryChange::Pin => {
                memory.pin(agent, id, true)?;
                AuditEvent::MemoryPinned { memory: id }
            }
            MemoryChange::Unpin => {
                memory.pin(agent, id, false)?;
                AuditEvent::MemoryUnpinned { memory: id }
            }
            MemoryChange::Forget => {
                let record = memory.forget(agent, id)?;
                AuditEvent::MemoryForgotten {
                    memory: id,
                    digest: crate::core::audit::text_digest(&record.text),
                }
            }
        };
        let entry = AuditEntry {
            at: self.clock.now(),
            by: by.to_string(),
            event,
        };
        // The change happened: a trail that cannot be written is logged, not reported as if
        // nothing changed.
        let recorded = match self.store.append_audit(agent, &entry) {
            Ok(()) => self.store.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = recorded {
            tracing::error!(%agent, memory = id, error = %e, "cannot record a memory change in the audit trail");
        }
        Ok(())
    }
}
