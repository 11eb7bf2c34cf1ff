//! The store's own tests: commits, decisions, the journal and the schema check.

use super::kv::Backend;
use super::test_backends::{on_both_backends, TestStore};
use super::*;
use crate::core::history::Outcome;
use crate::core::person::ActedBy;

fn state(id: &str) -> AgentState {
    AgentState::for_test(id)
}

/// A successful step of `cycle`, decided by `decided_by`.
fn episode(cycle: u64, decided_by: Option<&str>) -> Episode {
    Episode {
        cycle,
        command: CommandCall::default(),
        reasoning: "r".into(),
        outcome: Outcome::Success("ok".into()),
        summary: None,
        decided_by: decided_by.map(ActedBy::from),
        edited_by: Vec::new(),
        cost: crate::core::budget::Micros::ZERO,
    }
}

fn commit_and_reload_with_episodes_and_files(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let mut agent = state("abc123");
    agent.progress.episodes.push(episode(1, Some("me")));
    store
        .commit(&Commit {
            state: Some(&agent),
            episodes: agent.progress.episodes.iter().collect(),
            workspace: vec![WorkspaceOp::Put {
                path: "a/b.txt".into(),
                contents: b"hello".to_vec(),
            }],
            ..Default::default()
        })
        .unwrap();
    drop(store);
    let store = db.open();
    let loaded = store.load_agent("abc123").unwrap().unwrap();
    assert_eq!(loaded.progress.episodes, agent.progress.episodes);
    assert_eq!(
        store.read_file("abc123", "a/b.txt").unwrap().unwrap(),
        b"hello"
    );
    assert_eq!(
        store.list_files("abc123").unwrap(),
        vec![("a/b.txt".to_string(), 5)]
    );
    assert_eq!(store.resolve_agent("abc").unwrap(), "abc123");
    assert!(matches!(
        store.resolve_agent("zzz"),
        Err(StoreError::UnknownAgent(_))
    ));
}

fn a_deleted_agent_leaves_nothing_and_its_neighbour_everything(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    for id in ["abc123", "abc1234"] {
        let mut agent = state(id);
        agent.progress.episodes.push(episode(1, None));
        store
            .commit(&Commit {
                state: Some(&agent),
                episodes: agent.progress.episodes.iter().collect(),
                workspace: vec![WorkspaceOp::Put {
                    path: "a.txt".into(),
                    contents: b"x".to_vec(),
                }],
                ..Default::default()
            })
            .unwrap();
        store
            .save_binding(&ThreadBinding {
                agent_id: id.into(),
                guild_id: 1,
                parent_channel_id: 2,
                thread_id: if id == "abc123" { 30 } else { 31 },
                owner_id: 10,
                shared_users: vec![],
                shared_roles: vec![],
                card: None,
            })
            .unwrap();
    }
    store.archive_when_finished("abc123").unwrap();
    store.delete_agent("abc123").unwrap();
    assert!(store.load_agent("abc123").unwrap().is_none());
    assert!(store.all_episodes("abc123").unwrap().is_empty());
    assert!(store.list_files("abc123").unwrap().is_empty());
    assert!(store.binding("abc123").unwrap().is_none());
    assert!(store.agent_for_thread(30).unwrap().is_none());
    assert!(!store.take_archive_mark("abc123").unwrap());
    assert_eq!(
        store.live_agents(1).unwrap(),
        vec![(10, "abc1234".to_string())]
    );
    // An id that starts like the deleted one keeps all it had.
    assert_eq!(store.all_episodes("abc1234").unwrap().len(), 1);
    assert_eq!(store.list_files("abc1234").unwrap().len(), 1);
    assert_eq!(
        store.agent_for_thread(31).unwrap().as_deref(),
        Some("abc1234")
    );
}

fn an_agent_is_loaded_with_its_newest_steps_whole_and_older_ones_as_lines(backend: Backend) {
    use crate::core::history::{STEP_LINES_KEPT, WHOLE_STEPS_KEPT};
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let mut agent = state("long00000001");
    let steps = (WHOLE_STEPS_KEPT + STEP_LINES_KEPT + 12) as u64;
    for cycle in 1..=steps {
        agent.record_episode(Episode {
            cycle,
            command: CommandCall::default(),
            reasoning: format!("reason {cycle}"),
            outcome: Outcome::Success(format!("output of {cycle}")),
            summary: (cycle % 2 == 0).then(|| format!("summary of {cycle}")),
            decided_by: None,
            edited_by: Vec::new(),
            cost: crate::core::budget::Micros::ZERO,
        });
        store
            .commit(&Commit {
                state: Some(&agent),
                episodes: agent.progress.episodes.last().into_iter().collect(),
                ..Default::default()
            })
            .unwrap();
    }
    let loaded = store.load_agent("long00000001").unwrap().unwrap();
    assert_eq!(loaded.progress.episodes, agent.progress.episodes);
    assert_eq!(loaded.progress.earlier, agent.progress.earlier);
    assert_eq!(loaded.progress.earlier.not_kept, 12);
    assert_eq!(loaded.step_count(), steps);
    let all = store.all_episodes("long00000001").unwrap();
    assert_eq!(all.len() as u64, steps);
    assert!(all.iter().map(|e| e.cycle).eq(1..=steps));
}

#[test]
fn a_store_in_use_is_reported_after_a_bounded_wait() {
    let dir = tempfile::tempdir().unwrap();
    let _held = Store::open(dir.path()).unwrap();
    let started = std::time::Instant::now();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Locked(_)), "{err}");
    assert!(err
        .to_string()
        .contains("in use by another autothread process"));
    assert!(started.elapsed() >= LOCK_WAIT);
}

fn first_decision_wins(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let first = DecisionRecord {
        decision: Decision::Approve,
        by: "alice".into(),
        at: Utc::now(),
    };
    let second = DecisionRecord {
        decision: Decision::Deny,
        by: "bob".into(),
        at: Utc::now(),
    };
    assert_eq!(store.record_decision("a", 3, &first).unwrap(), Ok(()));
    let lost = store.record_decision("a", 3, &second).unwrap().unwrap_err();
    assert_eq!(lost.by.names(), "alice");
    assert_eq!(store.record_decision("a", 4, &second).unwrap(), Ok(()));
}

/// Two stores on one PostgreSQL database, as two processes have them, racing to decide the same
/// cycles from several threads: each cycle is decided exactly once, and both read the winner.
#[test]
fn two_processes_sharing_a_database_decide_each_cycle_once() {
    let Some(db) = TestStore::on(Backend::Postgres) else {
        return;
    };
    let stores = [db.open(), db.open()];
    let cycles = 40u64;
    let wins: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..4)
            .map(|racer| {
                let store = &stores[racer % 2];
                scope.spawn(move || {
                    let record = DecisionRecord {
                        decision: Decision::Approve,
                        by: format!("racer{racer}").as_str().into(),
                        at: Utc::now(),
                    };
                    (1..=cycles)
                        .filter(|&cycle| {
                            store.record_decision("a", cycle, &record).unwrap().is_ok()
                        })
                        .collect()
                })
            })
            .collect();
        racers
            .into_iter()
            .map(|racer| racer.join().unwrap())
            .collect()
    });
    let mut decided: Vec<u64> = wins.concat();
    decided.sort_unstable();
    assert_eq!(decided, (1..=cycles).collect::<Vec<_>>(), "each cycle once");
    for cycle in 1..=cycles {
        let winner = wins.iter().position(|won| won.contains(&cycle)).unwrap();
        for store in &stores {
            assert_eq!(
                store.decided_by("a", cycle).unwrap().unwrap().names(),
                format!("racer{winner}")
            );
        }
    }
}

/// A closed cycle keeps who decided it in its episode, and its decision's record goes: the
/// store keeps no record a cycle beyond those a person reads, and a late click still learns who
/// won.
fn a_closed_cycles_decision_is_read_from_its_episode_and_its_record_removed(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let approval = |by: &str| DecisionRecord {
        decision: Decision::Approve,
        by: by.into(),
        at: Utc::now(),
    };
    store
        .record_decision("a", 3, &approval("alice"))
        .unwrap()
        .unwrap();
    store
        .record_decision("a", 4, &approval("bob"))
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .decided_by("a", 3)
            .unwrap()
            .map(|by| by.names())
            .as_deref(),
        Some("alice")
    );

    let mut agent = state("a");
    agent
        .progress
        .episodes
        .push(episode(3, Some("alice; arguments edited by carol")));
    store
        .commit(&Commit {
            state: Some(&agent),
            episodes: agent.progress.episodes.iter().collect(),
            ..Default::default()
        })
        .unwrap();

    // Cycle 4 is still open: its record stays and answers. Cycle 3's answer is its episode's.
    assert_eq!(store.decisions.len(), 1);
    assert_eq!(
        store
            .decided_by("a", 4)
            .unwrap()
            .map(|by| by.names())
            .as_deref(),
        Some("bob")
    );
    assert_eq!(
        store
            .decided_by("a", 3)
            .unwrap()
            .map(|by| by.names())
            .as_deref(),
        Some("alice; arguments edited by carol")
    );
    assert_eq!(store.decided_by("a", 5).unwrap(), None);
}

async fn the_journal_holds_a_command_from_its_start_until_the_commit_of_its_result(
    backend: Backend,
) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let agent = state("j1");
    let call = CommandCall {
        name: "write_file".into(),
        ..Default::default()
    };
    assert_eq!(store.journal_entry("j1", 1).unwrap(), None);
    store
        .journal_executing("j1", 1, &call, Utc::now())
        .await
        .unwrap();
    assert!(matches!(
        store.journal_entry("j1", 1).unwrap(),
        Some(JournalEntry::Executing { command, call: None, .. }) if command == "write_file"
    ));
    // A crash here leaves "executing": reopening the store still says so.
    drop(store);
    let store = db.open();
    assert!(matches!(
        store.journal_entry("j1", 1).unwrap(),
        Some(JournalEntry::Executing { .. })
    ));
    store
        .commit(&Commit {
            state: Some(&agent),
            finished_command: Some(1),
            workspace: vec![WorkspaceOp::Put {
                path: "f.txt".into(),
                contents: b"x".to_vec(),
            }],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(store.journal_entry("j1", 1).unwrap(), None);
    assert_eq!(store.read_file("j1", "f.txt").unwrap().unwrap(), b"x");
    // Nothing of the finished command is left in the journal's tree.
    assert!(store.journal.is_empty());
}

fn newer_schema_refuses_to_open(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    {
        let store = db.open();
        migrate::set_schema_version(&store.db, migrate::SCHEMA_VERSION + 1).unwrap();
        store.db.flush().unwrap();
    }
    let err = db.try_open().unwrap_err();
    assert!(matches!(err, StoreError::TooNew { .. }));
    assert!(err.to_string().contains("newer autothread"), "{err}");
}

fn recalled_memories_are_kept_by_reference_and_older_records_with_texts_still_load(
    backend: Backend,
) {
    use crate::core::memory::{MemoryHit, MemorySource};
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let mut agent = state("r1");
    let text = "The launch password is heliotrope. ".repeat(30);
    agent.progress.recalled = vec![MemoryHit {
        id: 7,
        cycle: 3,
        source: MemorySource::Cycle,
        text: text.clone(),
        score: 0.5,
        pinned: true,
        origin: None,
    }];
    store
        .commit(&Commit {
            state: Some(&agent),
            ..Default::default()
        })
        .unwrap();
    let stored = store.agents.get("r1").unwrap().unwrap();
    let raw = super::packed::unpack(&stored).unwrap().into_owned();
    assert!(
        !String::from_utf8_lossy(&raw).contains("heliotrope"),
        "the record holds the memory's text"
    );
    let loaded = store.load_agent_record("r1").unwrap().unwrap();
    let hit = &loaded.progress.recalled[0];
    assert_eq!(
        (hit.id, hit.cycle, hit.score, hit.pinned),
        (7, 3, 0.5, true)
    );
    assert_eq!(hit.text, "");

    // A record written before hits were kept by reference still has its texts.
    let mut older: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    older["data"]["recalled"][0]["text"] = text.clone().into();
    store
        .agents
        .insert("r1", serde_json::to_vec(&older).unwrap())
        .unwrap();
    let loaded = store.load_agent_record("r1").unwrap().unwrap();
    assert_eq!(loaded.progress.recalled[0].text, text);
}

fn a_journal_entry_written_with_its_whole_command_still_reads_as_executing(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let older = serde_json::json!({"v": RECORD_VERSION, "data": {"state": "executing",
        "call": {"name": "write_file", "args": {"filename": "a.txt"}},
        "started_at": "2026-01-01T00:00:00Z"}});
    store
        .journal
        .insert(cycle_key("j2", 4), serde_json::to_vec(&older).unwrap())
        .unwrap();
    match store.journal_entry("j2", 4).unwrap() {
        Some(JournalEntry::Executing {
            call: Some(call), ..
        }) => assert_eq!(call.name, "write_file"),
        other => panic!("not an executing entry: {other:?}"),
    }
}

fn the_audit_trail_is_kept_in_order_per_agent_paged_newest_first_and_survives_a_restart(
    backend: Backend,
) {
    use crate::core::audit::{AuditEntry, AuditEvent};
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let entry = |n: u64| AuditEntry {
        at: Utc::now(),
        by: format!("person {n}").as_str().into(),
        event: AuditEvent::MemoryPinned { memory: n },
    };
    let (first, second) = (entry(1), entry(2));
    let agent = state("audited");
    store
        .commit(&Commit {
            state: Some(&agent),
            audit: vec![&first, &second],
            ..Default::default()
        })
        .unwrap();
    for n in 3..=10 {
        store.append_audit("audited", &entry(n)).unwrap();
    }
    // Another agent's entries (an id that extends this one's too) are not this agent's.
    store.append_audit("audited2", &entry(99)).unwrap();
    drop(store);

    let store = db.open();
    let memories = |entries: &[AuditEntry]| -> Vec<u64> {
        entries
            .iter()
            .map(|e| match e.event {
                AuditEvent::MemoryPinned { memory } => memory,
                _ => unreachable!(),
            })
            .collect()
    };
    let newest = store.audit_page("audited", 0, 4).unwrap();
    assert_eq!(newest.total, 10);
    assert_eq!(memories(&newest.entries), [10, 9, 8, 7]);
    let last = store.audit_page("audited", 2, 4).unwrap();
    assert_eq!(memories(&last.entries), [2, 1]);
    assert!(store
        .audit_page("audited", 3, 4)
        .unwrap()
        .entries
        .is_empty());
    let all = store.audit_trail("audited").unwrap();
    assert_eq!(memories(&all), (1..=10).collect::<Vec<_>>());
    assert_eq!(all[0], first);
}

#[test]
fn writes_a_crash_cut_short_are_finished_when_the_store_opens() {
    let dir = tempfile::tempdir().unwrap();
    let mut writes = Writes::default();
    writes.put(
        TreeId::Workspace,
        file_key("a1", "new.txt"),
        b"new".to_vec(),
    );
    writes.remove(TreeId::Workspace, file_key("a1", "old.txt"));
    writes.put(
        TreeId::Journal,
        cycle_key("a1", 3),
        encode(&JournalEntry::Done {
            call: None,
            status: "success".into(),
            finished_at: DateTime::<Utc>::UNIX_EPOCH,
        })
        .unwrap(),
    );
    {
        let store = Store::open(dir.path()).unwrap();
        store
            .workspace
            .insert(file_key("a1", "old.txt"), b"old".to_vec())
            .unwrap();
        // The set was stored ahead and its first write applied when the process died.
        store
            .ahead
            .insert(7u64.to_be_bytes(), writes.encode())
            .unwrap();
        store.apply_write(&writes.writes[0]).unwrap();
        assert!(store.journal_entry("a1", 3).unwrap().is_none());
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        store.read_file("a1", "new.txt").unwrap(),
        Some(b"new".to_vec())
    );
    assert_eq!(store.read_file("a1", "old.txt").unwrap(), None);
    assert!(matches!(
        store.journal_entry("a1", 3).unwrap(),
        Some(JournalEntry::Done { .. })
    ));
    assert!(store.ahead.is_empty());
}

/// A set stored ahead names its agent state by an anchor instead of holding a copy. At open, a
/// set whose state landed is finished; one whose state never landed (the crash came right after
/// the set was stored, before anything of it was applied) is dropped, its writes unapplied.
#[test]
fn a_set_stored_ahead_is_finished_or_dropped_by_whether_its_state_landed() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (state("a1"), {
        let mut new = state("a1");
        new.progress.cycle = 4;
        new
    });
    let set = |state: &AgentState, file: &str| {
        let mut writes = Writes::default();
        writes.put(TreeId::Workspace, file_key("a1", file), b"x".to_vec());
        writes.anchor = Some(ahead::Anchor::of(b"a1", &encode(state).unwrap()));
        writes
    };
    {
        let store = Store::open(dir.path()).unwrap();
        store.agents.insert("a1", encode(&old).unwrap()).unwrap();
        // The new state never landed: its set is dropped.
        store
            .ahead
            .insert(7u64.to_be_bytes(), set(&new, "dropped.txt").encode())
            .unwrap();
        // The old state is the stored one: its set is finished.
        store
            .ahead
            .insert(8u64.to_be_bytes(), set(&old, "finished.txt").encode())
            .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.read_file("a1", "dropped.txt").unwrap(), None);
    assert_eq!(
        store.read_file("a1", "finished.txt").unwrap(),
        Some(b"x".to_vec())
    );
    assert_eq!(
        store
            .load_agent_record("a1")
            .unwrap()
            .map(|s| s.progress.cycle),
        Some(old.progress.cycle)
    );
    assert!(store.ahead.is_empty());
}

fn a_commit_leaves_nothing_stored_ahead(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let agent = state("abc123");
    store
        .commit(&Commit {
            state: Some(&agent),
            workspace: vec![WorkspaceOp::Put {
                path: "a.txt".into(),
                contents: b"x".to_vec(),
            }],
            ..Commit::default()
        })
        .unwrap();
    assert!(store.ahead.is_empty());
    assert_eq!(
        store.read_file("abc123", "a.txt").unwrap(),
        Some(b"x".to_vec())
    );
}

fn an_agents_workspace_size_follows_its_writes_and_matches_its_files(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let files_total = |agent: &str| -> u64 {
        store
            .list_files(agent)
            .unwrap()
            .iter()
            .map(|(_, size)| size)
            .sum()
    };
    let agent = state("sized1");
    let commit_ops = |ops: Vec<WorkspaceOp>| {
        store
            .commit(&Commit {
                state: Some(&agent),
                workspace: ops,
                ..Default::default()
            })
            .unwrap();
    };
    let put = |path: &str, len: usize| WorkspaceOp::Put {
        path: path.into(),
        contents: vec![b'x'; len],
    };
    // Written before the size is first asked for: added up from the files.
    commit_ops(vec![put("a.txt", 10), put("b/c.txt", 20)]);
    assert_eq!(store.workspace_bytes("sized1").unwrap(), 30);
    // Then kept as writes land: a new file, a file replaced by a shorter one, a file deleted.
    commit_ops(vec![put("d.txt", 7)]);
    commit_ops(vec![put("a.txt", 3), put("e.txt", 1)]);
    commit_ops(vec![WorkspaceOp::Delete {
        path: "b/c.txt".into(),
    }]);
    assert_eq!(store.workspace_bytes("sized1").unwrap(), 11);
    assert_eq!(
        store.workspace_bytes("sized1").unwrap(),
        files_total("sized1")
    );
    assert_eq!(store.file_size("sized1", "a.txt").unwrap(), Some(3));
    assert_eq!(store.file_size("sized1", "b/c.txt").unwrap(), None);
    // Another agent's files, even under a longer id that starts the same, are not counted.
    let neighbour = state("sized12");
    store
        .commit(&Commit {
            state: Some(&neighbour),
            workspace: vec![put("a.txt", 100)],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(store.workspace_bytes("sized1").unwrap(), 11);
    assert_eq!(store.workspace_bytes("sized12").unwrap(), 100);
    // A deleted agent's workspace is empty, and so is its size.
    store.delete_agent("sized1").unwrap();
    assert_eq!(store.workspace_bytes("sized1").unwrap(), 0);
    // A reopened store adds the sizes up again from what is on disk.
    drop(store);
    let store = db.open();
    assert_eq!(store.workspace_bytes("sized12").unwrap(), 100);
}

fn workspace_files_are_kept_compressed_and_read_back_as_written_with_their_own_sizes(
    backend: Backend,
) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let agent = state("packs");
    let text = "the ferry to Skye leaves at 7:40 from pier 3; "
        .repeat(100)
        .into_bytes();
    // A file whose own bytes look like a compressed value (a .zst an agent downloaded).
    let mut looks_packed = vec![0x28, 0xb5, 0x2f, 0xfd];
    looks_packed.extend_from_slice(b"not a frame at all");
    store
        .commit(&Commit {
            state: Some(&agent),
            workspace: vec![
                WorkspaceOp::Put {
                    path: "notes.txt".into(),
                    contents: text.clone(),
                },
                WorkspaceOp::Put {
                    path: "data.zst".into(),
                    contents: looks_packed.clone(),
                },
            ],
            ..Default::default()
        })
        .unwrap();
    let stored = store
        .workspace
        .get(file_key("packs", "notes.txt"))
        .unwrap()
        .unwrap();
    assert!(
        stored.len() * 4 < text.len(),
        "{} bytes stored",
        stored.len()
    );
    assert_eq!(
        store.read_file("packs", "notes.txt").unwrap().unwrap(),
        text
    );
    assert_eq!(
        store.read_file("packs", "data.zst").unwrap().unwrap(),
        looks_packed
    );
    // Sizes and the workspace limit count what was written, not what is stored.
    let expected = (text.len() + looks_packed.len()) as u64;
    assert_eq!(store.workspace_bytes("packs").unwrap(), expected);
    assert_eq!(
        store.file_size("packs", "notes.txt").unwrap(),
        Some(text.len() as u64)
    );
    let listed: u64 = store.list_files("packs").unwrap().iter().map(|f| f.1).sum();
    assert_eq!(listed, expected);
    drop(store);
    let store = db.open();
    assert_eq!(store.workspace_bytes("packs").unwrap(), expected);
    assert_eq!(store.workspace_at("packs", 1).unwrap()["notes.txt"], text);
}

#[test]
fn new_stores_get_large_log_segments_and_older_stores_open_with_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("fresh");
    drop(Store::open(&fresh).unwrap());
    assert_eq!(
        created_setting(&fresh, "segment_size"),
        Some(SEGMENT_BYTES.to_string())
    );
    // A store made by an earlier build, with sled's default segments, opens as it was made.
    let older = dir.path().join("older");
    drop(sled::Config::new().path(&older).open().unwrap());
    {
        let store = Store::open(&older).unwrap();
        store.db().insert("kept", &b"yes"[..]).unwrap();
        store.flush_blocking().unwrap();
    }
    let store = Store::open(&older).unwrap();
    assert_eq!(
        store.db().get("kept").unwrap().as_deref(),
        Some(&b"yes"[..])
    );
    drop(store);
    assert_eq!(
        created_setting(&older, "segment_size"),
        Some((512 * 1024).to_string())
    );
    assert_eq!(
        created_setting(&older, "use_compression"),
        Some("false".into())
    );
}

fn a_servers_policy_choices_change_in_place_per_class_and_survive_a_reopen(backend: Backend) {
    use crate::core::commands::Risk;
    use crate::core::policy::{AdminChoice, ClassAction};
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let (guild, other) = (
        crate::core::state::GuildId::from(7_u64),
        crate::core::state::GuildId::from(8_u64),
    );
    let choice = |action| AdminChoice {
        action,
        by: crate::core::person::Person::discord(42, "admin"),
        at: chrono::DateTime::from_timestamp(0, 0).unwrap_or_default(),
    };
    store
        .change_server_policy(&guild, Risk::Control, Some(choice(ClassAction::Remember)))
        .unwrap();
    let both = store
        .change_server_policy(&guild, Risk::Network, Some(choice(ClassAction::Deny)))
        .unwrap();
    assert_eq!(
        both.get(Risk::Control).map(|c| c.action),
        Some(ClassAction::Remember)
    );
    drop(store);
    let store = db.open();
    assert_eq!(store.server_policy(&guild).unwrap(), both);
    assert!(store.server_policy(&other).unwrap().is_empty());
    store
        .change_server_policy(&guild, Risk::Control, None)
        .unwrap();
    let left = store
        .change_server_policy(&guild, Risk::Network, None)
        .unwrap();
    assert!(left.is_empty());
    // Nothing chosen leaves no record behind.
    assert!(!store.discord.contains_key(b"policy/7").unwrap());
}

fn a_file_a_person_put_there_is_theirs_until_the_agent_writes_other_bytes(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let agent = state("uploads1");
    store
        .commit(&Commit {
            state: Some(&agent),
            ..Default::default()
        })
        .unwrap();
    let entry = AuditEntry {
        at: chrono::Utc::now(),
        by: ActedBy::from("caller"),
        event: crate::core::audit::AuditEvent::FileUploaded {
            path: "in/a.txt".into(),
            bytes: 1,
            digest: crate::core::digest::sha256_tagged(b"a"),
        },
    };
    for path in ["in/a.txt", "in/b.txt", "in/c.txt"] {
        store
            .put_file_from_outside("uploads1", 0, path, b"a".to_vec(), &entry, None)
            .unwrap();
    }
    // The agent rewrites b with other bytes, c with the same, and removes a.
    store
        .commit(&Commit {
            state: Some(&agent),
            workspace: vec![
                WorkspaceOp::Put {
                    path: "in/b.txt".into(),
                    contents: b"mine".to_vec(),
                },
                WorkspaceOp::Put {
                    path: "in/c.txt".into(),
                    contents: b"a".to_vec(),
                },
                WorkspaceOp::Delete {
                    path: "in/a.txt".into(),
                },
            ],
            ..Default::default()
        })
        .unwrap();
    let theirs = store.files_put_from_outside("uploads1").unwrap();
    assert_eq!(theirs, ["in/c.txt".to_string()].into_iter().collect());
    assert_eq!(store.audit_trail("uploads1").unwrap().len(), 3);
    store.delete_agent("uploads1").unwrap();
    assert!(store.files_put_from_outside("uploads1").unwrap().is_empty());
    assert_eq!(
        store.uploads.scan_prefix(agent_prefix("uploads1")).count(),
        0
    );
}

on_both_backends!(
    a_file_a_person_put_there_is_theirs_until_the_agent_writes_other_bytes,
    commit_and_reload_with_episodes_and_files,
    newer_schema_refuses_to_open,
    a_deleted_agent_leaves_nothing_and_its_neighbour_everything,
    an_agent_is_loaded_with_its_newest_steps_whole_and_older_ones_as_lines,
    first_decision_wins,
    a_closed_cycles_decision_is_read_from_its_episode_and_its_record_removed,
    recalled_memories_are_kept_by_reference_and_older_records_with_texts_still_load,
    a_journal_entry_written_with_its_whole_command_still_reads_as_executing,
    the_audit_trail_is_kept_in_order_per_agent_paged_newest_first_and_survives_a_restart,
    a_commit_leaves_nothing_stored_ahead,
    an_agents_workspace_size_follows_its_writes_and_matches_its_files,
    workspace_files_are_kept_compressed_and_read_back_as_written_with_their_own_sizes,
    a_servers_policy_choices_change_in_place_per_class_and_survive_a_reopen,
);

on_both_backends!(
    async
    the_journal_holds_a_command_from_its_start_until_the_commit_of_its_result,
);
