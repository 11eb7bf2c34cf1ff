//! The leases' tests: acquire, renew, expire, take over and release on both backends; a write
//! with a stale token refused whole; two stores on one PostgreSQL database racing.

use std::time::Duration;

use chrono::Utc;

use super::*;
use crate::core::history::{Episode, Outcome};
use crate::core::state::AgentState;
use crate::store::kv::Backend;
use crate::store::test_backends::{on_both_backends, TestStore};
use crate::store::WorkspaceOp;

const TTL: Duration = Duration::from_secs(15);

fn later(secs: i64) -> DateTime<Utc> {
    Utc::now() + chrono::Duration::seconds(secs)
}

fn a_lease_is_held_renewed_expired_and_taken_over_with_a_new_token(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let (a, b) = (LeaseOwner::random(), LeaseOwner::random());
    let now = Utc::now();
    assert_eq!(
        store.acquire_lease("x", a, now, TTL).unwrap(),
        Acquired::Held(Fence(1))
    );
    // Held and not expired: another owner is refused, the holder keeps its token.
    assert!(matches!(
        store.acquire_lease("x", b, now, TTL).unwrap(),
        Acquired::Elsewhere { owner, .. } if owner == a
    ));
    assert_eq!(
        store.acquire_lease("x", a, later(5), TTL).unwrap(),
        Acquired::Held(Fence(1))
    );
    // A renewal pushes the expiry past the first one: at 25 s it still holds.
    assert_eq!(
        store.renew_lease("x", a, Fence(1), later(10), TTL).unwrap(),
        Renewal::Renewed
    );
    assert!(matches!(
        store.acquire_lease("x", b, later(20), TTL).unwrap(),
        Acquired::Elsewhere { .. }
    ));
    // Expired: taken over with the next token; the old holder can neither renew nor write.
    assert_eq!(
        store.acquire_lease("x", b, later(30), TTL).unwrap(),
        Acquired::Held(Fence(2))
    );
    assert_eq!(
        store.renew_lease("x", a, Fence(1), later(31), TTL).unwrap(),
        Renewal::Lost
    );
    assert!(matches!(
        store.acquire_lease("x", a, later(31), TTL).unwrap(),
        Acquired::Elsewhere { owner, .. } if owner == b
    ));
    // A release by the old holder leaves the new one's lease alone.
    store.release_lease("x", a, Fence(1)).unwrap();
    assert_eq!(store.lease("x").unwrap().unwrap().owner, b);
    // Released, the lease reads as expired and keeps its token, which the next owner goes past.
    store.release_lease("x", b, Fence(2)).unwrap();
    assert_eq!(store.lease("x").unwrap().unwrap().fence, Fence(2));
    assert_eq!(
        store.acquire_lease("x", a, later(32), TTL).unwrap(),
        Acquired::Held(Fence(3))
    );
    // Another agent's lease is its own.
    assert_eq!(
        store.acquire_lease("y", b, later(32), TTL).unwrap(),
        Acquired::Held(Fence(1))
    );
}

fn step(cycle: u64) -> Episode {
    Episode {
        cycle,
        command: CommandCall::default(),
        reasoning: "r".into(),
        outcome: Outcome::Success("ok".into()),
        summary: None,
        decided_by: None,
        edited_by: Vec::new(),
        cost: crate::core::budget::Micros::ZERO,
    }
}

fn a_write_with_a_stale_token_is_refused_and_writes_nothing(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let (old, new) = (LeaseOwner::random(), LeaseOwner::random());
    let Acquired::Held(stale) = store.acquire_lease("x", old, Utc::now(), TTL).unwrap() else {
        panic!("a new agent's lease is free");
    };
    let mut agent = AgentState::for_test("x");
    agent.progress.cycle = 1;
    store
        .commit_fenced(
            &Commit {
                state: Some(&agent),
                ..Default::default()
            },
            Some(stale),
        )
        .unwrap();
    let Acquired::Held(fresh) = store.acquire_lease("x", new, later(60), TTL).unwrap() else {
        panic!("an expired lease is taken over");
    };
    assert!(fresh > stale);
    // The late writer's whole step: its record, a step, a file and a trail entry.
    let mut late = agent.clone();
    late.progress.cycle = 2;
    late.progress.episodes.push(step(1));
    let refused = store.commit_fenced(
        &Commit {
            state: Some(&late),
            episodes: late.progress.episodes.iter().collect(),
            workspace: vec![WorkspaceOp::Put {
                path: "late.txt".into(),
                contents: b"late".to_vec(),
            }],
            ..Default::default()
        },
        Some(stale),
    );
    assert!(
        matches!(&refused, Err(StoreError::LeaseLost { agent }) if agent == "x"),
        "{refused:?}"
    );
    let call = CommandCall::default();
    let started = store.record_start_fenced("x", 2, &call, Utc::now(), &[], Some(stale));
    assert!(matches!(started, Err(StoreError::LeaseLost { .. })));
    let journalled = store.record_executing_fenced("x", 2, &call, Utc::now(), Some(stale));
    assert!(matches!(journalled, Err(StoreError::LeaseLost { .. })));
    let stored = store.load_agent("x").unwrap().unwrap();
    assert_eq!(stored.progress.cycle, 1);
    assert!(stored.progress.episodes.is_empty());
    assert_eq!(store.read_file("x", "late.txt").unwrap(), None);
    assert_eq!(store.journal_entry("x", 2).unwrap(), None);
    // The new owner's token writes.
    late.progress.episodes.clear();
    store
        .commit_fenced(
            &Commit {
                state: Some(&late),
                ..Default::default()
            },
            Some(fresh),
        )
        .unwrap();
    store
        .record_executing_fenced("x", 2, &call, Utc::now(), Some(fresh))
        .unwrap();
    assert_eq!(store.load_agent("x").unwrap().unwrap().progress.cycle, 2);
    assert!(store.journal_entry("x", 2).unwrap().is_some());
}

fn decision(by: &str) -> crate::store::DecisionRecord {
    crate::store::DecisionRecord {
        decision: crate::core::decision::Decision::Approve,
        by: by.into(),
        at: Utc::now(),
    }
}

/// A process whose lease was taken over can neither record a decision, nor clear one, nor fold
/// the agent's steps: each fails with `LeaseLost` and writes nothing. The new owner's token does
/// all three, and its decisions still go to the first click.
fn a_stale_owner_can_neither_decide_nor_clear_a_decision_nor_fold_steps(backend: Backend) {
    let Some(db) = TestStore::on(backend) else {
        return;
    };
    let store = db.open();
    let (old, new) = (LeaseOwner::random(), LeaseOwner::random());
    let Acquired::Held(stale) = store.acquire_lease("x", old, Utc::now(), TTL).unwrap() else {
        panic!("a new agent's lease is free");
    };
    assert_eq!(
        store
            .record_decision_fenced("x", 1, &decision("alice"), Some(stale))
            .unwrap(),
        Ok(())
    );
    let Acquired::Held(fresh) = store.acquire_lease("x", new, later(60), TTL).unwrap() else {
        panic!("an expired lease is taken over");
    };
    // The stale owner's decision on the open cycle is refused, and none is stored.
    let refused = store.record_decision_fenced("x", 2, &decision("mallory"), Some(stale));
    assert!(
        matches!(&refused, Err(StoreError::LeaseLost { agent }) if agent == "x"),
        "{refused:?}"
    );
    assert_eq!(store.decided_by("x", 2).unwrap(), None);
    // The new owner's first click wins and a second gets the winner back, fenced as unfenced.
    assert_eq!(
        store
            .record_decision_fenced("x", 2, &decision("bob"), Some(fresh))
            .unwrap(),
        Ok(())
    );
    let lost = store
        .record_decision_fenced("x", 2, &decision("carol"), Some(fresh))
        .unwrap()
        .unwrap_err();
    assert_eq!(lost.by.names(), "bob");
    // The stale owner cannot clear it either; the new owner can.
    let cleared = store.clear_decision_fenced("x", 2, Some(stale));
    assert!(
        matches!(cleared, Err(StoreError::LeaseLost { .. })),
        "{cleared:?}"
    );
    assert_eq!(store.decided_by("x", 2).unwrap().unwrap().names(), "bob");
    store.clear_decision_fenced("x", 2, Some(fresh)).unwrap();
    assert_eq!(store.decided_by("x", 2).unwrap(), None);
    // Enough steps to fold (stored by the new owner, at a cycle that does not fold by itself).
    let mut agent = AgentState::for_test("x");
    agent.progress.cycle = 131;
    let steps: Vec<Episode> = (1..=130).map(step).collect();
    store
        .commit_fenced(
            &Commit {
                state: Some(&agent),
                episodes: steps.iter().collect(),
                ..Default::default()
            },
            Some(fresh),
        )
        .unwrap();
    let chunks = |store: &Store| store.episode_chunks.scan_prefix(b"x/").count();
    let folded = store.fold_steps_fenced("x", Some(stale));
    assert!(
        matches!(folded, Err(StoreError::LeaseLost { .. })),
        "{folded:?}"
    );
    assert_eq!(chunks(&store), 0);
    assert_eq!(store.episodes.scan_prefix(b"x/").count(), 130);
    assert_eq!(store.fold_steps_fenced("x", Some(fresh)).unwrap(), 66);
    assert_eq!(chunks(&store), 1);
    // A fenced commit closing a cycle takes its decision record with it, in the same write.
    store
        .record_decision_fenced("x", 131, &decision("bob"), Some(fresh))
        .unwrap()
        .unwrap();
    let mut closing = step(131);
    closing.decided_by = Some("bob".into());
    agent.progress.cycle = 132;
    store
        .commit_fenced(
            &Commit {
                state: Some(&agent),
                episodes: vec![&closing],
                ..Default::default()
            },
            Some(fresh),
        )
        .unwrap();
    assert!(!store.decisions.contains_key(b"x/0000000000000083").unwrap());
    assert_eq!(store.decided_by("x", 131).unwrap().unwrap().names(), "bob");
}

on_both_backends!(
    a_lease_is_held_renewed_expired_and_taken_over_with_a_new_token,
    a_write_with_a_stale_token_is_refused_and_writes_nothing,
    a_stale_owner_can_neither_decide_nor_clear_a_decision_nor_fold_steps,
);

/// Two processes (two stores on one database) race for forty expired leases from four threads:
/// each lease is taken once, each with the token after the expired one's.
#[test]
fn two_processes_racing_for_expired_leases_take_each_once_with_the_next_token() {
    let Some(db) = TestStore::on(Backend::Postgres) else {
        return;
    };
    let stores = [db.open(), db.open()];
    let agents: Vec<String> = (0..40).map(|n| format!("agent{n}")).collect();
    for agent in &agents {
        for round in 0..5 {
            // Five earlier owners an hour ago, each taking over when the one before's lease had
            // expired, the last one gone without a release: its token is 5.
            let at = Utc::now() - chrono::Duration::seconds(3600 - 100 * round);
            let taken = stores[0].acquire_lease(agent, LeaseOwner::random(), at, TTL);
            assert!(matches!(taken.unwrap(), Acquired::Held(_)));
        }
        assert_eq!(stores[0].lease(agent).unwrap().unwrap().fence, Fence(5));
    }
    let owners: Vec<LeaseOwner> = (0..4).map(|_| LeaseOwner::random()).collect();
    let wins: Vec<Vec<(String, Fence)>> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..4)
            .map(|racer| {
                let (store, owner, agents) = (&stores[racer % 2], owners[racer], &agents);
                scope.spawn(move || {
                    agents
                        .iter()
                        .filter_map(|agent| {
                            match store.acquire_lease(agent, owner, Utc::now(), TTL).unwrap() {
                                Acquired::Held(fence) => Some((agent.clone(), fence)),
                                Acquired::Elsewhere { .. } => None,
                            }
                        })
                        .collect()
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let taken: Vec<&(String, Fence)> = wins.iter().flatten().collect();
    assert_eq!(taken.len(), agents.len(), "each lease once: {taken:?}");
    for agent in &agents {
        let winner = wins
            .iter()
            .position(|won| won.iter().any(|(won, _)| won == agent))
            .unwrap_or_else(|| panic!("nobody took {agent}"));
        let lease = stores[1].lease(agent).unwrap().unwrap();
        assert_eq!(lease.owner, owners[winner]);
        assert_eq!(lease.fence, Fence(6));
    }
    assert!(taken.iter().all(|(_, fence)| *fence == Fence(6)));
}

/// One process keeps writing an agent's steps with its token while another takes the lease over
/// and writes once: no write of the first lands after the takeover, so the second's stays.
#[test]
fn a_late_writer_racing_a_takeover_never_lands_after_it() {
    let Some(db) = TestStore::on(Backend::Postgres) else {
        return;
    };
    let (first, second) = (db.open(), db.open());
    let (old, new) = (LeaseOwner::random(), LeaseOwner::random());
    let Acquired::Held(stale) = first.acquire_lease("x", old, Utc::now(), TTL).unwrap() else {
        panic!("a new agent's lease is free");
    };
    let landed = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut agent = AgentState::for_test("x");
            let mut landed = 0u64;
            for cycle in 1..10_000 {
                agent.progress.cycle = cycle;
                let commit = Commit {
                    state: Some(&agent),
                    ..Default::default()
                };
                match first.commit_fenced(&commit, Some(stale)) {
                    Ok(()) => landed = cycle,
                    Err(StoreError::LeaseLost { .. }) => return landed,
                    Err(e) => panic!("{e}"),
                }
            }
            panic!("the takeover never reached the writer");
        });
        // Let the writer land some steps first.
        while second.load_agent_record("x").unwrap().is_none() {
            std::thread::yield_now();
        }
        let Acquired::Held(fresh) = second.acquire_lease("x", new, later(60), TTL).unwrap() else {
            panic!("an expired lease is taken over");
        };
        let mut agent = AgentState::for_test("x");
        agent.progress.cycle = 1_000_000;
        second
            .commit_fenced(
                &Commit {
                    state: Some(&agent),
                    ..Default::default()
                },
                Some(fresh),
            )
            .unwrap();
        writer.join().unwrap()
    });
    assert!(landed >= 1);
    let stored = second.load_agent_record("x").unwrap().unwrap();
    assert_eq!(stored.progress.cycle, 1_000_000);
}
