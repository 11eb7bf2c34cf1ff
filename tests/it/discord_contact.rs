//! Discord first contact, the real bot against the fake Discord (which applies Discord's rule
//! that the first follow-up of a deferred interaction keeps the deferral's visibility): refusals
//! stay private, cards get through Discord's bad moments exactly once and with their buttons,
//! and `/agent help` explains the buttons and commands.

use crate::support;

use serde_json::{json, Value};
use support::bot::{answer, button, card, start_agent, start_bot, title, Start, WAIT};
use support::fake_discord::{FakeDiscord, ALICE, CHANNEL};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::TestEnv;

/// A test environment whose bot re-posts missing cards every second.
fn env_with_fast_reposts(openai: &FakeOpenAi) -> TestEnv {
    let env = TestEnv::new(&openai.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        path,
        format!("{config}\n[discord]\nrepost_interval_secs = 1\n"),
    )
    .unwrap();
    env
}

/// The cards for `cycle` in `thread` (there must be exactly one).
fn cards_for(discord: &FakeDiscord, thread: u64, wanted: &str) -> Vec<Value> {
    discord
        .messages_in(thread)
        .into_iter()
        .filter(|m| title(m) == wanted)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_refused_after_the_deferral_is_still_private() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;

    // The bot's role may not create threads here: Discord refuses with 403 only after the
    // command was deferred. The refusal says what to fix, and only Alice sees it.
    discord.forbid_threads(true);
    let start = discord.slash(
        ALICE,
        &[],
        CHANNEL,
        "start",
        json!([{"name": "task", "type": 3, "value": "Write a haiku"}]),
        json!({}),
    );
    let text = answer(&discord, start, true).await;
    assert!(
        text.contains("Create Public Threads"),
        "the refusal names the missing permission: {text}"
    );
    assert_eq!(discord.callbacks(start)[0].kind, 5, "deferred first");
    assert!(discord.threads().is_empty());

    // With the permission back, the start works, and its answer is private too.
    discord.forbid_threads(false);
    openai.push_content(agent_reply("finish", json!({"reason": "done"})));
    let (options, resolved) = Start {
        task: "Write a haiku",
        name: Some("HaikuGPT"),
        continuous: None,
        ..Start::default()
    }
    .options();
    let started = discord.slash(ALICE, &[], CHANNEL, "start", options, resolved);
    let text = answer(&discord, started, true).await;
    assert!(text.starts_with("Started agent"), "{text}");
    discord.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_get_through_discords_bad_moments_once_and_with_their_buttons() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for cycle in 1..=3 {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": format!("n{cycle}.txt"), "contents": "x"}),
        ));
    }
    let discord = FakeDiscord::start().await;
    let env = env_with_fast_reposts(&openai);
    let bot = start_bot(&env, &discord).await;

    // Cycle 1: Discord stores the card but answers 500, then rate limits. The retries carry the
    // card's nonce, so Discord hands back the stored card instead of a second one.
    discord.fail_card_posts(1, 500, true);
    let thread = start_agent(
        &discord,
        Start {
            task: "Write three notes",
            name: Some("NoteGPT"),
            continuous: None,
            ..Start::default()
        },
    )
    .await;
    let first = card(&discord, thread, "NoteGPT · cycle 1").await;
    assert_eq!(cards_for(&discord, thread, "NoteGPT · cycle 1").len(), 1);

    // Cycle 2: a 429 and a 503 in a row are retried with backoff.
    discord.fail_card_posts(1, 429, false);
    discord.fail_card_posts(1, 503, false);
    discord.click(ALICE, &[], &first, &button(&first, "Approve"));
    let second = card(&discord, thread, "NoteGPT · cycle 2").await;
    assert_eq!(cards_for(&discord, thread, "NoteGPT · cycle 2").len(), 1);

    // Cycle 3: Discord is down for longer than a post's retries (six failures, four tries a
    // post). The card is posted again when Discord is back, once, with its buttons.
    discord.fail_card_posts(6, 503, false);
    discord.click(ALICE, &[], &second, &button(&second, "Approve"));
    let third = card(&discord, thread, "NoteGPT · cycle 3").await;
    assert_eq!(discord.failing_posts_left(), 0);
    assert_eq!(cards_for(&discord, thread, "NoteGPT · cycle 3").len(), 1);
    let approve = button(&third, "Approve");
    assert!(!button(&third, "Deny").is_empty());

    // The re-posted card works: approving it runs the command, and the agent goes on.
    openai.push_content(agent_reply("finish", json!({"reason": "three notes"})));
    discord.click(ALICE, &[], &third, &approve);
    let last = card(&discord, thread, "NoteGPT · cycle 4").await;
    discord.click(ALICE, &[], &last, &button(&last, "Approve"));
    discord
        .wait_for("the finish", WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .find(|m| title(m) == "NoteGPT finished")
        })
        .await;
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_explains_the_buttons_and_every_command_privately() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    let asked = discord.slash(ALICE, &[], CHANNEL, "help", json!([]), json!({}));
    // The help is one private embed.
    let text = discord
        .wait_for("the help", WAIT, |d| {
            d.callbacks(asked)
                .into_iter()
                .find(|c| c.kind == 4)
                .map(|c| {
                    assert_eq!(c.data["flags"], 64, "the help is private");
                    c.data["embeds"][0]["description"]
                        .as_str()
                        .unwrap_or("")
                        .to_string()
                })
        })
        .await;
    for expected in [
        "**Approve**",
        "**Approve ×N…**",
        "**Feedback…**",
        "**Self-critique**",
        "**Deny**",
        "**Approve & remember…**",
        "**Edit…**",
        "`/agent rules` — ",
        "`/agent start` — Start an agent on a task, in a new thread.",
        "`/agent status` — ",
        "`/agent budget show|set|chart` — ",
        "`/memory add|search|list|writers` — ",
        "`/agent models show|allow|remove` — ",
        "`/agent help` — ",
        "`/agent finish` — ",
        "`/agent archive` — ",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
    discord.assert_clean();
    bot.kill().await;
}
