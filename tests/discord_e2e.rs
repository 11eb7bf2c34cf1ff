//! End to end in Discord: the real `autothread run` binary (serenity + poise) against the fake
//! Discord and the scripted fake OpenAI server.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::fake_discord::{FakeDiscord, ALICE, BOB, CHANNEL, GUILD};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::{Running, TestEnv};

const WAIT: Duration = Duration::from_secs(30);

async fn start_bot(env: &TestEnv, discord: &FakeDiscord) -> Running {
    let mut cmd = env.command(&["run"]);
    cmd.env("DISCORD_TOKEN", "fake-token")
        .env("DISCORD_API_BASE", &discord.base_url)
        .env("DISCORD_DEV_GUILD", GUILD.to_string());
    let running = Running::new_public(cmd.spawn().expect("the bot starts"));
    discord
        .wait_for("the slash commands to be registered", WAIT, |d| {
            (!d.commands().is_empty()).then_some(())
        })
        .await;
    running
}

fn button(message: &Value, label_prefix: &str) -> String {
    message["components"][0]["components"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["label"].as_str().unwrap_or("").starts_with(label_prefix))
        .and_then(|b| b["custom_id"].as_str())
        .unwrap_or_else(|| panic!("no {label_prefix} button on {message}"))
        .to_string()
}

fn title(message: &Value) -> String {
    message["embeds"][0]["title"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The newest message in `thread` whose embed title is `wanted`.
async fn card(discord: &FakeDiscord, thread: u64, wanted: &str) -> Value {
    discord
        .wait_for(&format!("card {wanted:?}"), WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .rev()
                .find(|m| title(m) == wanted)
        })
        .await
}

async fn ephemeral_text(discord: &FakeDiscord, interaction: u64) -> String {
    discord
        .wait_for("an ephemeral answer", WAIT, |d| {
            let from_callback = d
                .callbacks(interaction)
                .into_iter()
                .find(|c| c.kind == 4)
                .map(|c| {
                    assert_eq!(c.data["flags"], 64, "the answer must be ephemeral");
                    c.data["content"].as_str().unwrap_or("").to_string()
                });
            from_callback.or_else(|| {
                d.followups_for(interaction).first().map(|m| {
                    assert_eq!(m["flags"], 64, "the follow-up must be ephemeral");
                    m["content"].as_str().unwrap_or("").to_string()
                })
            })
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_card_approve_refuse_stale_feedback_deny() {
    let openai = FakeOpenAi::start(Expect {
        max_tokens: Some(500),
        response_format: Some("json_schema"),
        context_tokens: Some(4096),
    })
    .await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "haiku.txt", "contents": "crab"}),
    ));
    openai.push_content(agent_reply("read_file", json!({"filename": "haiku.txt"})));
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "haiku.txt", "contents": "shorter"}),
    ));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;

    let start = discord.slash(
        ALICE,
        &[],
        CHANNEL,
        "start",
        json!([{"name": "task", "type": 3, "value": "Write a haiku into haiku.txt"},
               {"name": "name", "type": 3, "value": "HaikuGPT"}]),
        json!({}),
    );
    let reply = discord
        .wait_for("the start reply", WAIT, |d| {
            d.followups_for(start).first().cloned()
        })
        .await;
    assert_eq!(
        discord.callbacks(start)[0].kind,
        5,
        "the command is deferred first"
    );
    let thread: u64 = discord.threads()[0]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        reply["content"]
            .as_str()
            .unwrap()
            .contains(&format!("<#{thread}>")),
        "{reply}"
    );
    assert_eq!(discord.threads()[0]["name"], "HaikuGPT");

    // The profile, then the first card.
    let first = card(&discord, thread, "HaikuGPT · cycle 1").await;
    assert!(discord
        .messages_in(thread)
        .iter()
        .any(|m| title(m) == "HaikuGPT"));
    let approve = button(&first, "Approve");

    // Bob is not shared: refused, nothing changes.
    let refused = discord.click(BOB, &[], &first, &approve);
    let text = ephemeral_text(&discord, refused).await;
    assert!(text.starts_with("Only the agent's owner"), "{text}");

    // Alice approves: acknowledged at once, the card is edited, the result and the next card follow.
    let approved = discord.click(ALICE, &[], &first, &approve);
    let second = card(&discord, thread, "HaikuGPT · cycle 2").await;
    assert_eq!(discord.callbacks(approved)[0].kind, 6);
    let edited = discord
        .messages_in(thread)
        .into_iter()
        .find(|m| m["id"] == first["id"])
        .unwrap();
    assert_eq!(
        edited["components"],
        json!([]),
        "buttons are gone after a decision"
    );
    let status = edited["embeds"][0]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "Status")
        .unwrap()["value"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(status.starts_with("✅ Approved by alice"), "{status}");
    assert!(discord.messages_in(thread).iter().any(|m| m["content"]
        .as_str()
        .unwrap_or("")
        .starts_with("`write_file` returned:")));

    // A click on the old card is stale.
    let stale = discord.click(ALICE, &[], &first, &approve);
    let text = ephemeral_text(&discord, stale).await;
    assert_eq!(text, "This proposal is no longer pending.");

    // Feedback through the modal.
    let opened = discord.click(ALICE, &[], &second, &button(&second, "Feedback"));
    discord
        .wait_for("the feedback modal", WAIT, |d| {
            d.callbacks(opened).into_iter().find(|c| c.kind == 9)
        })
        .await;
    let submitted = discord.submit_modal(ALICE, &[], thread, opened, "make it shorter");
    let third = card(&discord, thread, "HaikuGPT · cycle 3").await;
    assert_eq!(discord.callbacks(submitted)[0].kind, 6);
    assert!(discord.messages_in(thread).iter().any(|m| m["content"]
        .as_str()
        .unwrap_or("")
        .contains("make it shorter")));

    // Deny stops the agent and says so in the thread.
    discord.click(ALICE, &[], &third, &button(&third, "Deny"));
    discord
        .wait_for("the paused notice", WAIT, |d| {
            d.messages_in(thread).into_iter().find(|m| {
                m["content"]
                    .as_str()
                    .unwrap_or("")
                    .contains("stopped by alice")
            })
        })
        .await;

    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}
