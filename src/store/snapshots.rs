//! The workspace as it was after any recent cycle, for `/agent fork` and `/agent rewind`: every
//! change a cycle makes to a file first records what the file held before (an undo record per file
//! and cycle, in the `workspace_undo` tree, written with the change itself by `Store::commit`). The
//! workspace after cycle N is today's files with the undo records of every later cycle applied,
//! newest first (`workspace_at`).
//!
//! Undo records are kept for the last `SNAPSHOT_CYCLES` cycles, so what they hold is bounded by
//! that many cycles of an agent's writes; older ones are removed as new ones are written.
//!
//! `check_fork` says whether a cycle can be forked from or rewound to (`ForkRefusal`): it must have
//! closed and lie within what is kept, the window of undo records and the agent's own history
//! (`AgentState::history_from`: 0 for an agent started afresh, the fork cycle for a fork, and for
//! an agent stored before forks the cycle before its first undo record). `fork_agent` stores a new
//! agent with the source's steps up to the cycle (copied under keys of their own, folded or not,
//! then folded), the workspace as it was then and the fork's first audit entry, in one
//! `write_together`. `rewind_agent` writes a rewound agent's record with its later steps removed,
//! its files put back, the spent undo records removed and its `AuditEvent::Rewound` entry, also in
//! one write.

use std::collections::{BTreeMap, HashSet};

use super::ahead::{TreeId, Writes};
use super::{agent_prefix, cycle_key, encode, file_key, Store, StoreError, WorkspaceOp};
use crate::core::audit::AuditEntry;
use crate::core::history::Episode;
use crate::core::state::AgentState;

/// How many cycles back an agent can be forked from.
pub const SNAPSHOT_CYCLES: u64 = 50;

/// `agent/` + the cycle (8 bytes, big-endian, so keys sort by cycle) + the file's path.
fn undo_key(agent: &str, cycle: u64, path: &str) -> Vec<u8> {
    let mut key = agent_prefix(agent);
    key.extend_from_slice(&cycle.to_be_bytes());
    key.extend_from_slice(path.as_bytes());
    key
}

/// The first key after every undo record of `agent`, whatever its cycle.
fn undo_end(agent: &str) -> Vec<u8> {
    let mut end = agent_prefix(agent);
    end.extend_from_slice(&u64::MAX.to_be_bytes());
    end.push(0xff);
    end
}

/// An undo record's value: 0 when the file did not exist before, else 1 and its contents.
fn undo_value(before: Option<&[u8]>) -> Vec<u8> {
    match before {
        None => vec![0],
        Some(contents) => {
            let mut value = Vec::with_capacity(contents.len() + 1);
            value.push(1);
            value.extend_from_slice(contents);
            value
        }
    }
}

/// The cycle and path of an undo key, and the contents its value restores.
fn read_undo(
    agent: &str,
    key: &[u8],
    value: &[u8],
) -> Result<(u64, String, Option<Vec<u8>>), StoreError> {
    let corrupt = || StoreError::Corrupt(format!("an undo record of agent {agent} is malformed"));
    let rest = key.get(agent.len() + 1..).ok_or_else(corrupt)?;
    let (cycle, path) = rest.split_at_checked(8).ok_or_else(corrupt)?;
    let cycle = u64::from_be_bytes(cycle.try_into().map_err(|_| corrupt())?);
    let path = String::from_utf8(path.to_vec()).map_err(|_| corrupt())?;
    let contents = match value.split_first() {
        Some((0, _)) => None,
        Some((1, contents)) => Some(contents.to_vec()),
        _ => return Err(corrupt()),
    };
    Ok((cycle, path, contents))
}

/// Why an agent cannot be forked from a cycle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForkRefusal {
    #[error("cycle {asked} has not finished yet: the last finished cycle is {last}")]
    NotFinished { asked: u64, last: u64 },
    #[error("its files are kept from cycle {oldest} on: choose cycle {oldest} or later")]
    TooOld { oldest: u64 },
}

impl Store {
    /// Adds to `writes` the undo records of a cycle's workspace changes (the first change of each
    /// file in the cycle only: that one holds what the file was before the cycle), and removes
    /// the records that fell out of the kept window.
    pub(super) fn record_undo(
        &self,
        writes: &mut Writes,
        agent: &str,
        cycle: u64,
        ops: &[WorkspaceOp],
    ) -> Result<(), StoreError> {
        let mut seen = HashSet::new();
        for op in ops {
            let path = match op {
                WorkspaceOp::Put { path, .. } | WorkspaceOp::Delete { path } => path,
            };
            let key = undo_key(agent, cycle, path);
            if !seen.insert(path) || self.workspace_undo.contains_key(&key)? {
                continue;
            }
            let before = self.read_file(agent, path)?;
            writes.put(TreeId::WorkspaceUndo, key, undo_value(before.as_deref()));
        }
        if let Some(oldest_kept) = cycle.checked_sub(SNAPSHOT_CYCLES) {
            let start = agent_prefix(agent);
            let end = undo_key(agent, oldest_kept, "");
            for key in self.workspace_undo.range(start..end).keys() {
                writes.remove(TreeId::WorkspaceUndo, key?.to_vec());
            }
        }
        Ok(())
    }

    /// The agent's files as they were when `cycle` closed.
    pub fn workspace_at(
        &self,
        agent: &str,
        cycle: u64,
    ) -> Result<BTreeMap<String, Vec<u8>>, StoreError> {
        let prefix = agent_prefix(agent);
        let mut files = BTreeMap::new();
        for item in self.workspace.scan_prefix(&prefix) {
            let (key, contents) = item?;
            let path = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            files.insert(path, self.file_contents(&contents)?);
        }
        let later = undo_key(agent, cycle.saturating_add(1), "");
        for item in self.workspace_undo.range(later..undo_end(agent)).rev() {
            let (key, value) = item?;
            let (_, path, before) = read_undo(agent, &key, &self.file_contents(&value)?)?;
            match before {
                Some(contents) => files.insert(path, contents),
                None => files.remove(&path),
            };
        }
        Ok(files)
    }

    /// Whether `source` can be forked from `cycle`: the cycle has closed, and its workspace is
    /// still kept.
    pub fn check_fork(&self, source: &AgentState, cycle: u64) -> Result<(), ForkRefusal> {
        let last = source.last_episode().map_or(0, |e| e.cycle);
        if cycle > last {
            return Err(ForkRefusal::NotFinished { asked: cycle, last });
        }
        // Undo records cover the agent's own cycles only (a fork has none from before it began;
        // an agent stored before forks, none from before its first change since).
        let own_from = match source.progress.history_from {
            Some(from) => from,
            None => match self.first_undo_cycle(&source.id) {
                Ok(Some(first)) => first.saturating_sub(1),
                _ => last,
            },
        };
        let oldest = source
            .progress
            .cycle
            .saturating_sub(SNAPSHOT_CYCLES)
            .max(own_from);
        if cycle < oldest {
            return Err(ForkRefusal::TooOld { oldest });
        }
        Ok(())
    }

    /// Stores a new agent `fork` as `source` was when `cycle` closed: its record, the steps up to
    /// that cycle and the workspace as it was then, with `audit` on its trail, all together.
    /// Memories are the memory service's to copy.
    pub fn fork_agent(
        &self,
        source: &str,
        cycle: u64,
        fork: &AgentState,
        audit: &AuditEntry,
    ) -> Result<(), StoreError> {
        let mut writes = Writes::default();
        self.put_agent(&mut writes, fork)?;
        for step in self.steps_in::<Episode>(source, 0, cycle)? {
            writes.put(
                TreeId::Episodes,
                cycle_key(&fork.id, step.cycle),
                encode(&step)?,
            );
        }
        for (path, contents) in self.workspace_at(source, cycle)? {
            writes.put(TreeId::Workspace, file_key(&fork.id, &path), contents);
        }
        {
            let _held = self.audit_lock(&fork.id);
            for key in self.new_audit_keys(&fork.id, 1)? {
                writes.put(TreeId::Audit, key, encode(audit)?);
            }
            self.write_together(&writes)?;
        }
        self.fold_copied_steps(&fork.id);
        Ok(())
    }

    /// Rewinds `agent` in place to how it was when `cycle` closed: `state` becomes its record,
    /// the steps after that cycle are removed, its files are put back as they were (and the undo
    /// records of the later cycles, now spent, removed), and the entry `audit` makes of the number
    /// of steps undone joins its trail, all together. The journal and decisions of the later cycles stay: the agent's cycle numbers
    /// go on past them (see `AgentService::rewind`), so no old card or record can meet a new
    /// step. Returns how many steps were removed.
    pub fn rewind_agent(
        &self,
        cycle: u64,
        state: &AgentState,
        audit: impl FnOnce(usize) -> AuditEntry,
    ) -> Result<usize, StoreError> {
        let agent = &state.id;
        let mut writes = Writes::default();
        self.put_agent(&mut writes, state)?;
        let removed = self.remove_steps_after(agent, cycle, &mut writes)?;
        let then = self.workspace_at(agent, cycle)?;
        let prefix = agent_prefix(agent);
        for key in self.workspace.scan_prefix(&prefix).keys() {
            let key = key?;
            let path = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            if !then.contains_key(&path) {
                writes.remove(TreeId::Workspace, key.to_vec());
            }
        }
        for (path, contents) in &then {
            let key = file_key(agent, path);
            if self.read_file(agent, path)?.as_ref() != Some(contents) {
                writes.put(TreeId::Workspace, key, contents.clone());
            }
        }
        for key in self
            .workspace_undo
            .range(undo_key(agent, cycle.saturating_add(1), "")..undo_end(agent))
            .keys()
        {
            writes.remove(TreeId::WorkspaceUndo, key?.to_vec());
        }
        let audit = audit(removed);
        let _held = self.audit_lock(agent);
        for key in self.new_audit_keys(agent, 1)? {
            writes.put(TreeId::Audit, key, encode(&audit)?);
        }
        self.write_together(&writes)?;
        Ok(removed)
    }

    /// The first cycle with an undo record of `agent`, if any.
    fn first_undo_cycle(&self, agent: &str) -> Result<Option<u64>, StoreError> {
        match self.workspace_undo.scan_prefix(agent_prefix(agent)).next() {
            Some(item) => {
                let (key, value) = item?;
                Ok(Some(
                    read_undo(agent, &key, &self.file_contents(&value)?)?.0,
                ))
            }
            None => Ok(None),
        }
    }

    /// Removes an agent's undo records (the agent is deleted).
    pub(super) fn remove_undo(&self, agent: &str) -> Result<(), StoreError> {
        for key in self.workspace_undo.scan_prefix(agent_prefix(agent)).keys() {
            self.workspace_undo.remove(key?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::audit::AuditEvent;
    use crate::core::history::{Episode, Outcome};
    use crate::store::kv::Backend;
    use crate::store::test_backends::{on_both_backends, TestStore};
    use crate::store::Commit;

    fn put(path: &str, contents: &str) -> WorkspaceOp {
        WorkspaceOp::Put {
            path: path.into(),
            contents: contents.as_bytes().to_vec(),
        }
    }

    /// Closes `cycle` of `agent` with its step and the workspace changes its command made.
    fn close_cycle(store: &Store, agent: &mut AgentState, cycle: u64, ops: Vec<WorkspaceOp>) {
        agent.record_episode(Episode {
            cycle,
            command: Default::default(),
            reasoning: String::new(),
            outcome: Outcome::Success("ok".into()),
            summary: None,
            decided_by: None,
            edited_by: Vec::new(),
            cost: Default::default(),
        });
        agent.progress.cycle = cycle + 1;
        let episode = agent.last_episode().unwrap().clone();
        store
            .commit(&Commit {
                state: Some(agent),
                episodes: vec![&episode],
                finished_command: Some(cycle),
                workspace: ops,
                ..Default::default()
            })
            .unwrap();
    }

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
            .collect()
    }

    fn the_workspace_after_each_cycle_is_read_back_and_a_fork_copies_it_leaving_the_source(
        backend: Backend,
    ) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        let mut agent = AgentState::for_test("src1");
        close_cycle(&store, &mut agent, 1, vec![put("a.txt", "1")]);
        close_cycle(
            &store,
            &mut agent,
            2,
            vec![put("a.txt", "2"), put("b.txt", "b")],
        );
        close_cycle(
            &store,
            &mut agent,
            3,
            vec![
                WorkspaceOp::Delete {
                    path: "b.txt".into(),
                },
                put("a.txt", "3"),
                put("a.txt", "3b"),
            ],
        );
        close_cycle(&store, &mut agent, 4, vec![put("c.txt", "c")]);
        assert_eq!(store.workspace_at("src1", 0).unwrap(), files(&[]));
        assert_eq!(
            store.workspace_at("src1", 1).unwrap(),
            files(&[("a.txt", "1")])
        );
        assert_eq!(
            store.workspace_at("src1", 2).unwrap(),
            files(&[("a.txt", "2"), ("b.txt", "b")])
        );
        assert_eq!(
            store.workspace_at("src1", 3).unwrap(),
            files(&[("a.txt", "3b")])
        );
        assert_eq!(
            store.workspace_at("src1", 4).unwrap(),
            files(&[("a.txt", "3b"), ("c.txt", "c")])
        );

        let mut fork = AgentState::for_test("fork1");
        fork.progress.cycle = 3;
        fork.progress.history_from = Some(2);
        let audit = AuditEntry {
            at: fork.created_at,
            by: "alice".into(),
            event: AuditEvent::Resumed,
        };
        store.fork_agent("src1", 2, &fork, &audit).unwrap();
        drop(store);
        let store = test.open();
        let forked = store.load_agent("fork1").unwrap().unwrap();
        let cycles: Vec<u64> = forked.progress.episodes.iter().map(|e| e.cycle).collect();
        assert_eq!((cycles, forked.progress.cycle), (vec![1, 2], 3));
        assert_eq!(
            store.list_files("fork1").unwrap(),
            [("a.txt".to_string(), 1), ("b.txt".to_string(), 1)]
        );
        assert_eq!(store.audit_page("fork1", 0, 10).unwrap().entries.len(), 1);
        // The source is as it was.
        assert_eq!(
            store
                .load_agent("src1")
                .unwrap()
                .unwrap()
                .progress
                .episodes
                .len(),
            4
        );
        assert_eq!(
            store.workspace_at("src1", 4).unwrap(),
            files(&[("a.txt", "3b"), ("c.txt", "c")])
        );
        // A fork has no workspace from before it began: going further back is refused.
        assert_eq!(forked.progress.history_from, Some(2));
        assert_eq!(
            store.check_fork(&forked, 1),
            Err(ForkRefusal::TooOld { oldest: 2 })
        );
        assert_eq!(store.check_fork(&forked, 2), Ok(()));
        // An agent stored before forks is read back only from its first recorded change on.
        let mut older = store.load_agent("src1").unwrap().unwrap();
        older.progress.history_from = None;
        assert_eq!(store.check_fork(&older, 0), Ok(()));
        let mut unrecorded = AgentState::for_test("old1");
        unrecorded.progress.history_from = None;
        close_cycle(&store, &mut unrecorded, 1, Vec::new());
        close_cycle(&store, &mut unrecorded, 2, Vec::new());
        assert_eq!(
            store.check_fork(&unrecorded, 1),
            Err(ForkRefusal::TooOld { oldest: 2 })
        );
        // The fork's own later changes do not touch the source's history.
        let mut forked = forked;
        close_cycle(&store, &mut forked, 3, vec![put("a.txt", "fork")]);
        assert_eq!(
            store.workspace_at("src1", 2).unwrap(),
            files(&[("a.txt", "2"), ("b.txt", "b")])
        );
        assert_eq!(
            store.workspace_at("fork1", 2).unwrap(),
            files(&[("a.txt", "2"), ("b.txt", "b")])
        );
    }

    fn undo_records_are_kept_for_the_last_cycles_only_and_a_fork_beyond_them_is_refused(
        backend: Backend,
    ) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        let mut agent = AgentState::for_test("long");
        let last = SNAPSHOT_CYCLES + 20;
        for cycle in 1..=last {
            close_cycle(
                &store,
                &mut agent,
                cycle,
                vec![put("log.txt", &cycle.to_string())],
            );
        }
        // One record per cycle, for the kept window only.
        let kept = store
            .workspace_undo
            .scan_prefix(agent_prefix("long"))
            .count() as u64;
        assert_eq!(kept, SNAPSHOT_CYCLES + 1);
        let oldest = agent.progress.cycle - SNAPSHOT_CYCLES;
        assert_eq!(store.check_fork(&agent, oldest), Ok(()));
        assert_eq!(
            store.workspace_at("long", oldest).unwrap(),
            files(&[("log.txt", &oldest.to_string())])
        );
        assert_eq!(
            store.check_fork(&agent, oldest - 1),
            Err(ForkRefusal::TooOld { oldest })
        );
        assert_eq!(
            store.check_fork(&agent, last + 1),
            Err(ForkRefusal::NotFinished {
                asked: last + 1,
                last
            })
        );
        store.delete_agent("long").unwrap();
        assert_eq!(
            store
                .workspace_undo
                .scan_prefix(agent_prefix("long"))
                .count(),
            0
        );
    }

    on_both_backends!(
        the_workspace_after_each_cycle_is_read_back_and_a_fork_copies_it_leaving_the_source,
        undo_records_are_kept_for_the_last_cycles_only_and_a_fork_beyond_them_is_refused,
    );
}
