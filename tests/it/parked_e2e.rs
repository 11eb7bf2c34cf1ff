//! Parked agents in Discord: an agent out of budget gets a card with [+$1] [+$5] [Stop] that only
//! those who may raise that budget can use, and a loop under Approve ×N is parked by the runaway
//! brake with [Continue] [Raise budget +$1] [Stop].

use crate::support;

use serde_json::{json, Value};
use support::bot::{answer, button, card, start_agent, start_bot, Start};
use support::fake_discord::{FakeDiscord, ALICE, CAROL};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind};
use support::{TestEnv, WAIT};

/// The card as the click's own response (type 7, UPDATE_MESSAGE) rewrote it.
async fn updated_card(discord: &FakeDiscord, click: u64) -> Value {
    discord
        .wait_for("the card updated by the click", WAIT, |d| {
            d.callbacks(click)
                .into_iter()
                .find(|c| c.kind == 7)
                .map(|c| c.data)
        })
        .await
}

fn field<'a>(card: &'a Value, name: &str) -> &'a str {
    card["embeds"][0]["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["name"] == name)
        .and_then(|f| f["value"].as_str())
        .unwrap_or_else(|| panic!("no {name} field on {card}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_out_of_budget_gets_a_card_its_owner_raises_from() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for i in 0..3 {
        openai.push_content(agent_reply(
            "read_file",
            json!({"filename": format!("{i}.txt")}),
        ));
    }
    openai.push_content(agent_reply("finish", json!({"reason": "read enough"})));
    // Every call reports 400 completion tokens at $100 per million: 0.04 dollars a call.
    openai.set_usage(100, 400);
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_budget(
        &openai.base_url,
        "",
        "guild_calls_per_minute = 0\n[budget.prices.\"test-model\"]\ninput_per_million = 0.0\noutput_per_million = 100.0\n",
    );
    let _bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Read files",
            name: Some("ReaderGPT"),
            continuous: Some(20),
            budget: Some(0.1),
            ..Start::default()
        },
    )
    .await;
    // At the soft cap (80% of the budget) Approve ×N stops asking nobody.
    let second = card(&discord, thread, "ReaderGPT · cycle 2").await;
    discord.click(ALICE, &[], &second, &button(&second, "Approve"));
    let parked = card(
        &discord,
        thread,
        "⏸️ ReaderGPT paused: the agent's budget ran out",
    )
    .await;
    assert!(
        field(&parked, "Spent").ends_with("of $0.10 (the agent's budget)"),
        "{parked}"
    );
    let labels: Vec<&str> = parked["components"][0]["components"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["label"].as_str())
        .collect();
    assert_eq!(labels, ["+$1", "+$5", "Stop"]);

    // Someone the agent is not shared with may not raise its budget.
    let plus_one = button(&parked, "+$1");
    let refused = discord.click(CAROL, &[], &parked, &plus_one);
    assert!(answer(&discord, refused, true)
        .await
        .starts_with("Only the agent's owner"));
    let calls_while_parked = openai.requests(Kind::Cycle).len();

    // The owner raises it: the card says so and loses its buttons, and the agent goes on.
    let raised = discord.click(ALICE, &[], &parked, &plus_one);
    let updated = updated_card(&discord, raised).await;
    assert!(
        field(&updated, "Decided").contains("raised the agent's budget to $1.10"),
        "{updated}"
    );
    assert_eq!(updated["components"], json!([]));
    // Approve ×N ended at the soft cap: the last read and the finish are asked for.
    for cycle in 3..=4 {
        let next = card(&discord, thread, &format!("ReaderGPT · cycle {cycle}")).await;
        discord.click(ALICE, &[], &next, &button(&next, "Approve"));
    }
    card(&discord, thread, "ReaderGPT finished").await;
    assert!(openai.requests(Kind::Cycle).len() > calls_while_parked);

    // The same button later changes nothing.
    let late = discord.click(ALICE, &[], &parked, &plus_one);
    assert!(answer(&discord, late, true)
        .await
        .starts_with("This agent is no longer parked"));
    let status = discord.slash(ALICE, &[], thread, "status", json!([]), json!({}));
    let text = answer(&discord, status, true).await;
    assert!(text.contains(" of $1.10 ("), "{text}");
    discord.assert_clean();
    openai.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_loop_under_approve_n_is_parked_by_the_brake_within_the_threshold() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    // The model alternates between two listings of the same empty workspace, forever. They
    // succeed: failing steps would bring the stuck panel before the brake.
    for i in 0..12 {
        let name = if i % 2 == 0 { "." } else { "./" };
        openai.push_content(agent_reply("list_folder", json!({ "folder": name })));
    }
    let discord = FakeDiscord::start().await;
    // A generous timeout: under a loaded test run, a reply cut short by the 2 s default would be
    // paid for and asked again, taking the next scripted reply out of its turn.
    let env = TestEnv::with_budget(
        &openai.base_url,
        "timeout_secs = 30\n",
        "guild_calls_per_minute = 0\nrunaway_repeat_steps = 4\n",
    );
    let _bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Find the notes",
            name: Some("LoopGPT"),
            continuous: Some(20),
            ..Start::default()
        },
    )
    .await;
    let parked = card(&discord, thread, "🛑 LoopGPT parked by the runaway brake").await;
    let why = parked["embeds"][0]["description"].as_str().unwrap_or("");
    assert!(why.contains("its last 4 steps repeat one another"), "{why}");
    // The threshold is crossed by the fourth step; no further cycle was paid for.
    assert_eq!(openai.requests(Kind::Cycle).len(), 4);
    assert!(field(&parked, "Spent").contains("(the agent's budget)"));
    for label in ["Continue", "Raise budget +$1", "Stop"] {
        button(&parked, label);
    }

    let stranger = discord.click(CAROL, &[], &parked, &button(&parked, "Continue"));
    assert!(answer(&discord, stranger, true)
        .await
        .starts_with("Only the agent's owner"));
    let stop = discord.click(ALICE, &[], &parked, &button(&parked, "Stop"));
    let updated = updated_card(&discord, stop).await;
    assert!(
        field(&updated, "Decided").starts_with("Stopped by"),
        "{updated}"
    );
    // Stopped, it is a human's pause: Continue on the old card no longer applies.
    let late = discord.click(ALICE, &[], &parked, &button(&parked, "Continue"));
    assert!(answer(&discord, late, true)
        .await
        .starts_with("This agent is no longer parked"));
    let status = discord.slash(ALICE, &[], thread, "status", json!([]), json!({}));
    let text = answer(&discord, status, true).await;
    assert!(text.contains("paused by"), "{text}");
    assert_eq!(openai.requests(Kind::Cycle).len(), 4);
    discord.assert_clean();
}
