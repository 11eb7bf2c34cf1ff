//! One owner per agent: concurrent sends to a resting agent start exactly one actor, and events
//! sent while actors come to rest are all applied, none lost in a mailbox nobody reads.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use autothread::core::budget::Micros;
use autothread::core::event::Event;
use autothread::core::state::{PauseReason, Phase};
use autothread::llm::{ChatModel, ChatReply, ChatRequest, LlmError};
use autothread::runtime::supervisor::{SendError, Supervisor};
use autothread::store::{Commit, Store};
use support::inproc::{agent, deps, Recorder};

/// A model that never answers within a test, so that an agent asked to think stays running.
struct Silent;

#[async_trait]
impl ChatModel for Silent {
    async fn complete(&self, _request: ChatRequest) -> Result<ChatReply, LlmError> {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Err(LlmError::BadResponse("silent".into()))
    }
}

/// A supervisor over a store holding one agent paused by a person.
fn resting_agent(dir: &tempfile::TempDir, id: &str) -> (Supervisor, Arc<Recorder>, Store) {
    let store = Store::open(dir.path()).unwrap();
    let mut state = agent(id, "Wait", "local-model", false);
    state.progress.phase = Phase::Paused(PauseReason::ByUser {
        by: autothread::core::person::Person::discord(9, "owner"),
    });
    store
        .commit(&Commit {
            state: Some(&state),
            ..Default::default()
        })
        .unwrap();
    let mut config = autothread::config::Config::default();
    config.llm.model = "local-model".into();
    config.budget.free_models = vec!["local-model".into()];
    config.budget.guild_calls_per_minute = 0;
    let recorder = Arc::new(Recorder::default());
    let deps = deps(&store, Arc::new(Silent), recorder.clone(), config, None);
    (Supervisor::new(deps), recorder, store)
}

fn notices_containing(recorder: &Recorder, needle: &str) -> usize {
    recorder
        .notices
        .lock()
        .unwrap()
        .iter()
        .filter(|n| n.contains(needle))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_sends_to_a_resting_agent_start_exactly_one_actor() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, recorder, _store) = resting_agent(&dir, "owner0000001");
    let sends: Vec<_> = (0..50u64)
        .map(|i| {
            let supervisor = supervisor.clone();
            tokio::spawn(async move {
                supervisor.send(
                    "owner0000001",
                    Event::Resume {
                        by: autothread::core::person::Person::discord(i, format!("member{i}")),
                        follow_up: None,
                    },
                )
            })
        })
        .collect();
    for send in sends {
        send.await.unwrap().expect("every send is delivered");
    }
    // One resume started the agent thinking (its model never answers); the 49 others reached
    // the same actor, which said it was already running.
    let mut answered = 0;
    for _ in 0..200 {
        answered = notices_containing(&recorder, "already running");
        if answered == 49 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(answered, 49);
    assert_eq!(supervisor.actors_started(), 1);
    assert!(supervisor.is_running("owner0000001"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_sent_while_actors_come_to_rest_are_all_applied() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, recorder, store) = resting_agent(&dir, "owner0000002");
    // Each budget change wakes the paused agent, which applies it and rests again: actors start
    // and stop all the time while eight senders keep sending.
    let senders: Vec<_> = (0..8u64)
        .map(|sender| {
            let supervisor = supervisor.clone();
            tokio::spawn(async move {
                let mut delivered = 0;
                for i in 0..50u64 {
                    let event = Event::SetBudget {
                        budget: Micros(1_000_000 + sender * 1_000 + i),
                        by: autothread::core::person::Person::discord(
                            sender,
                            format!("sender{sender}"),
                        ),
                    };
                    match supervisor.send("owner0000002", event) {
                        Ok(()) => delivered += 1,
                        // A full mailbox answers so, and the event is not taken.
                        Err(SendError::Busy) => {}
                        Err(other) => panic!("{other}"),
                    }
                    if i % 7 == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                delivered
            })
        })
        .collect();
    let mut delivered = 0;
    for sender in senders {
        delivered += sender.await.unwrap();
    }
    assert!(delivered >= 50, "only {delivered} of 400 were taken");
    for _ in 0..500 {
        if !supervisor.is_running("owner0000002") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!supervisor.is_running("owner0000002"));
    assert_eq!(
        notices_containing(&recorder, "set the agent's budget"),
        delivered,
        "every delivered event was applied"
    );
    assert!(supervisor.actors_started() >= 1);
    let state = store.load_agent("owner0000002").unwrap().unwrap();
    assert!(state
        .brief
        .settings
        .budget
        .is_some_and(|b| b >= Micros(1_000_000)));
}
