//! The agents' steps (episodes), one record per cycle under `agent/<cycle in hex>`; beyond the
//! `KEEP_NEWEST` newest, which stay under keys of their own, they are folded into chunks of the
//! `episode_chunks` tree (see `chunks`). An agent loads its newest steps whole and a fork or a
//! rewind reaches back `SNAPSHOT_CYCLES` at most, so these mostly read keys of their own.
//!
//! A commit at a cycle that is a multiple of `FOLD_CHECK_EVERY` folds the older steps
//! (`fold_steps`). The readers: `steps_in` (cycles `first..=last`, whole or only the part a reader
//! needs, as a `Step`), `load_steps` (for `Store::load_agent`, newest first, the oldest only
//! counted), `all_episodes` (the transcript), `steps_after`. `remove_steps_after` serves a rewind:
//! a chunk holding later steps is removed and its earlier steps put back under keys of their own.
//! `fold_copied_steps` folds the steps a new fork copied.
//!
//! Only an agent's owner writes its steps (its actor, or a rewind while it rests); a fork of a
//! running agent reads them while its commits fold, which the lock of its records keeps apart.

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::ahead::{TreeId, Writes};
use super::chunks::{Chunk, Folding};
use super::snapshots::SNAPSHOT_CYCLES;
use super::{agent_end, agent_prefix, cycle_key, decode, encode, Store, StoreError};
use crate::core::history::{Episode, STEP_LINES_KEPT, WHOLE_STEPS_KEPT};
use crate::core::state::AgentState;

/// The newest steps that stay under keys of their own: more than an agent loads whole and more
/// than a fork or a rewind reaches back.
const KEEP_NEWEST: usize = 64;
const _: () = assert!(KEEP_NEWEST > WHOLE_STEPS_KEPT && KEEP_NEWEST as u64 > SNAPSHOT_CYCLES);

const FOLDING: Folding = Folding {
    singles: TreeId::Episodes,
    chunks: TreeId::EpisodeChunks,
    keep_newest: KEEP_NEWEST,
    least: 64,
    most: 256,
};

/// A stored step, whole or the part of it a reader needs, which knows its cycle.
pub(super) trait Step: DeserializeOwned {
    fn cycle(&self) -> u64;
}

impl Step for Episode {
    fn cycle(&self) -> u64 {
        self.cycle
    }
}

/// A step read for its cycle alone; the rest of the record is skipped unread.
#[derive(Deserialize)]
struct StepCycle {
    cycle: u64,
}

impl Step for StepCycle {
    fn cycle(&self) -> u64 {
        self.cycle
    }
}

impl Store {
    /// Folds `agent`'s oldest steps under keys of their own into a chunk, when it has enough of
    /// them beyond the newest. Returns how many steps were folded.
    pub(super) fn fold_steps(&self, agent: &str) -> Result<usize, StoreError> {
        self.fold_steps_fenced(agent, None)
    }

    /// `fold_steps`, landing only while the agent's lease carries `fence` (none: as `fold_steps`).
    pub(super) fn fold_steps_fenced(
        &self,
        agent: &str,
        fence: Option<super::Fence>,
    ) -> Result<usize, StoreError> {
        self.fold_records::<Episode>(&FOLDING, agent, fence)
    }

    /// `agent`'s steps of cycles `first..=last`, oldest first, folded or not.
    pub(super) fn steps_in<T: Step>(
        &self,
        agent: &str,
        first: u64,
        last: u64,
    ) -> Result<Vec<T>, StoreError> {
        let start = cycle_key(agent, first);
        let end = match last.checked_add(1) {
            Some(after) => cycle_key(agent, after),
            None => agent_end(agent),
        };
        self.records_in(
            &FOLDING,
            &agent_prefix(agent),
            (&start, &end),
            |step: &T| cycle_key(agent, step.cycle()),
        )
    }

    /// Fills `state` with its newest steps whole and the ones before as Progress lines, bounded
    /// however long it has run: older steps are only counted.
    pub(super) fn load_steps(&self, state: &mut AgentState) -> Result<(), StoreError> {
        let prefix = agent_prefix(&state.id);
        let newest: Vec<Episode> =
            self.newest_records(&FOLDING, &prefix, 0, WHOLE_STEPS_KEPT + STEP_LINES_KEPT)?;
        let read = newest.len();
        let mut newest = newest.into_iter();
        state.progress.episodes = newest.by_ref().take(WHOLE_STEPS_KEPT).collect();
        state.progress.episodes.reverse();
        for older in newest {
            state.progress.earlier.push_older(&older);
        }
        let total = self.count_records(&FOLDING, &prefix)?;
        state.progress.earlier.not_kept += total.saturating_sub(read) as u64;
        Ok(())
    }

    /// Every step the agent has taken, oldest first, for the transcript and export.
    pub fn all_episodes(&self, id: &str) -> Result<Vec<Episode>, StoreError> {
        self.all_records(&FOLDING, &agent_prefix(id))
    }

    /// How many of the agent's steps come after `cycle`.
    pub fn steps_after(&self, agent: &str, cycle: u64) -> Result<usize, StoreError> {
        Ok(self
            .steps_in::<StepCycle>(agent, cycle.saturating_add(1), u64::MAX)?
            .len())
    }

    /// Adds to `writes` the removal of `agent`'s steps after `cycle`, folded or not: a chunk that
    /// holds any goes, and its steps up to `cycle` are put back under keys of their own. Returns
    /// how many steps are removed.
    pub(super) fn remove_steps_after(
        &self,
        agent: &str,
        cycle: u64,
        writes: &mut Writes,
    ) -> Result<usize, StoreError> {
        let start = cycle_key(agent, cycle.saturating_add(1));
        let end = agent_end(agent);
        let _held = self.records_lock(&agent_prefix(agent));
        let mut removed = 0;
        for item in self.episode_chunks.range(start.clone()..end.clone()) {
            let (key, raw) = item?;
            writes.remove(TreeId::EpisodeChunks, key.to_vec());
            for step in decode::<Chunk<Episode>>(&key, &raw)?.records {
                if step.cycle > cycle {
                    removed += 1;
                } else {
                    writes.put(
                        TreeId::Episodes,
                        cycle_key(agent, step.cycle),
                        encode(&step)?,
                    );
                }
            }
        }
        for key in self.episodes.range(start..end).keys() {
            writes.remove(TreeId::Episodes, key?.to_vec());
            removed += 1;
        }
        Ok(removed)
    }

    /// Folds a new fork's copied steps until what is left under keys of their own is what its
    /// commits keep so. The fork has landed whatever this does: a failure is logged, and its
    /// commits fold the rest later.
    pub(super) fn fold_copied_steps(&self, agent: &str) {
        loop {
            match self.fold_steps(agent) {
                Ok(0) => return,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(agent, %error, "could not fold a fork's copied steps into a chunk");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::core::audit::{AuditEntry, AuditEvent};
    use crate::core::budget::Micros;
    use crate::core::history::Outcome;
    use crate::core::reply::CommandCall;
    use crate::store::kv::Backend;
    use crate::store::test_backends::{on_both_backends, TestStore};
    use crate::store::Commit;

    /// A step of `cycle` that cost `cycle` micros, decided by someone named after it.
    fn step(cycle: u64) -> Episode {
        Episode {
            cycle,
            command: CommandCall::default(),
            reasoning: format!("reason {cycle}"),
            outcome: Outcome::Success(format!("done {cycle}")),
            summary: None,
            decided_by: Some(format!("person {cycle}").as_str().into()),
            edited_by: Vec::new(),
            cost: Micros(cycle),
        }
    }

    /// An agent that has taken steps `1..=steps`, each stored by a commit as an actor stores it.
    fn agent_with_steps(store: &Store, id: &str, steps: u64) -> AgentState {
        let mut state = AgentState::for_test(id);
        for cycle in 1..=steps {
            state.progress.cycle = cycle;
            let taken = step(cycle);
            store
                .commit(&Commit {
                    state: Some(&state),
                    episodes: vec![&taken],
                    ..Default::default()
                })
                .unwrap();
        }
        state
    }

    fn cycles(steps: &[Episode]) -> Vec<u64> {
        steps.iter().map(|step| step.cycle).collect()
    }

    fn singles_and_chunks(store: &Store, agent: &str) -> (usize, usize) {
        let prefix = agent_prefix(agent);
        (
            store.episodes.scan_prefix(&prefix).count(),
            store.episode_chunks.scan_prefix(&prefix).count(),
        )
    }

    fn older_steps_are_folded_and_every_reader_finds_them(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        agent_with_steps(&store, "long", 400);
        // An agent whose id extends this one's keeps its own steps.
        agent_with_steps(&store, "long2", 3);
        let (singles, chunks) = singles_and_chunks(&store, "long");
        assert!(chunks >= 4, "{chunks} chunks");
        assert!(
            (KEEP_NEWEST..KEEP_NEWEST + 64 + 16).contains(&singles),
            "{singles} steps under keys of their own"
        );
        drop(store);

        let store = test.open();
        let all = store.all_episodes("long").unwrap();
        assert_eq!(cycles(&all), (1..=400).collect::<Vec<_>>());
        assert_eq!(all[4], step(5), "a folded step comes back whole");
        assert_eq!(cycles(&store.all_episodes("long2").unwrap()), [1, 2, 3]);

        let loaded = store.load_agent("long").unwrap().unwrap();
        assert_eq!(
            cycles(&loaded.progress.episodes),
            (369..=400).collect::<Vec<_>>()
        );
        assert_eq!(loaded.progress.earlier.lines.len(), STEP_LINES_KEPT);
        assert_eq!(loaded.progress.earlier.lines.front().unwrap().0, 113);
        assert_eq!(loaded.progress.earlier.not_kept, 112);

        assert_eq!(
            store
                .decided_by("long", 5)
                .unwrap()
                .map(|by| by.names())
                .as_deref(),
            Some("person 5")
        );
        assert_eq!(store.decided_by("long", 401).unwrap(), None);
        assert_eq!(store.steps_after("long", 60).unwrap(), 340);
        let spend = store.spend_after_each_cycle("long", 100).unwrap();
        assert_eq!(spend.len(), 300);
        assert_eq!(spend[0], (101, Micros(101)));
        assert_eq!(spend[299], (400, Micros((101..=400).sum())));

        store.delete_agent("long").unwrap();
        assert_eq!(singles_and_chunks(&store, "long"), (0, 0));
        assert_eq!(store.all_episodes("long2").unwrap().len(), 3);
    }

    fn a_rewind_into_folded_steps_keeps_those_before_and_a_fork_copies_them(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        let mut state = agent_with_steps(&store, "deep", 300);
        let source = state.clone();
        let audit = |removed: usize| AuditEntry {
            at: Utc::now(),
            by: "tester".into(),
            event: AuditEvent::MemoryPinned {
                memory: removed as u64,
            },
        };

        let mut fork = AgentState::for_test("forked");
        fork.progress.cycle = 150;
        store.fork_agent("deep", 150, &fork, &audit(0)).unwrap();
        assert_eq!(
            cycles(&store.all_episodes("forked").unwrap()),
            (1..=150).collect::<Vec<_>>()
        );
        let (singles, chunks) = singles_and_chunks(&store, "forked");
        assert!(
            chunks >= 1 && singles < KEEP_NEWEST + 64,
            "{singles} singles"
        );

        state.progress.cycle = 100;
        let removed = store.rewind_agent(100, &state, audit).unwrap();
        assert_eq!(removed, 200);
        let left = store.all_episodes("deep").unwrap();
        assert_eq!(cycles(&left), (1..=100).collect::<Vec<_>>());
        assert_eq!(left[99], step(100));
        assert_eq!(store.steps_after("deep", 50).unwrap(), 50);
        // The source's steps the fork copied are its own.
        assert_eq!(store.all_episodes("forked").unwrap().len(), 150);
        assert_eq!(source.progress.cycle, 300);
    }

    fn a_reader_never_sees_a_fold_half_done(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || agent_with_steps(&store, "busy", 2_000))
        };
        let mut reads = 0;
        while !writer.is_finished() {
            let seen = cycles(&store.all_episodes("busy").unwrap());
            let expected: Vec<u64> = (1..=seen.len() as u64).collect();
            assert_eq!(seen, expected, "a read lost or repeated steps");
            let newest = store.newest_steps_for_test("busy");
            assert!(newest.windows(2).all(|pair| pair[0] == pair[1] + 1));
            reads += 1;
        }
        writer.join().unwrap();
        assert!(reads > 0);
        assert_eq!(store.all_episodes("busy").unwrap().len(), 2_000);
    }

    impl Store {
        /// The cycles of a page of `agent`'s newest steps that spans folded ones once it has 100.
        fn newest_steps_for_test(&self, agent: &str) -> Vec<u64> {
            let page: Vec<Episode> = self
                .newest_records(&FOLDING, &agent_prefix(agent), 0, 150)
                .unwrap();
            cycles(&page)
        }
    }

    on_both_backends!(
        older_steps_are_folded_and_every_reader_finds_them,
        a_rewind_into_folded_steps_keeps_those_before_and_a_fork_copies_them,
        a_reader_never_sees_a_fold_half_done,
    );
}
