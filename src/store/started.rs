//! A command a person just approved, stored as its journal record alone: the agent's record keeps
//! the proposal as it was stored when shown, and readers see the agent executing while the
//! journal says its command is under way.
//!
//! Why: a Discord cycle wrote the agent's record three times (the proposal shown, the command
//! started, the result), and each write of a record logs it whole and, every few writes, the
//! B-tree leaf it shares with fifteen others. An approval changes only what a restart sets anew
//! when it finds the command interrupted (who approved, the approvals counted, Approve ×N's
//! count, the phase: see `Effect::Execute::only_approved`), so the journal record, which must be
//! on disk before the command starts anyway, can stand for it. A 300-agent run wrote 19% fewer
//! bytes to sled's log (see the README's store figures).

use chrono::{DateTime, Utc};

use super::ahead::{TreeId, Writes};
use super::{cycle_key, encode, JournalEntry, Store, StoreError};
use crate::core::audit::AuditEntry;
use crate::core::reply::CommandCall;
use crate::core::state::{AgentState, Phase};

impl Store {
    /// Records that `agent`'s approved command of `cycle` starts at `at`, with the trail entries
    /// of the approval, in one write and without the agent's record; the caller flushes before
    /// the command starts.
    pub fn record_start(
        &self,
        agent: &str,
        cycle: u64,
        call: &CommandCall,
        at: DateTime<Utc>,
        audit: &[&AuditEntry],
    ) -> Result<(), StoreError> {
        let mut writes = Writes::default();
        writes.put(
            TreeId::Journal,
            cycle_key(agent, cycle),
            encode(&JournalEntry::executing(call, at))?,
        );
        let audit_held = (!audit.is_empty()).then(|| self.audit_lock(agent));
        for (key, entry) in self
            .new_audit_keys(agent, audit.len())?
            .into_iter()
            .zip(audit)
        {
            writes.put(TreeId::Audit, key, encode(*entry)?);
        }
        self.write_together(&writes)?;
        drop(audit_held);
        Ok(())
    }

    /// Shows `state`, as its record was stored, executing when the journal says that the command
    /// of the proposal it awaits a decision on has started since (`record_start`). A proposal
    /// marked interrupted has had its journal record removed (`Commit::interrupted_command`);
    /// the time check keeps a record left by an older version, from before the proposal was
    /// stored, from being taken for a start.
    pub(super) fn with_started_command(&self, state: &mut AgentState) -> Result<(), StoreError> {
        if state.phase != Phase::AwaitingDecision {
            return Ok(());
        }
        let Some(pending) = state
            .pending
            .as_mut()
            .filter(|pending| pending.cycle == state.cycle && !pending.interrupted)
        else {
            return Ok(());
        };
        let started = match self.journal_entry(&state.id, state.cycle)? {
            Some(JournalEntry::Executing { started_at, .. }) => started_at >= state.updated_at,
            _ => false,
        };
        if started {
            pending.approved_by = self.decided_by(&state.id, state.cycle)?;
            pending.deadline = None;
            state.phase = Phase::Executing;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::audit::AuditEvent;
    use crate::store::{Commit, DecisionRecord};

    fn awaiting(id: &str) -> AgentState {
        let mut state = AgentState::for_test(id);
        state.cycle = 3;
        state.phase = Phase::AwaitingDecision;
        state.pending = Some(
            serde_json::from_value(serde_json::json!({
                "cycle": 3,
                "thoughts": {"text": "write it down"},
                "command": {"name": "write_file", "args": {"filename": "a.txt", "contents": "x"}},
                "risk": "write",
                "interrupted": false,
                "approved_by": null,
            }))
            .unwrap(),
        );
        state
    }

    fn store_with(state: &AgentState) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store
            .commit(&Commit {
                state: Some(state),
                ..Default::default()
            })
            .unwrap();
        (dir, store)
    }

    fn approve(store: &Store, state: &AgentState) {
        let decision = DecisionRecord {
            decision: crate::core::event::Decision::Approve,
            by: "alice".into(),
            at: state.updated_at,
        };
        store
            .record_decision(&state.id, 3, &decision)
            .unwrap()
            .unwrap();
        let entry = AuditEntry {
            at: state.updated_at,
            by: "alice".into(),
            event: AuditEvent::PauseRequested,
        };
        let call = &state.pending.as_ref().unwrap().command;
        store
            .record_start(&state.id, 3, call, state.updated_at, &[&entry])
            .unwrap();
    }

    #[test]
    fn an_approved_command_whose_start_is_journaled_reads_as_executing() {
        let state = awaiting("a1");
        let (_dir, store) = store_with(&state);
        let agents_before = store.agents.get("a1").unwrap();
        approve(&store, &state);
        // The agent's record is as it was; the journal and the trail took the approval.
        assert_eq!(store.agents.get("a1").unwrap(), agents_before);
        assert_eq!(store.audit_trail("a1").unwrap().len(), 1);
        let loaded = store.load_agent("a1").unwrap().unwrap();
        assert_eq!(loaded.phase, Phase::Executing);
        let pending = loaded.pending.as_ref().unwrap();
        assert_eq!(pending.approved_by.as_deref(), Some("alice"));
        assert_eq!(pending.deadline, None);
        let listed = store.list_agents().unwrap();
        assert_eq!(listed[0].phase, Phase::Executing.label());
        // A restart finds the command under way, as when the record said so itself.
        assert!(crate::runtime::was_interrupted(&store, &loaded).unwrap());
    }

    #[test]
    fn a_proposal_shown_again_as_interrupted_drops_the_start_and_awaits_a_decision() {
        let state = awaiting("a2");
        let (_dir, store) = store_with(&state);
        approve(&store, &state);
        let mut shown_again = store.load_agent("a2").unwrap().unwrap();
        shown_again.phase = Phase::AwaitingDecision;
        shown_again.pending.as_mut().unwrap().interrupted = true;
        store
            .commit(&Commit {
                state: Some(&shown_again),
                interrupted_command: Some(3),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(store.journal_entry("a2", 3).unwrap(), None);
        // Asked again and rethought, the cycle's new proposal is not taken for a started one.
        let mut rethought = shown_again.clone();
        rethought.pending.as_mut().unwrap().interrupted = false;
        store
            .commit(&Commit {
                state: Some(&rethought),
                ..Default::default()
            })
            .unwrap();
        let loaded = store.load_agent("a2").unwrap().unwrap();
        assert_eq!(loaded.phase, Phase::AwaitingDecision);
    }

    #[test]
    fn a_journal_record_older_than_the_stored_proposal_is_not_a_start() {
        let state = awaiting("a3");
        let (_dir, store) = store_with(&state);
        let call = &state.pending.as_ref().unwrap().command;
        let before = state.updated_at - chrono::Duration::seconds(5);
        store.record_executing("a3", 3, call, before).unwrap();
        let loaded = store.load_agent("a3").unwrap().unwrap();
        assert_eq!(loaded.phase, Phase::AwaitingDecision);
    }
}
