//! An agent's record kept under two keys: what changes as it cycles (the `agents` tree) and its
//! brief, what it was given and rarely changes (the `agent_briefs` tree: task, follow-ups, profile,
//! settings, who pays, where its history starts, when it was made). Its own approval rules stay in
//! the record: each use of one counts in it.
//!
//! Why: a cycle wrote the record three times (twice since `started`), and the brief was most of it
//! (a generated profile and the model's settings run to hundreds of bytes, the state that changes
//! to a few dozen fields). sled logs each write whole, and rewrites the pages that hold it, so
//! every byte of a record written several times a cycle cost several on disk. The brief is written
//! only when it changes; a record stored before the split holds both parts and is read as it is.
//!
//! `put_agent` writes the brief only when it differs from the stored one, and writes an agent's
//! first record whole, so a reader between the two writes never finds a record without a brief.
//! `decode_agent` merges the two parts back through JSON text (so no `f32` is widened on the way)
//! and answers `None` for a record whose agent was deleted after it was read. The record is the
//! anchor of its set of writes (see `ahead`), so a crash between the two writes finishes the brief
//! when the store is opened.

use serde_json::{Map, Value};

use super::ahead::{TreeId, Writes};
use super::{packed, Record, Store, StoreError, RECORD_VERSION};
use crate::core::state::AgentState;

/// The fields of `AgentState` kept in its brief. A field not named here is in the record.
const BRIEF_FIELDS: [&str; 7] = [
    "task",
    "follow_ups",
    "profile",
    "settings",
    "spender",
    "history_from",
    "created_at",
];

/// The field whose presence in a record says that it holds its brief too (stored before the
/// split, or written whole by a test).
const WHOLE_RECORD_MARK: &str = "task";

/// `state` as its record and its brief, both as the JSON of a stored `Record` (not yet packed).
fn split(state: &AgentState) -> Result<(Vec<u8>, Vec<u8>), StoreError> {
    // Through JSON text rather than `to_value`, which would widen each `f32` (a recalled
    // memory's score) to an `f64` written out with twice the digits.
    let mut record: Map<String, Value> = serde_json::from_slice(&serde_json::to_vec(state)?)?;
    let brief: Map<String, Value> = BRIEF_FIELDS
        .iter()
        .filter_map(|&field| Some((field.to_string(), record.shift_remove(field)?)))
        .collect();
    let as_stored = |data: Map<String, Value>| {
        serde_json::to_vec(&Record {
            v: RECORD_VERSION,
            data,
        })
    };
    Ok((as_stored(record)?, as_stored(brief)?))
}

impl Store {
    /// Adds `state` to `writes`: its record, and its brief when that differs from the stored one.
    /// The record comes first, as the set's anchor (see `ahead`), so a set cut short by a crash
    /// after its record landed puts the brief in place when the store is opened.
    ///
    /// An agent's first record is written whole: the record lands before the brief, and a
    /// reader in between (a listing, a click) would find no brief at all. Later, a reader between
    /// the two writes, or one whose two reads the writes fall between, may pair a record with
    /// the brief before or after it: only the agent's actor writes it, and it keeps its state in
    /// memory, so such a reader only shows an agent a moment out of date.
    pub(super) fn put_agent(
        &self,
        writes: &mut Writes,
        state: &AgentState,
    ) -> Result<(), StoreError> {
        let (record, brief) = split(state)?;
        let (first, unchanged) = match self.agent_briefs.get(state.id.as_bytes())? {
            Some(raw) => (
                false,
                packed::unpack(&raw).is_ok_and(|stored| stored == brief),
            ),
            None => (true, false),
        };
        let record = if first {
            super::encode(state)?
        } else {
            packed::pack(record)
        };
        writes.put(TreeId::Agents, state.id.as_bytes(), record);
        if !unchanged {
            writes.put(
                TreeId::AgentBriefs,
                state.id.as_bytes(),
                packed::pack(brief),
            );
        }
        Ok(())
    }

    /// The agent stored under `key` as `raw` in the `agents` tree, with its brief read back and
    /// executing if the journal says so (see `started`); `None` when the agent was deleted after
    /// `raw` was read (its brief went with it).
    pub(super) fn decode_agent(
        &self,
        key: &[u8],
        raw: &[u8],
    ) -> Result<Option<AgentState>, StoreError> {
        let mut record: Map<String, Value> = super::decode(key, raw)?;
        if !record.contains_key(WHOLE_RECORD_MARK) {
            let Some(brief) = self.agent_briefs.get(key)? else {
                // `delete_agent` removes the record, then the brief.
                if !self.agents.contains_key(key)? {
                    return Ok(None);
                }
                return Err(StoreError::Corrupt(format!(
                    "{}: the agent's brief is missing",
                    String::from_utf8_lossy(key)
                )));
            };
            let brief: Map<String, Value> = super::decode(key, &brief)?;
            record.extend(brief);
        }
        let mut state: AgentState = serde_json::from_value(Value::Object(record))
            .map_err(|e| StoreError::Corrupt(format!("{}: {e}", String::from_utf8_lossy(key))))?;
        self.with_started_command(&mut state, raw)?;
        Ok(Some(state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::Profile;
    use crate::store::kv::Backend;
    use crate::store::test_backends::{on_both_backends, TestStore};
    use crate::store::Commit;

    fn profiled(id: &str) -> AgentState {
        let mut state = AgentState::for_test(id);
        state.brief.task = "Write a report on the tides of the North Sea".into();
        state.brief.profile = Some(Profile {
            name: "TideGPT".into(),
            role: "an analyst who writes clear reports on tides".into(),
            best_practices: vec!["Cite every source".into(); 4],
            constraints: vec!["No paid sources".into(); 3],
        });
        state
    }

    fn commit(store: &Store, state: &AgentState) {
        store
            .commit(&Commit {
                state: Some(state),
                ..Default::default()
            })
            .unwrap();
    }

    fn an_agent_reads_back_whole_from_its_record_and_its_brief_after_a_restart(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let mut state = profiled("abc123");
        state.brief.follow_ups.push("and the Baltic".into());
        state.progress.cycle = 7;
        {
            let store = test.open();
            commit(&store, &state);
            assert!(store.agent_briefs.get("abc123").unwrap().is_some());
            commit(&store, &state);
            // Once its brief is stored, the record the cycles rewrite holds none of it.
            let raw = store.agents.get("abc123").unwrap().unwrap();
            let record: Map<String, Value> = super::super::decode(b"abc123", &raw).unwrap();
            for field in BRIEF_FIELDS {
                assert!(!record.contains_key(field), "{field} is in the record");
            }
            assert!(record.contains_key("cycle"));
        }
        let store = test.open();
        assert_eq!(
            store.load_agent_record("abc123").unwrap(),
            Some(state.clone())
        );
        let listed = store.list_agents().unwrap();
        assert_eq!(listed[0].task, state.brief.task);
        assert_eq!(listed[0].name, "TideGPT");
    }

    fn a_brief_is_written_only_when_it_changes(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        let mut state = profiled("abc123");
        let trees_written = |state: &AgentState| {
            let mut writes = Writes::default();
            store.put_agent(&mut writes, state).unwrap();
            writes.writes.iter().map(|w| w.tree).collect::<Vec<_>>()
        };
        assert_eq!(trees_written(&state), [TreeId::Agents, TreeId::AgentBriefs]);
        commit(&store, &state);
        state.progress.cycle += 1;
        state.money.usage.prompt_tokens += 100;
        assert_eq!(trees_written(&state), [TreeId::Agents]);
        state.brief.follow_ups.push("now in French".into());
        assert_eq!(trees_written(&state), [TreeId::Agents, TreeId::AgentBriefs]);
        commit(&store, &state);
        assert_eq!(
            store
                .load_agent("abc123")
                .unwrap()
                .unwrap()
                .brief
                .follow_ups,
            ["now in French"]
        );
    }

    fn a_record_stored_whole_before_the_split_still_reads_and_is_split_when_next_written(
        backend: Backend,
    ) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        let state = profiled("abc123");
        store
            .agents
            .insert("abc123", super::super::encode(&state).unwrap())
            .unwrap();
        assert_eq!(
            store.load_agent_record("abc123").unwrap(),
            Some(state.clone())
        );
        commit(&store, &state);
        assert!(store.agent_briefs.get("abc123").unwrap().is_some());
        assert_eq!(store.load_agent_record("abc123").unwrap(), Some(state));
    }

    fn a_record_whose_brief_is_missing_is_reported_by_its_agent(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        // The second commit writes the record without its brief (the first writes it whole).
        commit(&store, &profiled("abc123"));
        commit(&store, &profiled("abc123"));
        store.agent_briefs.remove("abc123").unwrap();
        let error = store.load_agent_record("abc123").unwrap_err().to_string();
        assert!(
            error.contains("abc123") && error.contains("brief"),
            "{error}"
        );
    }

    fn a_record_read_just_before_its_agent_was_deleted_reads_as_gone(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        commit(&store, &profiled("abc123"));
        commit(&store, &profiled("abc123"));
        let raw = store.agents.get("abc123").unwrap().unwrap();
        store.delete_agent("abc123").unwrap();
        assert_eq!(store.decode_agent(b"abc123", &raw).unwrap(), None);
    }

    fn a_deleted_agent_leaves_no_brief(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        commit(&store, &profiled("abc123"));
        store.delete_agent("abc123").unwrap();
        assert!(store.agent_briefs.get("abc123").unwrap().is_none());
        assert!(store.load_agent("abc123").unwrap().is_none());
    }

    on_both_backends!(
        an_agent_reads_back_whole_from_its_record_and_its_brief_after_a_restart,
        a_brief_is_written_only_when_it_changes,
        a_record_stored_whole_before_the_split_still_reads_and_is_split_when_next_written,
        a_record_whose_brief_is_missing_is_reported_by_its_agent,
        a_record_read_just_before_its_agent_was_deleted_reads_as_gone,
        a_deleted_agent_leaves_no_brief,
    );
}
