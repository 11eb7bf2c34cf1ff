//! What the Discord benchmarks share: starting agents through `/agent start` on the fake Discord
//! and reading their cards, and the figures' formatting.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::bot::start_bot_with;
use crate::support::fake_discord::{FakeDiscord, ALICE, CHANNEL};
use crate::support::{Running, TestEnv};

pub const WAIT: Duration = Duration::from_secs(120);

pub fn title(message: &Value) -> String {
    message["embeds"][0]["title"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

pub fn approve_id(message: &Value) -> String {
    message["components"][0]["components"][0]["custom_id"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Starts `count` agents and returns (thread, first card) for each.
pub async fn start_agents(discord: &FakeDiscord, count: usize) -> Vec<(u64, Value)> {
    let before = discord.threads().len();
    for i in 0..count {
        discord.slash(
            ALICE,
            &[],
            CHANNEL,
            "start",
            json!([{"name": "task", "type": 3, "value": "bench"}, {"name": "name", "type": 3, "value": format!("B{i}")}]),
            json!({}),
        );
    }
    let threads: Vec<u64> = discord
        .wait_for("the agents' threads", WAIT, |d| {
            let threads = d.threads();
            (threads.len() >= before + count).then(|| {
                threads[before..]
                    .iter()
                    .map(|t| t["id"].as_str().unwrap().parse().unwrap())
                    .collect()
            })
        })
        .await;
    let deadline = Instant::now() + WAIT;
    loop {
        let cards: Vec<(u64, Value)> = threads
            .iter()
            .filter_map(|thread| {
                discord
                    .messages_in(*thread)
                    .into_iter()
                    .find(|m| title(m).ends_with("· cycle 1"))
                    .map(|card| (*thread, card))
            })
            .collect();
        if cards.len() == threads.len() {
            return cards;
        }
        if Instant::now() > deadline {
            let missing: Vec<&u64> = threads
                .iter()
                .filter(|t| !cards.iter().any(|(c, _)| c == *t))
                .collect();
            let sample = missing
                .first()
                .map(|t| discord.messages_in(**t))
                .unwrap_or_default();
            panic!(
                "{} of {} agents never showed a first card; one thread holds: {sample:?}",
                missing.len(),
                threads.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts the bot (`run`, logging only errors) on `env` against `discord`, with no limit on agents
/// per user or server, and waits until its commands are registered.
pub async fn start_unlimited_bot(env: &TestEnv, discord: &FakeDiscord) -> Running {
    let config = std::fs::read_to_string(env.dir.path().join("bot.toml")).expect("config");
    std::fs::write(
        env.dir.path().join("bot.toml"),
        config + "\n[discord]\nmax_agents_per_user = 0\nmax_agents_per_guild = 0\n",
    )
    .expect("config");
    // Errors only, and the line the bot logs as it stops with what it did to the disk.
    start_bot_with(
        env,
        discord,
        &[],
        Some("error,autothread::surface::discord::client=info"),
    )
    .await
}
