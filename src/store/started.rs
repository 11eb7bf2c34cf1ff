//! A command a person just approved, stored as its journal record alone: the agent's record keeps
//! the proposal as it was stored when shown, and readers see the agent executing while the journal
//! says its command is under way.
//!
//! Why: a Discord cycle wrote the agent's record three times (the proposal shown, the command
//! started, the result), and each write of a record logs it whole and, every few writes, the B-tree
//! leaf it shares with fifteen others. An approval changes only what a restart sets anew when it
//! finds the command interrupted (who approved, the approvals counted, Approve ×N's count, the
//! card's deadline, the phase), so the journal record, which must be on disk before the command
//! starts anyway, can stand for it. Which steps are stored this way is decided with every other
//! way of storing a step, in `runtime::storage_plan` (`StoragePlan::StartAlone`).
//!
//! The journal record names the agent's record it stands beside by its digest (length and CRC-32,
//! as `ahead`'s anchors do): any later write of the agent's record (the result, the proposal shown
//! again as interrupted, a stale file's card, a rethink) leaves the entry stale, so only the start
//! of the proposal the record shows reads as one, whatever the clock does.
//!
//! `Store::record_start` writes the journal entry and the approval's trail entries in one write,
//! and folds the trail when due as `commit` does, since the approval's entry is often the only one
//! a hand-approved cycle adds. `with_started_command`, applied by `decode_agent`, reads an agent
//! stored awaiting a decision on its cycle's proposal, whose journal holds an `executing` entry for
//! that cycle naming this very record (`JournalEntry::Executing::on_record`), as executing,
//! approved by whoever the decision's record names.

use chrono::{DateTime, Utc};

use super::ahead::{digest, TreeId, Writes};
use super::{cycle_key, encode, JournalEntry, Store, StoreError};
use crate::core::audit::AuditEntry;
use crate::core::reply::CommandCall;
use crate::core::state::{AgentState, Phase};

impl Store {
    /// Records that `agent`'s approved command of `cycle` starts at `at`, with the trail entries
    /// of the approval, in one write and without the agent's record; the caller flushes before
    /// the command starts. Only the agent's actor writes its record, so the one read here is the
    /// one the entry stands beside.
    pub fn record_start(
        &self,
        agent: &str,
        cycle: u64,
        call: &CommandCall,
        at: DateTime<Utc>,
        audit: &[&AuditEntry],
    ) -> Result<(), StoreError> {
        self.record_start_with(agent, cycle, call, at, audit, None)
    }

    /// `record_start`, with the write fenced by the agent's lease when `fence` is given.
    pub(super) fn record_start_with(
        &self,
        agent: &str,
        cycle: u64,
        call: &CommandCall,
        at: DateTime<Utc>,
        audit: &[&AuditEntry],
        fence: Option<super::Fence>,
    ) -> Result<(), StoreError> {
        let on_record = self.agents.get(agent.as_bytes())?.map(|raw| digest(&raw));
        let mut writes = Writes::default();
        writes.put(
            TreeId::Journal,
            cycle_key(agent, cycle),
            encode(&JournalEntry::executing(call, at, on_record))?,
        );
        let audit_held = self.put_audit(&mut writes, agent, audit)?;
        self.write_together_fenced(&writes, agent, fence)?;
        drop(audit_held);
        // The approval's entry is often the only one a hand-approved cycle adds.
        self.fold_when_due(
            agent,
            cycle,
            super::Folds {
                audit: !audit.is_empty(),
                steps: false,
            },
            fence,
        );
        Ok(())
    }

    /// Shows `state`, stored as `raw`, executing when the journal holds a start of the proposal
    /// it awaits a decision on, stored beside this very record (`record_start`).
    pub(super) fn with_started_command(
        &self,
        state: &mut AgentState,
        raw: &[u8],
    ) -> Result<(), StoreError> {
        if state.progress.phase != Phase::AwaitingDecision {
            return Ok(());
        }
        if state.pending_cycle() != Some(state.progress.cycle) {
            return Ok(());
        }
        let started = match self.journal_entry(&state.id, state.progress.cycle)? {
            Some(JournalEntry::Executing { on_record, .. }) => on_record == Some(digest(raw)),
            _ => false,
        };
        if started {
            let approved_by = self.decided_by(&state.id, state.progress.cycle)?;
            state.start_pending_command(approved_by);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::audit::{AuditEvent, ShownCommand};
    use crate::core::decision::Decision;
    use crate::store::kv::Backend;
    use crate::store::test_backends::{on_both_backends, TestStore};
    use crate::store::{Commit, DecisionRecord};

    fn awaiting(id: &str) -> AgentState {
        let mut state = AgentState::for_test(id);
        state.progress.cycle = 3;
        state.progress.phase = Phase::AwaitingDecision;
        state.progress.pending = Some(
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

    fn store_with(state: &AgentState, backend: Backend) -> Option<(TestStore, Store)> {
        let test = TestStore::on(backend)?;
        let store = test.open();
        store
            .commit(&Commit {
                state: Some(state),
                ..Default::default()
            })
            .unwrap();
        Some((test, store))
    }

    fn approve(store: &Store, state: &AgentState) {
        let decision = DecisionRecord {
            decision: Decision::Approve,
            by: "alice".into(),
            at: state.updated_at,
        };
        store
            .record_decision(&state.id, 3, &decision)
            .unwrap()
            .unwrap();
        let pending = state.progress.pending.as_ref().unwrap();
        let shown = ShownCommand::of(&pending.command, pending.revision);
        let entry = AuditEntry {
            at: state.updated_at,
            by: "alice".into(),
            event: AuditEvent::decided(3, &Decision::Approve, shown, Vec::new()),
        };
        store
            .record_start(&state.id, 3, &pending.command, state.updated_at, &[&entry])
            .unwrap();
    }

    fn an_approved_command_whose_start_is_journaled_reads_as_executing(backend: Backend) {
        let state = awaiting("a1");
        let Some((_dir, store)) = store_with(&state, backend) else {
            return;
        };
        let agents_before = store.agents.get("a1").unwrap();
        approve(&store, &state);
        // The agent's record is as it was; the journal and the trail took the approval.
        assert_eq!(store.agents.get("a1").unwrap(), agents_before);
        assert_eq!(store.audit_trail("a1").unwrap().len(), 1);
        let loaded = store.load_agent("a1").unwrap().unwrap();
        assert_eq!(loaded.progress.phase, Phase::Executing);
        let pending = loaded.progress.pending.as_ref().unwrap();
        assert_eq!(
            pending.approved_by.as_ref().map(|by| by.names()).as_deref(),
            Some("alice")
        );
        assert_eq!(pending.deadline, None);
        let listed = store.list_agents().unwrap();
        assert_eq!(listed[0].phase, Phase::Executing.label());
        // A restart finds the command under way, as when the record said so itself.
        assert!(crate::runtime::was_interrupted(&store, &loaded).unwrap());
    }

    fn any_later_write_of_the_record_leaves_the_start_stale(backend: Backend) {
        let shown_again_ways: [fn(&mut AgentState); 2] = [
            // Shown again as interrupted after a restart.
            |state| state.progress.pending.as_mut().unwrap().interrupted = true,
            // Shown again unchanged but for the time (a stale file's card), or rethought.
            |state| state.updated_at += chrono::Duration::seconds(1),
        ];
        for shown_again in shown_again_ways {
            let state = awaiting("a2");
            let Some((_dir, store)) = store_with(&state, backend) else {
                return;
            };
            approve(&store, &state);
            let mut again = store.load_agent("a2").unwrap().unwrap();
            again.progress.phase = Phase::AwaitingDecision;
            shown_again(&mut again);
            store
                .commit(&Commit {
                    state: Some(&again),
                    ..Default::default()
                })
                .unwrap();
            let loaded = store.load_agent("a2").unwrap().unwrap();
            assert_eq!(loaded.progress.phase, Phase::AwaitingDecision);
            assert!(!crate::runtime::was_interrupted(&store, &loaded).unwrap());
        }
    }

    fn approvals_stored_on_their_own_are_folded_like_any_trail_entries(backend: Backend) {
        let state = awaiting("a4");
        let Some((_dir, store)) = store_with(&state, backend) else {
            return;
        };
        let call = &state.progress.pending.as_ref().unwrap().command;
        let entry = AuditEntry {
            at: state.updated_at,
            by: "alice".into(),
            event: AuditEvent::PauseRequested,
        };
        for cycle in 1..=80 {
            store
                .record_start("a4", cycle, call, state.updated_at, &[&entry])
                .unwrap();
        }
        assert_eq!(store.audit_trail("a4").unwrap().len(), 80);
        assert!(!store.audit_chunks.is_empty(), "no chunk was folded");
        assert!(
            store.audit.len() < 80,
            "{} entries kept alone",
            store.audit.len()
        );
    }

    fn an_entry_written_with_the_record_is_not_a_start_without_it(backend: Backend) {
        // Entries written before `record_start` (and by `record_executing`) name no record.
        let state = awaiting("a3");
        let Some((_dir, store)) = store_with(&state, backend) else {
            return;
        };
        let call = &state.progress.pending.as_ref().unwrap().command;
        store
            .record_executing("a3", 3, call, state.updated_at)
            .unwrap();
        let loaded = store.load_agent("a3").unwrap().unwrap();
        assert_eq!(loaded.progress.phase, Phase::AwaitingDecision);
    }

    on_both_backends!(
        an_approved_command_whose_start_is_journaled_reads_as_executing,
        any_later_write_of_the_record_leaves_the_start_stale,
        approvals_stored_on_their_own_are_folded_like_any_trail_entries,
        an_entry_written_with_the_record_is_not_a_start_without_it,
    );
}
