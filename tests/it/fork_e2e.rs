//! `/agent fork` end to end: a new agent in a new thread with the history, memories and
//! workspace of another as they were after a cycle, for the original's deciders only, and the
//! original untouched.

use crate::support;

use crate::approvals_e2e::field;
use serde_json::{json, Value};
use support::bot::{
    answer, button, button_labels, card, message_containing, start_agent, start_bot, title, Start,
};
use support::fake_discord::{FakeDiscord, ALICE, BOB};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind};
use support::TestEnv;

/// The text of every plain message in `thread`, oldest first: the notices a person reads.
fn thread_texts(discord: &FakeDiscord, thread: u64) -> Vec<String> {
    discord
        .messages_in(thread)
        .iter()
        .filter_map(|m| m["content"].as_str())
        .filter(|text| !text.is_empty())
        .map(str::to_string)
        .collect()
}

/// `shown` as `thread` holds it now (edited since, perhaps).
fn message_by_id(discord: &FakeDiscord, thread: u64, shown: &Value) -> Value {
    discord
        .messages_in(thread)
        .into_iter()
        .find(|m| m["id"] == shown["id"])
        .unwrap_or_else(|| panic!("{} is gone", shown["id"]))
}

/// The text of every message of a cycle request, joined: what the model was shown.
fn prompt_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_starts_from_the_history_memories_and_workspace_of_a_past_cycle() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for contents in ["first draft", "second draft"] {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": "draft.txt", "contents": contents}),
        ));
    }
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "notes.txt", "contents": "late"}),
    ));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_memory(&openai.base_url, "");
    let _bot = start_bot(&env, &discord).await;
    let original = start_agent(
        &discord,
        Start {
            task: "Write a draft",
            name: Some("DraftGPT"),
            ..Start::default()
        },
    )
    .await;
    for cycle in 1..=2 {
        let shown = card(&discord, original, &format!("DraftGPT · cycle {cycle}")).await;
        discord.click(ALICE, &[], &shown, &button(&shown, "Approve"));
    }
    let waiting = card(&discord, original, "DraftGPT · cycle 3").await;

    // Only the original's deciders may fork it, and only from a cycle that closed.
    let fork =
        |user, options: Value| discord.slash(user, &[], original, "fork", options, json!({}));
    let refused = fork(BOB, json!([]));
    assert!(answer(&discord, refused, true)
        .await
        .starts_with("Only the agent's owner"));
    let refused = fork(
        ALICE,
        json!([{"name": "from_cycle", "type": 4, "value": 3}]),
    );
    assert_eq!(
        answer(&discord, refused, true).await,
        "It cannot go back to cycle 3: cycle 3 has not finished yet: the last finished cycle is 2."
    );
    assert_eq!(discord.threads().len(), 1, "a refused fork opens no thread");

    // The fork after cycle 1 reads its draft: the first one.
    openai.push_content(agent_reply("read_file", json!({"filename": "draft.txt"})));
    openai.push_content(agent_reply("read_file", json!({"filename": "notes.txt"})));
    let forked = fork(
        ALICE,
        json!([{"name": "from_cycle", "type": 4, "value": 1}]),
    );
    let said = answer(&discord, forked, true).await;
    assert!(said.starts_with("Forked into <#"), "{said}");
    let threads = discord.threads();
    assert_eq!(threads.len(), 2);
    assert_eq!(threads[1]["name"], "DraftGPT (fork after cycle 1)");
    let fork_thread: u64 = threads[1]["id"].as_str().unwrap().parse().unwrap();
    let origin = message_containing(&discord, fork_thread, "🍴 Forked from **DraftGPT**").await;
    let origin = origin["content"].as_str().unwrap();
    assert!(
        origin.ends_with("as it was after cycle 1, by alice: 1 steps, 1 memories and 1 files."),
        "{origin}"
    );
    message_containing(
        &discord,
        original,
        "🍴 alice forked this agent after cycle 1",
    )
    .await;
    // The fork has no files of its own from before it began.
    let too_old = discord.slash(
        ALICE,
        &[],
        fork_thread,
        "fork",
        json!([{"name": "from_cycle", "type": 4, "value": 0}]),
        json!({}),
    );
    assert_eq!(
        answer(&discord, too_old, true).await,
        "It cannot go back to cycle 0: its files are kept from cycle 1 on: choose cycle 1 or later."
    );
    let read = card(&discord, fork_thread, "DraftGPT · cycle 2").await;
    discord.click(ALICE, &[], &read, &button(&read, "Approve"));
    card(&discord, fork_thread, "DraftGPT · cycle 3").await;
    let prompts = openai.requests(Kind::Cycle);
    let shown = prompt_text(prompts.last().unwrap());
    assert!(shown.contains("first draft"), "{shown}");
    assert!(
        !shown.contains("second draft"),
        "the fork saw a later cycle:\n{shown}"
    );

    // The original goes on where it was, with its own history.
    openai.push_content(agent_reply("read_file", json!({"filename": "draft.txt"})));
    discord.click(ALICE, &[], &waiting, &button(&waiting, "Approve"));
    card(&discord, original, "DraftGPT · cycle 4").await;
    let prompts = openai.requests(Kind::Cycle);
    let shown = prompt_text(prompts.last().unwrap());
    assert!(
        shown.contains("second draft") && shown.contains("notes.txt"),
        "{shown}"
    );
    discord.assert_clean();
    openai.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_puts_the_agent_back_in_place_for_its_owner_after_a_confirmation() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for contents in ["first draft", "second draft"] {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": "draft.txt", "contents": contents}),
        ));
    }
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "notes.txt", "contents": "late"}),
    ));
    openai.push_content(agent_reply("read_file", json!({"filename": "notes.txt"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_memory(&openai.base_url, "");
    let _bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Write a draft",
            name: Some("BackGPT"),
            ..Start::default()
        },
    )
    .await;
    for cycle in 1..=3 {
        let shown = card(&discord, thread, &format!("BackGPT · cycle {cycle}")).await;
        discord.click(ALICE, &[], &shown, &button(&shown, "Approve"));
    }
    let stale = card(&discord, thread, "BackGPT · cycle 4").await;

    let rewind = |user, cycle: u64| {
        let options = json!([{"name": "cycle", "type": 4, "value": cycle}]);
        discord.slash(user, &[], thread, "rewind", options, json!({}))
    };
    let refused = rewind(BOB, 1);
    assert!(answer(&discord, refused, true)
        .await
        .starts_with("Only the agent's owner"));
    let refused = rewind(ALICE, 4);
    assert_eq!(
        answer(&discord, refused, true).await,
        "It cannot go back to cycle 4: cycle 4 has not finished yet: the last finished cycle is 3."
    );
    let asked = rewind(ALICE, 1);
    let confirm = support::bot::response_shown(&discord, thread, asked, 4).await;
    let text = confirm["content"].as_str().unwrap();
    assert!(
        text.starts_with("Rewind **BackGPT** to how it was after cycle 1? The 2 steps after it"),
        "{text}"
    );
    let go = button(&confirm, "Rewind to cycle 1");
    let refused = discord.click(BOB, &[], &confirm, &go);
    assert!(answer(&discord, refused, true)
        .await
        .starts_with("Only the agent's owner"));

    // Confirmed: the agent thinks again from cycle 1, under a new cycle number, by itself.
    openai.push_content(agent_reply("read_file", json!({"filename": "draft.txt"})));
    discord.click(ALICE, &[], &confirm, &go);
    let told = message_containing(&discord, thread, "⏪ alice rewound **BackGPT**").await;
    assert!(
        told["content"]
            .as_str()
            .unwrap()
            .contains("after cycle 1: 2 later steps, their memories and their file changes are undone. It starts again by itself from there, with cycle 5;"),
        "{told}"
    );
    let next = card(&discord, thread, "BackGPT · cycle 5").await;
    assert!(button_labels(&next).iter().any(|label| label == "Approve"));
    // The thread said why it paused, and nowhere that anyone must resume it.
    let paused: Vec<String> = thread_texts(&discord, thread)
        .into_iter()
        .filter(|text| text.starts_with("⏸️"))
        .collect();
    assert_eq!(
        paused,
        ["⏸️ BackGPT paused by alice for a rewind to cycle 1."]
    );
    assert!(
        !thread_texts(&discord, thread)
            .iter()
            .any(|text| text.contains("/agent resume")),
        "{:?}",
        thread_texts(&discord, thread)
    );
    // The card that waited before the rewind is closed and says why.
    let superseded = message_by_id(&discord, thread, &stale);
    assert_eq!(
        field(&superseded, "Status"),
        Some(
            "⏪ Superseded: alice rewound the agent to how it was after cycle 1; this card no longer acts."
        )
    );
    assert_eq!(title(&superseded), "BackGPT · cycle 4");
    assert_eq!(button_labels(&superseded), Vec::<String>::new());
    // A click it showed before (an old client) decides nothing either.
    let late = discord.click(ALICE, &[], &stale, &button(&stale, "Approve"));
    assert!(!answer(&discord, late, true).await.is_empty());
    openai.push_content(agent_reply("read_file", json!({"filename": "notes.txt"})));
    discord.click(ALICE, &[], &next, &button(&next, "Approve"));
    card(&discord, thread, "BackGPT · cycle 6").await;
    let prompts = openai.requests(Kind::Cycle);
    let shown = prompt_text(prompts.last().unwrap());
    assert!(shown.contains("first draft"), "{shown}");
    assert!(
        !shown.contains("second draft") && !shown.contains("notes.txt\", \"contents\""),
        "the rewound steps are still shown:\n{shown}"
    );
    discord.assert_clean();
    openai.assert_clean();
}

/// A rewind of an agent a person stopped with Deny: the card keeps saying who denied it and now
/// also that the rewind superseded it, without buttons; the agent, resting, is not paused again,
/// and starts again by itself as the notice says, with a new card to decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_of_a_stopped_agent_closes_its_card_and_starts_it_again() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for contents in ["first draft", "second draft", "third draft"] {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": "draft.txt", "contents": contents}),
        ));
    }
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let _bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Write a draft",
            name: Some("BackGPT"),
            ..Start::default()
        },
    )
    .await;
    for cycle in 1..=2 {
        let shown = card(&discord, thread, &format!("BackGPT · cycle {cycle}")).await;
        discord.click(ALICE, &[], &shown, &button(&shown, "Approve"));
    }
    let denied = card(&discord, thread, "BackGPT · cycle 3").await;
    discord.click(ALICE, &[], &denied, &button(&denied, "Deny"));
    message_containing(&discord, thread, "⏸️ BackGPT stopped by alice").await;

    let options = json!([{"name": "cycle", "type": 4, "value": 1}]);
    let asked = discord.slash(ALICE, &[], thread, "rewind", options, json!({}));
    let confirm = support::bot::response_shown(&discord, thread, asked, 4).await;
    openai.push_content(agent_reply("read_file", json!({"filename": "draft.txt"})));
    discord.click(ALICE, &[], &confirm, &button(&confirm, "Rewind to cycle 1"));
    let told = message_containing(&discord, thread, "⏪ alice rewound **BackGPT**").await;
    assert!(
        told["content"]
            .as_str()
            .unwrap()
            .contains("It starts again by itself from there, with cycle 4;"),
        "{told}"
    );
    let next = card(&discord, thread, "BackGPT · cycle 4").await;
    assert!(button_labels(&next).iter().any(|label| label == "Approve"));

    let closed = message_by_id(&discord, thread, &denied);
    assert_eq!(
        field(&closed, "Status"),
        Some(
            "⛔ Denied (agent stopped) by alice. ⏪ Superseded: alice rewound the agent to how it was after cycle 1; this card no longer acts."
        )
    );
    assert_eq!(button_labels(&closed), Vec::<String>::new());
    let paused = thread_texts(&discord, thread)
        .into_iter()
        .filter(|text| text.starts_with("⏸️"))
        .count();
    assert_eq!(paused, 1, "the rewind did not pause a resting agent again");
    discord.assert_clean();
    openai.assert_clean();
}
