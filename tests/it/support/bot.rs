//! Driving the real bot in tests: start it against the fake Discord, find its cards and buttons,
//! read what it answered to a command.

use std::time::Duration;

use serde_json::Value;

use super::fake_discord::{FakeDiscord, GUILD};
use super::{Running, TestEnv};

/// How long a test waits for the bot to do something before it fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// `autothread run` against the fake Discord, once its slash commands are registered.
pub async fn start_bot(env: &TestEnv, discord: &FakeDiscord) -> Running {
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

/// The custom id of the button whose label starts with `label_prefix`.
pub fn button(message: &Value, label_prefix: &str) -> String {
    message["components"][0]["components"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["label"].as_str().unwrap_or("").starts_with(label_prefix))
        .and_then(|b| b["custom_id"].as_str())
        .unwrap_or_else(|| panic!("no {label_prefix} button on {message}"))
        .to_string()
}

pub fn title(message: &Value) -> String {
    message["embeds"][0]["title"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The newest message in `thread` whose embed title is `wanted`.
pub async fn card(discord: &FakeDiscord, thread: u64, wanted: &str) -> Value {
    discord
        .wait_for(&format!("card {wanted:?}"), WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .rev()
                .find(|m| title(m) == wanted)
        })
        .await
}

/// What the bot answered to an interaction: its immediate reply or, after a deferral, its first
/// follow-up; `private` also checks that only the user saw it.
pub async fn answer(discord: &FakeDiscord, interaction: u64, private: bool) -> String {
    discord
        .wait_for("an answer", WAIT, |d| {
            let immediate = d
                .callbacks(interaction)
                .into_iter()
                .find(|c| c.kind == 4)
                .map(|c| {
                    if private {
                        assert_eq!(c.data["flags"], 64, "the answer must be ephemeral");
                    }
                    c.data["content"].as_str().unwrap_or("").to_string()
                });
            immediate.or_else(|| {
                d.followups_for(interaction).first().map(|m| {
                    if private {
                        assert_eq!(m["flags"], 64, "the follow-up must be ephemeral");
                    }
                    m["content"].as_str().unwrap_or("").to_string()
                })
            })
        })
        .await
}

/// An ephemeral answer (a refusal, a status).
pub async fn ephemeral_text(discord: &FakeDiscord, interaction: u64) -> String {
    answer(discord, interaction, true).await
}

/// Waits for a message in `thread` whose text contains `needle`, and returns it.
pub async fn message_containing(discord: &FakeDiscord, thread: u64, needle: &str) -> Value {
    discord
        .wait_for(&format!("a message containing {needle:?}"), WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .find(|m| m["content"].as_str().unwrap_or("").contains(needle))
        })
        .await
}
