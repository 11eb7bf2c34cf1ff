//! The Message Content intent: a bot that does not ask for it runs on an application without it,
//! takes feedback through the card's form and by a mention, and answers to `ask_user` by a reply,
//! while a plain typed message (which Discord sends it empty) is neither; a bot that asks for it
//! when the application lacks it is refused by the gateway and says which switch and key to change.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::bot::{
    button, card, message_containing, spawn_bot_asking, start_agent, title, MessageContentIntent,
    Start, WAIT,
};
use support::fake_discord::{FakeDiscord, ALICE, APP};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::{Running, TestEnv};

/// The Developer Portal switch and the config key every explanation must name.
const SWITCH: &str = "Bot → Privileged Gateway Intents → Message Content Intent";
const KEY: &str = "message_content_intent = false";

/// The texts of the user messages the fake's gateway delivered, in order, as the bot received them.
fn delivered_user_texts(discord: &FakeDiscord) -> Vec<String> {
    discord
        .sent_payloads()
        .iter()
        .filter(|p| {
            p["t"] == "MESSAGE_CREATE" && p["d"]["author"]["id"] == ALICE.to_string().as_str()
        })
        .map(|p| p["d"]["content"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Whether the bot said something containing `needle` in `thread`.
fn bot_said(discord: &FakeDiscord, thread: u64, needle: &str) -> bool {
    discord.messages_in(thread).iter().any(|m| {
        m["author"]["id"] == APP.to_string().as_str()
            && m["content"].as_str().unwrap_or("").contains(needle)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_message_content_feedback_and_answers_arrive_by_form_reply_and_mention() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "poem.txt", "contents": "roses"}),
    ));
    openai.push_content(agent_reply(
        "ask_user",
        json!({"question": "Which colour?"}),
    ));
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "colour.txt", "contents": "blue"}),
    ));
    openai.push_content(agent_reply("finish", json!({"reason": "all written"})));
    let discord = FakeDiscord::start().await;
    // A new application: no privileged intent switched on.
    discord.set_application_flags(0);
    let env = TestEnv::new(&openai.base_url, "");
    let bot = spawn_bot_asking(
        &env,
        &discord,
        MessageContentIntent::NotRequested,
        Some("warn,autothread::app=info,autothread::surface::discord=info"),
    );
    discord
        .wait_for("the slash commands to be registered", WAIT, |d| {
            (!d.commands().is_empty()).then_some(())
        })
        .await;
    bot.wait_for_log("Message Content intent not requested", 1, WAIT)
        .await;
    let log = bot.stderr();
    assert!(
        log.contains(
            "reaches the bot only when it @mentions the bot or replies to the bot's message"
        ),
        "the start-up log says what going without the intent leaves out:\n{log}"
    );
    assert_eq!(discord.refused_identifies(), 0);

    let thread = start_agent(
        &discord,
        Start {
            task: "Write a poem",
            name: Some("PoetGPT"),
            ..Start::default()
        },
    )
    .await;

    // Feedback through the card's form needs no message content.
    let first = card(&discord, thread, "PoetGPT · cycle 1").await;
    let opened = discord.click(ALICE, &[], &first, &button(&first, "Feedback"));
    discord
        .wait_for("the feedback form", WAIT, |d| {
            d.callbacks(opened).into_iter().find(|c| c.kind == 9)
        })
        .await;
    discord.submit_modal(ALICE, &[], thread, opened, "make it rhyme");
    let second = card(&discord, thread, "PoetGPT · cycle 2").await;
    assert!(bot_said(&discord, thread, "make it rhyme"));

    // The question asks for a reply, the one way a typed answer reaches the bot.
    discord.click(ALICE, &[], &second, &button(&second, "Approve"));
    let question = message_containing(&discord, thread, "asks: Which colour?").await;
    assert!(
        question["content"]
            .as_str()
            .unwrap()
            .contains("Answer by replying to this message"),
        "{question}"
    );
    let question_id: u64 = question["id"].as_str().unwrap().parse().unwrap();
    // A plain message, and a reply with its mention turned off, arrive empty: no answer.
    discord.say(ALICE, &[], thread, "green");
    discord.reply_quietly(ALICE, &[], thread, question_id, "yellow");
    discord
        .wait_for("both messages delivered", WAIT, |d| {
            (delivered_user_texts(d).len() == 2).then_some(())
        })
        .await;
    assert_eq!(delivered_user_texts(&discord), ["", ""]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !bot_said(&discord, thread, "The user's answer"),
        "an empty message is not an answer"
    );
    // A reply (with its mention on, the default) carries its text and answers.
    discord.reply_to(ALICE, &[], thread, question_id, "blue");
    card(&discord, thread, "PoetGPT · cycle 3").await;
    assert!(bot_said(&discord, thread, "The user's answer: blue"));
    assert!(!bot_said(&discord, thread, "green") && !bot_said(&discord, thread, "yellow"));

    // A message that begins by mentioning the bot is feedback on the waiting card.
    discord.say(ALICE, &[], thread, &format!("<@{APP}> use red instead"));
    let fourth = card(&discord, thread, "PoetGPT · cycle 4").await;
    assert!(bot_said(&discord, thread, "use red instead"));
    assert!(
        !bot_said(&discord, thread, &format!("<@{APP}>")),
        "the mention is not part of the feedback"
    );
    assert_eq!(
        delivered_user_texts(&discord),
        ["", "", "blue", &format!("<@{APP}> use red instead")]
    );

    discord.click(ALICE, &[], &fourth, &button(&fourth, "Approve"));
    discord
        .wait_for("the closing summary", WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .find(|m| title(m) == "PoetGPT finished")
        })
        .await;
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

/// `autothread check` as a deployment would run it, asking for Message Content or not.
async fn check(env: &TestEnv, discord: &FakeDiscord, asks: &str) -> (bool, String, String) {
    let mut cmd = env.command(&["check"]);
    cmd.env("DISCORD_TOKEN", "fake-token")
        .env("DISCORD_API_BASE", &discord.base_url)
        .env("DISCORD_MESSAGE_CONTENT_INTENT", asks)
        .env("OPENAI_API_KEY", "sk-check-secret");
    Running::new_public(cmd.spawn().unwrap()).finish(WAIT).await
}

fn line_of<'a>(out: &'a str, start: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in\n{out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_for_message_content_the_application_lacks_is_explained_by_run_and_check() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let discord = FakeDiscord::start().await;
    discord.set_application_flags(0);
    let env = TestEnv::new(&openai.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{config}\n[web]\nenabled = false\n")).unwrap();

    // The gateway closes with 4014; `run` ends naming the switch and the key.
    let bot = spawn_bot_asking(
        &env,
        &discord,
        MessageContentIntent::Requested,
        Some("warn"),
    );
    let (ok, _, err) = bot.finish(WAIT).await;
    assert!(!ok, "{err}");
    assert_eq!(discord.refused_identifies(), 1);
    assert!(discord.commands().is_empty(), "the bot never got to start");
    let said = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line in\n{err}"));
    for expected in [
        "Discord refused the Message Content intent",
        "4014",
        SWITCH,
        KEY,
        "DISCORD_MESSAGE_CONTENT_INTENT=false",
    ] {
        assert!(said.contains(expected), "{expected:?} in {said}");
    }

    // `check` says so before a start, and fails.
    let (ok, out, _) = check(&env, &discord, "true").await;
    assert!(!ok, "{out}");
    let intents = line_of(&out, "✗ discord intents: ");
    assert!(
        intents.contains(SWITCH) && intents.contains(KEY),
        "{intents}"
    );

    // Without the intent the deployment is ready, and check says what that leaves out.
    let (ok, out, _) = check(&env, &discord, "false").await;
    assert!(ok, "{out}");
    let intents = line_of(&out, "! discord intents: ");
    assert!(
        intents.contains("only when it @mentions the bot or replies to the bot's message")
            && intents.contains(SWITCH),
        "{intents}"
    );

    // With the switch on, asking for it passes the check.
    discord.set_application_flags(support::fake_discord::FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED);
    let (ok, out, _) = check(&env, &discord, "true").await;
    assert!(ok, "{out}");
    let intents = line_of(&out, "✓ discord intents: ");
    assert!(intents.contains("every message"), "{intents}");
}
