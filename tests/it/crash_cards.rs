//! Exactly-once cards: the real bot is killed (SIGKILL) at random points and right after Discord
//! stored a card, a hundred times over, while a team clicks through three agents' cards; no card
//! is ever posted twice, and every card left with buttons still answers a click.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support;
use support::bot::{button, start_agent, start_bot, title, Start, WAIT};
use support::fake_discord::{FakeDiscord, ALICE};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::{Running, TestEnv};

const AGENTS: usize = 3;
const KILLS: usize = 100;
/// The latest random kill point after the bot is back, in milliseconds: a few cycles' worth.
const RANDOM_KILL_WITHIN_MS: u64 = 400;

/// The newest card of `thread` that still has buttons, unless it was already clicked.
fn unclicked_card(discord: &FakeDiscord, thread: u64, clicked: &HashSet<String>) -> Option<Value> {
    let messages = discord.messages_in(thread);
    let newest = messages.iter().rev().find(|m| has_buttons(m))?;
    let approve = button(newest, "Approve");
    (!clicked.contains(&approve)).then(|| newest.clone())
}

fn has_buttons(message: &Value) -> bool {
    message["components"]
        .as_array()
        .is_some_and(|rows| !rows.is_empty())
}

/// Clicks Approve on every agent's newest unclicked card.
fn click_through(discord: &FakeDiscord, threads: &[u64], clicked: &mut HashSet<String>) {
    for &thread in threads {
        if let Some(card) = unclicked_card(discord, thread, clicked) {
            let approve = button(&card, "Approve");
            discord.click(ALICE, &[], &card, &approve);
            clicked.insert(approve);
        }
    }
}

/// Starts the bot again after a kill and waits until it is connected.
async fn restart(env: &TestEnv, discord: &FakeDiscord) -> Running {
    let identified = discord.identifies();
    let bot = start_bot(env, discord).await;
    discord
        .wait_for("the bot to identify again", WAIT, |d| {
            (d.identifies() > identified).then_some(())
        })
        .await;
    bot
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_a_hundred_times_around_posting_no_card_is_posted_twice() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    // Each step writes another file, so no two steps repeat; far more than the run can use.
    for i in 0..3_000 {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": format!("f{i}.txt"), "contents": "x"}),
        ));
    }
    let discord = FakeDiscord::start().await;
    // Discord forgets a nonce after a few minutes; with no window at all, an outage of any
    // length is covered only if the bot finds its earlier card in the thread.
    discord.set_nonce_window(Duration::ZERO);
    let env = TestEnv::new(&openai.base_url, "");
    let mut bot = start_bot(&env, &discord).await;
    let names: Vec<String> = (0..AGENTS).map(|i| format!("Crash{i}")).collect();
    let mut threads = Vec::new();
    for name in &names {
        threads.push(
            start_agent(
                &discord,
                Start {
                    task: "Write files",
                    name: Some(name),
                    ..Start::default()
                },
            )
            .await,
        );
    }

    let mut found_after_restart = 0;
    let mut clicked = HashSet::new();
    for kill in 0..KILLS {
        // Even kills land right after Discord stored a card, before the bot hears back: the
        // moment that used to post the card again. Odd kills land anywhere in a few cycles.
        let on_post = kill % 2 == 0;
        if on_post {
            discord.delay_card_answers(Duration::from_millis(300));
        }
        let posts_before = discord.card_posts();
        let random_deadline = tokio::time::Instant::now()
            + Duration::from_millis(rand::random::<u64>() % RANDOM_KILL_WITHIN_MS);
        let give_up = tokio::time::Instant::now() + WAIT;
        loop {
            click_through(&discord, &threads, &mut clicked);
            let now = tokio::time::Instant::now();
            let due = if on_post {
                discord.card_posts() > posts_before
            } else {
                now >= random_deadline
            };
            if due {
                break;
            }
            assert!(now < give_up, "kill {kill}: no card was posted in time");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        found_after_restart += bot
            .stderr()
            .matches("card found in the thread after a restart")
            .count();
        bot.kill().await;
        discord.delay_card_answers(Duration::ZERO);
        // A click sent to the dead bot was lost, as Discord drops it; the card is clicked again.
        clicked.clear();
        bot = restart(&env, &discord).await;
    }

    // Every card ever posted is there once, and so is each thread's live status message.
    let mut copies: BTreeMap<String, usize> = BTreeMap::new();
    for &thread in &threads {
        let mut statuses = 0;
        for message in discord.messages_in(thread) {
            let title = title(&message);
            if title.starts_with("📌 Live status") {
                statuses += 1;
            }
            if title.contains(" · cycle ") {
                *copies.entry(title).or_default() += 1;
            }
        }
        if statuses != 1 {
            // Where each status message sits among the thread's messages, to tell how a second
            // one came about.
            let order: Vec<String> = discord
                .messages_in(thread)
                .iter()
                .enumerate()
                .filter(|(_, m)| title(m).starts_with("📌 Live status"))
                .map(|(at, m)| format!("#{at} id {} at {}", m["id"], m["timestamp"]))
                .collect();
            let posted = bot.stderr().matches("status message posted").count();
            panic!(
                "thread {thread}: {statuses} live status messages ({order:?}; of {} messages; \
                 the last bot logged {posted} posts)",
                discord.messages_in(thread).len()
            );
        }
    }
    let duplicated: Vec<_> = copies.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicated.is_empty(), "cards posted twice: {duplicated:?}");
    assert!(
        copies.len() > AGENTS * 10,
        "the agents cycled through the kills: {copies:?}"
    );
    // Half the kills left a stored card its run never learnt of; the next run found each one.
    found_after_restart += bot
        .stderr()
        .matches("card found in the thread after a restart")
        .count();
    assert!(
        found_after_restart >= KILLS / 2,
        "{found_after_restart} cards found after a restart"
    );

    // Every card that still has buttons answers a click; each agent's newest one goes on.
    for &thread in &threads {
        // The last restart may have come mid-cycle: the agent's next card is on its way.
        let live: Vec<Value> = discord
            .wait_for("the agent to wait on a card", WAIT, |d| {
                let live: Vec<Value> = d
                    .messages_in(thread)
                    .into_iter()
                    .filter(has_buttons)
                    .collect();
                (!live.is_empty()).then_some(live)
            })
            .await;
        let newest = live.last().expect("a card waits").clone();
        for card in &live {
            let click = discord.click(ALICE, &[], card, &button(card, "Approve"));
            discord
                .wait_for("the click to be answered", WAIT, |d| {
                    (!d.callbacks(click).is_empty()).then_some(())
                })
                .await;
        }
        let next_cycle = title(&newest).replace(
            &format!("cycle {}", cycle_of(&newest)),
            &format!("cycle {}", cycle_of(&newest) + 1),
        );
        discord
            .wait_for("the next card after the newest was approved", WAIT, |d| {
                d.messages_in(thread)
                    .iter()
                    .any(|m| title(m) == next_cycle)
                    .then_some(())
            })
            .await;
    }
    discord.assert_clean();
    bot.kill().await;
}

fn cycle_of(card: &Value) -> u64 {
    title(card)
        .rsplit("cycle ")
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a card's title ends with its cycle")
}
