//! Driving the real bot in tests: start it against the fake Discord, find its cards and buttons,
//! read what it answered to a command.

use serde_json::{json, Value};

use super::fake_discord::{FakeDiscord, ALICE, CHANNEL, GUILD};
use super::{Running, TestEnv};

pub use super::WAIT;

/// Whether a test's bot asks the gateway for the Message Content intent
/// (`DISCORD_MESSAGE_CONTENT_INTENT`). Tests that type in threads run with it, as the fake's
/// application has it switched on unless a test says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageContentIntent {
    Requested,
    NotRequested,
}

/// `autothread run` against the fake Discord, once its slash commands are registered.
pub async fn start_bot(env: &TestEnv, discord: &FakeDiscord) -> Running {
    // The surface logs what tests wait on (a card remembered) at info.
    start_bot_with(
        env,
        discord,
        &[],
        Some("warn,autothread::surface::discord=info"),
    )
    .await
}

/// As `start_bot`, with global arguments before `run` and RUST_LOG (`None`: the binary's default).
pub async fn start_bot_with(
    env: &TestEnv,
    discord: &FakeDiscord,
    global: &[&str],
    rust_log: Option<&str>,
) -> Running {
    let running = spawn_bot(
        env,
        discord,
        global,
        &[],
        rust_log,
        MessageContentIntent::Requested,
        &[],
    );
    discord
        .wait_for("the slash commands to be registered", WAIT, |d| {
            (!d.commands().is_empty()).then_some(())
        })
        .await;
    running
}

/// `autothread run` with `[api] listen` set in `env`'s config and `vars` (the API tokens'
/// variables) in its environment, once its commands are registered and the Agent Protocol
/// listens: the bot and the API's base URL.
pub async fn start_bot_serving_api(
    env: &TestEnv,
    discord: &FakeDiscord,
    vars: &[(&str, &str)],
) -> (Running, String) {
    let running = spawn_bot(
        env,
        discord,
        &[],
        &[],
        Some("warn,autothread::surface::discord=info"),
        MessageContentIntent::Requested,
        vars,
    );
    discord
        .wait_for("the slash commands to be registered", WAIT, |d| {
            (!d.commands().is_empty()).then_some(())
        })
        .await;
    running
        .wait_for_log("Agent Protocol: http://", 1, WAIT)
        .await;
    let log = running.stderr();
    let from = log.find("Agent Protocol: http://").unwrap() + "Agent Protocol: ".len();
    let base = log[from..]
        .split("/ap/v1/agent/tasks")
        .next()
        .unwrap()
        .to_string();
    (running, base)
}

/// `autothread run` asking for the Message Content intent or not, not waiting for anything: a
/// bot the gateway refuses never registers its commands.
pub fn spawn_bot_asking(
    env: &TestEnv,
    discord: &FakeDiscord,
    intent: MessageContentIntent,
    rust_log: Option<&str>,
) -> Running {
    spawn_bot(env, discord, &[], &[], rust_log, intent, &[])
}

/// `autothread run --shards … --total-shards …`, once the fake saw its shards identify.
pub async fn start_bot_on_shards(
    env: &TestEnv,
    discord: &FakeDiscord,
    shards: &str,
    total: u32,
    expected: &[u32],
) -> Running {
    let total_arg = total.to_string();
    let running = spawn_bot(
        env,
        discord,
        &[],
        &["--shards", shards, "--total-shards", &total_arg],
        Some("warn,autothread::surface::discord=info"),
        MessageContentIntent::Requested,
        &[],
    );
    discord
        .wait_for(&format!("shards {expected:?} to identify"), WAIT, |d| {
            let up = d.identified_shards();
            expected
                .iter()
                .all(|s| up.contains(&(*s, total)))
                .then_some(())
        })
        .await;
    running
}

fn spawn_bot(
    env: &TestEnv,
    discord: &FakeDiscord,
    global: &[&str],
    run_args: &[&str],
    rust_log: Option<&str>,
    intent: MessageContentIntent,
    vars: &[(&str, &str)],
) -> Running {
    let mut args = global.to_vec();
    args.push("run");
    args.extend_from_slice(run_args);
    let mut cmd = env.command(&args);
    let asks = match intent {
        MessageContentIntent::Requested => "true",
        MessageContentIntent::NotRequested => "false",
    };
    cmd.env("DISCORD_TOKEN", "fake-token")
        .env("DISCORD_API_BASE", &discord.base_url)
        .env("DISCORD_DEV_GUILD", GUILD.to_string())
        .env("DISCORD_MESSAGE_CONTENT_INTENT", asks)
        .envs(vars.iter().copied());
    match rust_log {
        Some(filter) => cmd.env("RUST_LOG", filter),
        None => cmd.env_remove("RUST_LOG"),
    };
    Running::new_public(cmd.spawn().expect("the bot starts"))
}

/// The custom id of the button, in any row, whose label starts with `label_prefix`.
pub fn button(message: &Value, label_prefix: &str) -> String {
    message["components"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| row["components"].as_array())
        .flatten()
        .find(|b| b["label"].as_str().unwrap_or("").starts_with(label_prefix))
        .and_then(|b| b["custom_id"].as_str())
        .unwrap_or_else(|| panic!("no {label_prefix} button on {message}"))
        .to_string()
}

/// The labels of every button a message shows, row by row: what a person could still press.
pub fn button_labels(message: &Value) -> Vec<String> {
    message["components"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| row["components"].as_array())
        .flatten()
        .filter_map(|b| b["label"].as_str())
        .map(str::to_string)
        .collect()
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

/// The message the bot's response of `kind` to `interaction` shows in `thread` (4: a new private
/// message such as `/agent audit`'s page, 7: the clicked message turned), ready for the next click.
pub async fn response_shown(
    discord: &FakeDiscord,
    thread: u64,
    interaction: u64,
    kind: u64,
) -> Value {
    discord
        .wait_for("the bot's response", WAIT, |d| {
            d.response_message(interaction, kind, thread)
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

/// The options of an `/agent start` in a test; unset ones are left out.
#[derive(Debug, Clone, Default)]
pub struct Start<'a> {
    pub task: &'a str,
    pub name: Option<&'a str>,
    pub continuous: Option<u32>,
    pub budget: Option<f64>,
    pub share_user: Option<u64>,
    /// `share_with`: more people and roles, as mentions.
    pub share_with: Option<&'a str>,
    pub model: Option<&'a str>,
}

impl Start<'_> {
    /// The slash command's options and the users they resolve, as Discord sends them.
    pub fn options(&self) -> (Value, Value) {
        let mut options = vec![json!({"name": "task", "type": 3, "value": self.task})];
        if let Some(name) = self.name {
            options.push(json!({"name": "name", "type": 3, "value": name}));
        }
        if let Some(n) = self.continuous {
            options.push(json!({"name": "continuous", "type": 4, "value": n}));
        }
        if let Some(model) = self.model {
            options.push(json!({"name": "model", "type": 3, "value": model}));
        }
        if let Some(mentions) = self.share_with {
            options.push(json!({"name": "share_with", "type": 3, "value": mentions}));
        }
        if let Some(usd) = self.budget {
            options.push(json!({"name": "budget", "type": 10, "value": usd}));
        }
        let mut users = serde_json::Map::new();
        if let Some(user) = self.share_user {
            options.push(json!({"name": "share_user", "type": 6, "value": user.to_string()}));
            let name = format!("user{user}");
            users.insert(
                user.to_string(),
                json!({"id": user.to_string(), "username": name, "discriminator": "0", "avatar": null, "global_name": name}),
            );
        }
        let resolved = if users.is_empty() {
            json!({})
        } else {
            json!({ "users": users })
        };
        (Value::Array(options), resolved)
    }
}

/// Alice starts an agent in the test channel; returns its new thread once the bot has answered.
pub async fn start_agent(discord: &FakeDiscord, start: Start<'_>) -> u64 {
    let before = discord.threads().len();
    let (options, resolved) = start.options();
    let interaction = discord.slash(ALICE, &[], CHANNEL, "start", options, resolved);
    let reply = answer(discord, interaction, false).await;
    assert_eq!(
        discord.threads().len(),
        before + 1,
        "no thread was opened: {reply}"
    );
    discord.threads().last().unwrap()["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}
