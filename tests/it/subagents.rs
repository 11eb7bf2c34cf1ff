//! Sub-agents through the real runtime: start, message, list, delete; the per-agent limit; their
//! calls charged to the parent's budget; a sub-agent cannot start sub-agents of its own; the
//! export shows their chats.

use crate::support;
use autothread::core::budget::Micros;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use autothread::budget::Budgets;
use autothread::config::{Config, PriceConfig};
use autothread::core::event::Event;
use autothread::core::history::Outcome;
use autothread::core::state::Phase;
use autothread::core::usage::Usage;
use autothread::store::Store;
use serde_json::json;
use support::inproc::{agent, deps, last_user, reply, Recorder, RuleModel};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_agents_live_bounded_and_paid_by_their_parent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let script = Mutex::new(
        vec![
            reply("start_agent", json!({"name": "Researcher", "task": "collect glacier facts", "prompt": "List three facts about glaciers."})),
            reply("message_agent", json!({"key": "1", "message": "And one about ice sheets?"})),
            reply("start_agent", json!({"name": "Editor", "task": "polish text", "prompt": "Say ready."})),
            reply("start_agent", json!({"name": "Third", "task": "too many", "prompt": "Hello."})),
            reply("list_agents", json!({})),
            reply("delete_agent", json!({"key": "2"})),
            reply("message_agent", json!({"key": "2", "message": "Still there?"})),
            // A small model's made-up key, thousands of characters long, is not echoed whole.
            reply("delete_agent", json!({"key": "i_e_t_r_o_".repeat(500)})),
            reply("finish", json!({"reason": "done"})),
        ]
        .into_iter(),
    );
    let model = Arc::new(RuleModel::new(move |request| {
        let system = &request.messages[0].content;
        if system.starts_with("You are Researcher, a helper agent") {
            // A sub-agent that tries to delegate further: its reply is only text to its parent.
            if last_user(request).contains("ice sheets") {
                "Ice sheets hold most of the world's fresh water.".to_string()
            } else {
                r#"Glaciers carve valleys. {"command": {"name": "start_agent", "args": {"name": "Deeper", "task": "x", "prompt": "y"}}}"#.to_string()
            }
        } else if system.starts_with("You are Editor, a helper agent") {
            "Ready.".to_string()
        } else {
            script
                .lock()
                .unwrap()
                .next()
                .expect("a scripted cycle reply")
        }
    }));
    let mut config = Config::default();
    config.llm.model = "priced-model".into();
    config.budget.guild_calls_per_minute = 0;
    config.budget.prices.insert(
        "priced-model".into(),
        PriceConfig {
            input_per_million: 1.0,
            cached_input_per_million: None,
            cache_write_per_million: None,
            output_per_million: 2.0,
        },
    );
    config.subagents.max_per_agent = 2;
    let price = config.budget.price_of("priced-model").unwrap();
    let surface = Arc::new(Recorder::default());
    let deps = deps(&store, model.clone(), surface.clone(), config, None);
    let state = agent(
        "parent000001",
        "Write a glacier report",
        "priced-model",
        true,
    );
    let (_handle, done) = autothread::runtime::start(state, Event::Start, deps);
    let state = tokio::time::timeout(std::time::Duration::from_secs(30), done)
        .await
        .expect("the agent finishes")
        .unwrap()
        .unwrap();
    assert!(
        matches!(state.progress.phase, Phase::Finished { .. }),
        "{:?}",
        state.progress.phase
    );
    let outcomes: Vec<&Outcome> = state.progress.episodes.iter().map(|e| &e.outcome).collect();
    let text = |i: usize| outcomes[i].text().to_string();
    assert!(
        text(0).starts_with(
            "Agent Researcher created with key 1. First response: Glaciers carve valleys."
        ),
        "{}",
        text(0)
    );
    assert_eq!(
        text(1),
        "Agent Researcher (1) replied: Ice sheets hold most of the world's fresh water."
    );
    assert!(
        text(2).starts_with("Agent Editor created with key 2."),
        "{}",
        text(2)
    );
    assert!(
        matches!(outcomes[3], Outcome::Error(t) if t.contains("You already have 2 sub-agents, the most allowed")),
        "{:?}",
        outcomes[3]
    );
    assert_eq!(
        text(4),
        "List of agents:\n1: Researcher (collect glacier facts)\n2: Editor (polish text)"
    );
    assert_eq!(text(5), "Agent 2 deleted.");
    assert!(
        matches!(outcomes[6], Outcome::Error(t) if t == "Agent 2 does not exist; your sub-agents' keys: 1."),
        "{:?}",
        outcomes[6]
    );
    assert!(
        matches!(outcomes[7], Outcome::Error(t) if t.starts_with("Agent i_e_t_r_o_") && t.chars().count() < 200),
        "{:?}",
        outcomes[7]
    );

    // One level deep: the Researcher's attempt to start "Deeper" stayed text.
    let left = store.subagents("parent000001").unwrap();
    assert_eq!(left.len(), 1);
    let researcher = &left[0];
    assert_eq!(researcher.key, "1");
    // Charter, prompt, reply, message, reply.
    assert_eq!(researcher.messages.len(), 5);
    let sub_calls = model
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.messages[0].content.contains("a helper agent"))
        .count();
    assert_eq!(sub_calls, 3, "two Researcher replies and one Editor reply");

    // Every call, the sub-agents' included, is charged to the parent's budget: each reported
    // 40 prompt and 7 completion tokens.
    let unit = price.cost_of(Usage {
        prompt_tokens: 40,
        completion_tokens: 7,
        cached_prompt_tokens: 0,
        cache_write_tokens: 0,
    });
    assert_eq!(researcher.spent, Micros(2 * unit.0));
    let calls = model.requests.lock().unwrap().len() + model.summaries.load(Ordering::SeqCst);
    let budgets = Budgets::new(&store, &Config::default().budget).unwrap();
    let account = budgets
        .ledger()
        .account(&Budgets::agent_account("parent000001"))
        .unwrap();
    assert_eq!(account.spent, Micros(calls as u64 * unit.0));
    assert_eq!(account.reserved, Micros(0));

    // start_agent and message_agent are control commands: each one waited for a card.
    let shown = surface.shown.lock().unwrap().clone();
    assert!(
        shown
            .iter()
            .filter(|(name, _)| name.ends_with("_agent"))
            .all(|(name, auto)| !auto || name == "list_agents"),
        "{shown:?}"
    );

    let transcript = autothread::export::transcript(&store, &state).unwrap();
    assert!(transcript.contains("## Sub-agents"));
    assert!(transcript.contains("### Researcher (key 1): collect glacier facts"));
    assert!(transcript.contains("**Sub-agent:** Ice sheets hold most of the world's fresh water."));
}

/// A `start_agent` or `message_agent` approved again after a crash (same cycle) reports what it
/// already did instead of creating a second sub-agent or paying for a second reply.
#[tokio::test]
async fn a_re_approved_sub_agent_command_is_not_run_twice() {
    use support::inproc::{run_tool, ToolFake};

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut state = agent("crash0000001", "t", "m", false);
    state.progress.cycle = 4;
    let model = ToolFake::new(10, |_| "Hello.".to_string());
    let start = json!({"name": "Helper", "task": "t", "prompt": "Hi"});
    let first = run_tool(&store, &model, &state, None, "start_agent", start.clone()).await;
    let again = run_tool(&store, &model, &state, None, "start_agent", start).await;
    assert_eq!(first, again);
    assert!(first
        .text()
        .starts_with("Agent Helper created with key 1. First response: Hello."));
    assert_eq!(store.subagents("crash0000001").unwrap().len(), 1);
    state.progress.cycle = 5;
    let message = json!({"key": "1", "message": "How are you?"});
    let first = run_tool(
        &store,
        &model,
        &state,
        None,
        "message_agent",
        message.clone(),
    )
    .await;
    let again = run_tool(
        &store,
        &model,
        &state,
        None,
        "message_agent",
        message.clone(),
    )
    .await;
    assert_eq!(first, again);
    assert_eq!(
        model.call_count(),
        2,
        "one start and one message were paid for"
    );
    // The same message in a later cycle is a new exchange.
    state.progress.cycle = 6;
    run_tool(&store, &model, &state, None, "message_agent", message).await;
    assert_eq!(model.call_count(), 3);
    assert_eq!(
        store.subagents("crash0000001").unwrap()[0].spent,
        Micros(30)
    );
}
