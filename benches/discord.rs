//! Benchmark (prints figures; not a test): interaction acknowledgement latency of the real bot
//! (serenity + poise, in its own process) against the fake Discord, measured by the fake from
//! the moment it dispatches a click to the moment the callback arrives, with 1, 50 and 200
//! concurrent clicks on different agents; and the time from Approve to the next card with a
//! model that answers at once.
//!
//! Run with `cargo bench --bench discord`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark stops at the first failure.

#[path = "../tests/it/support/mod.rs"]
mod support;

#[path = "shared/discord.rs"]
mod discord_common;

use std::time::{Duration, Instant};

use discord_common::{approve_id, ms, percentile, start_agents, start_unlimited_bot, title, WAIT};
use serde_json::json;
use support::fake_discord::{FakeDiscord, ALICE};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::TestEnv;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let openai = FakeOpenAi::start(Expect::default()).await;
        for i in 0..2000 {
            openai.push_content(agent_reply(
                "write_file",
                json!({"filename": format!("{i}.txt"), "contents": "x"}),
            ));
        }
        let discord = FakeDiscord::start().await;
        let env = TestEnv::new(&openai.base_url, "");
        let bot = start_unlimited_bot(&env, &discord).await;

        for concurrent in [1usize, 50, 200] {
            let agents = start_agents(&discord, concurrent).await;
            let started = Instant::now();
            let clicks: Vec<u64> = agents
                .iter()
                .map(|(_, card)| discord.click(ALICE, &[], card, &approve_id(card)))
                .collect();
            let latencies: Vec<Duration> = discord
                .wait_for("every acknowledgement", WAIT, |d| {
                    let acks: Vec<Duration> = clicks
                        .iter()
                        .filter_map(|c| d.callbacks(*c).first().map(|cb| cb.latency))
                        .collect();
                    (acks.len() == clicks.len()).then_some(acks)
                })
                .await;
            let all_acked = started.elapsed();
            // Approve → next card, for every agent.
            for (thread, _) in &agents {
                discord
                    .wait_for("the next card", WAIT, |d| {
                        d.messages_in(*thread)
                            .into_iter()
                            .find(|m| title(m).ends_with("· cycle 2"))
                    })
                    .await;
            }
            let all_next = started.elapsed();
            println!(
                "{concurrent:>3} concurrent clicks: ack p50 {}  p99 {}  max {}  (all acked in {}, all next cards in {})",
                ms(percentile(&latencies, 0.5)),
                ms(percentile(&latencies, 0.99)),
                ms(percentile(&latencies, 1.0)),
                ms(all_acked),
                ms(all_next)
            );
        }

        // Approve → next card for one agent, repeated: the loop's own turn-around time.
        let agents = start_agents(&discord, 1).await;
        let (thread, mut card) = agents.into_iter().next().expect("an agent");
        let mut turnaround = Vec::new();
        for cycle in 2..=31 {
            let clicked = Instant::now();
            discord.click(ALICE, &[], &card, &approve_id(&card));
            card = discord
                .wait_for("the next card", WAIT, |d| {
                    d.messages_in(thread)
                        .into_iter()
                        .find(|m| title(m).ends_with(&format!("· cycle {cycle}")))
                })
                .await;
            turnaround.push(clicked.elapsed());
        }
        println!(
            "Approve → next card (zero-latency model, 30 cycles): p50 {}  p99 {}",
            ms(percentile(&turnaround, 0.5)),
            ms(percentile(&turnaround, 0.99))
        );
        let violations = discord.errors();
        println!("fake Discord violations: {}", violations.len());
        bot.kill().await;
    });
}
