//! The live status message, the real bot against the fake Discord (which counts pins and typing
//! and counts edits past five in a channel within five seconds): one pinned
//! message per agent, edited in place as the agent waits for approval, runs a command and
//! finishes, with its cycle and spend.

use std::time::Duration;

use crate::support;

use serde_json::{json, Value};
use support::bot::{button, card, message_containing, start_agent, start_bot, title, Start, WAIT};
use support::fake_discord::{FakeDiscord, ALICE};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::TestEnv;

const STATUS_TITLE: &str = "📌 Live status — NoteGPT";

/// The thread's status messages (there must be exactly one).
fn status_messages(discord: &FakeDiscord, thread: u64) -> Vec<Value> {
    discord
        .messages_in(thread)
        .into_iter()
        .filter(|m| title(m) == STATUS_TITLE)
        .collect()
}

/// Waits until the status message's text contains every one of `needles`.
async fn status_saying(discord: &FakeDiscord, thread: u64, needles: &[&str]) -> Value {
    discord
        .wait_for(&format!("a status saying {needles:?}"), WAIT, |d| {
            status_messages(d, thread)
                .into_iter()
                .find(|m| needles.iter().all(|n| m["embeds"].to_string().contains(n)))
        })
        .await
}

/// Starts NoteGPT, which asks for a colour, in a new thread.
async fn start_note_agent(discord: &FakeDiscord) -> u64 {
    start_agent(
        discord,
        Start {
            task: "Ask for a colour",
            name: Some("NoteGPT"),
            ..Start::default()
        },
    )
    .await
}

/// Waits until the thread has a pinned message.
async fn wait_until_pinned(discord: &FakeDiscord, thread: u64) {
    discord
        .wait_for("the status pinned", WAIT, |d| {
            (!d.pinned_in(thread).is_empty()).then_some(())
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_status_follows_the_agent_from_approval_through_a_command_to_its_finish() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "ask_user",
        json!({"question": "Which colour?"}),
    ));
    openai.push_content(agent_reply("finish", json!({"reason": "asked"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    let thread = start_note_agent(&discord).await;

    // A card waits: the status says for whom, at which cycle, and what was spent of what.
    let first = card(&discord, thread, "NoteGPT · cycle 1").await;
    let waiting = status_saying(
        &discord,
        thread,
        &[
            &format!("waiting for approval by <@{ALICE}>"),
            "**Cycle:** 1",
            "**Spend:** $",
        ],
    )
    .await;
    let status_id: u64 = waiting["id"].as_str().unwrap().parse().unwrap();
    wait_until_pinned(&discord, thread).await;
    assert_eq!(discord.pinned_in(thread), vec![status_id], "pinned once");
    assert!(
        discord.typing_in(thread) >= 1,
        "typing while the model thought"
    );

    // The approved command runs (it waits for an answer): the same message says so.
    discord.click(ALICE, &[], &first, &button(&first, "Approve"));
    message_containing(&discord, thread, "asks: Which colour?").await;
    let running = status_saying(&discord, thread, &["running `ask_user` for"]).await;
    assert_eq!(running["id"], waiting["id"], "edited in place");

    // Answered, the agent finishes; its status says so last.
    discord.say(ALICE, &[], thread, "blue");
    let last = card(&discord, thread, "NoteGPT · cycle 2").await;
    discord.click(ALICE, &[], &last, &button(&last, "Approve"));
    let finished = status_saying(&discord, thread, &["**Now:** finished"]).await;
    assert_eq!(finished["id"], waiting["id"]);
    assert_eq!(status_messages(&discord, thread).len(), 1);
    // No status edit after the last: a finished agent's status is final.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        status_messages(&discord, thread)[0]["embeds"],
        finished["embeds"]
    );
    // The status's edits and the cards' together kept within five edits in five seconds.
    assert_eq!(discord.edit_bursts_in(thread), 0);
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

/// A restart that does not know which message shows the status (the bot was killed between
/// posting it and saving which it was) finds the pinned one, however many messages the thread
/// got meanwhile, rather than posting a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_pinned_status_is_found_behind_a_busy_thread() {
    use autothread::store::Store;

    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "ask_user",
        json!({"question": "Which colour?"}),
    ));
    let discord = FakeDiscord::start().await;
    // An outage longer than Discord remembers a nonce for: posting again would make a second.
    discord.set_nonce_window(Duration::ZERO);
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    let thread = start_note_agent(&discord).await;
    let first = card(&discord, thread, "NoteGPT · cycle 1").await;
    let waiting = status_saying(&discord, thread, &["waiting for approval"]).await;
    wait_until_pinned(&discord, thread).await;
    bot.kill().await;
    {
        let store = Store::open(&env.data_dir()).unwrap();
        let agents = store.list_agents().unwrap();
        store.forget_status_message(&agents[0].id).unwrap();
        store.flush_blocking().unwrap();
    }
    // More than the newest messages the bot searches (100).
    discord.store_missed_messages(ALICE, thread, 150);

    let identified = discord.identifies();
    let bot = start_bot(&env, &discord).await;
    discord
        .wait_for("the bot to identify again", WAIT, |d| {
            (d.identifies() > identified).then_some(())
        })
        .await;
    discord.click(ALICE, &[], &first, &button(&first, "Approve"));
    let running = status_saying(&discord, thread, &["running `ask_user` for"]).await;
    assert_eq!(running["id"], waiting["id"], "the pinned status, edited");
    assert_eq!(status_messages(&discord, thread).len(), 1);
    assert_eq!(discord.pinned_in(thread).len(), 1);
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_status_message_when_the_admin_turns_it_off() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply("finish", json!({"reason": "nothing to do"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("{config}\n[discord]\nstatus_requests_per_second = 0\n"),
    )
    .unwrap();
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Finish at once",
            name: Some("NoteGPT"),
            ..Start::default()
        },
    )
    .await;
    let only = card(&discord, thread, "NoteGPT · cycle 1").await;
    discord.click(ALICE, &[], &only, &button(&only, "Approve"));
    discord
        .wait_for("the finish", WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .find(|m| title(m) == "NoteGPT finished")
        })
        .await;
    assert!(status_messages(&discord, thread).is_empty());
    assert!(discord.pinned_in(thread).is_empty());
    discord.assert_clean();
    bot.kill().await;
}
