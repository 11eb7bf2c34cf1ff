//! A rate-limited agent waits and then resumes, on governor's fake clock: the runtime's clock
//! seam and the pacer share one fake time, so the test moves time forward and nothing sleeps.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use autothread::budget::pace::{PaceLimits, Pacer};
use autothread::budget::Budgets;
use autothread::clock::Clock;
use autothread::config::Config;
use autothread::core::state::Phase;
use autothread::llm::tokens::TiktokenCounter;
use autothread::runtime::{self, Deps};
use autothread::store::Store;
use autothread::tools::Registry;
use serde_json::json;
use support::inproc::{agent, reply, FakeClock, Recorder, ScriptedModel};

/// Waits (in real time, bounded) until `done` holds; the agent itself never sleeps for real.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_agent_waits_on_the_fake_clock_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut config = Config::default();
    config.llm.model = "local-model".into();
    config.budget.free_models = vec!["local-model".into()];
    let clock = FakeClock::default();
    // One call per minute for the guild: the second call of the run must wait.
    let pacer = Pacer::with_clock(
        PaceLimits {
            guild_calls_per_minute: 1,
            ..Default::default()
        },
        clock.time.clone(),
    );
    let budgets = Budgets::with_pacer(&store, &config.budget, Arc::new(pacer)).unwrap();
    let model = Arc::new(ScriptedModel::new([
        reply("read_file", json!({"filename": "notes.txt"})),
        reply("finish", json!({"reason": "done"})),
    ]));
    let surface = Arc::new(Recorder::default());
    let deps = Deps {
        store: store.clone(),
        model: model.clone(),
        tools: Arc::new(Registry::standard(&config.agent)),
        surface: surface.clone(),
        config: Arc::new(config),
        counter: Arc::new(TiktokenCounter::for_model("gpt-4o-mini")),
        clock: Arc::new(clock.clone()),
        budgets: Arc::new(budgets),
        memory: None,
        web: None,
        drain: Default::default(),
        runtime: tokio::runtime::Handle::current(),
    };
    let mut state = agent(
        "paced0000001",
        "Read notes.txt, then finish",
        "local-model",
        true,
    );
    // The agent lives in the fake clock's time.
    state.created_at = clock.now();
    state.updated_at = clock.now();
    let (_handle, done) = runtime::start(state, autothread::core::event::Event::Start, deps);

    // Cycle 1's call passes; its command runs by itself (continuous mode).
    eventually("the first proposal", || {
        surface.proposals.lock().unwrap().contains(&1)
    })
    .await;
    // Cycle 2 needs two calls (the summary of step 1 and the next step): the guild's minute is
    // spent, so the agent says until when it waits, and waits.
    eventually("the rate-limit notice", || {
        surface.notices.lock().unwrap().iter().any(|n| {
            n.starts_with(
                "Rate limited: waiting until 00:01:00 UTC for the server's model calls per minute",
            )
        })
    })
    .await;
    let waiting = store.load_agent("paced0000001").unwrap().unwrap();
    assert_eq!(waiting.progress.phase, Phase::Thinking);
    assert!(
        waiting.progress.paced.is_some(),
        "status can say until when"
    );
    assert!(!surface.proposals.lock().unwrap().contains(&2));

    // Time moves on a minute at a time; the agent proceeds without ever sleeping for real.
    for _ in 0..10 {
        if done.is_finished() {
            break;
        }
        clock.advance(Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let finished = tokio::time::timeout(Duration::from_secs(10), done)
        .await
        .expect("the agent finishes once time has moved on")
        .unwrap()
        .unwrap();
    assert!(
        matches!(finished.progress.phase, Phase::Finished { .. }),
        "{:?}",
        finished.progress.phase
    );
    assert_eq!(model.cycle_calls(), 2);
    let second = finished
        .progress
        .episodes
        .iter()
        .find(|e| e.cycle == 2)
        .unwrap();
    assert_eq!(second.command.name, "finish");
    assert!(surface.proposals.lock().unwrap().contains(&2));
}
