//! End to end in Discord: the real `autothread run` binary (serenity + poise) against the fake
//! Discord and the scripted fake OpenAI server.

use crate::support;

use serde_json::{json, Value};
use support::bot::{
    answer, button, card, ephemeral_text, message_containing, start_agent, start_bot, title, Start,
    WAIT,
};
use support::fake_discord::{FakeDiscord, ALICE, BOB, CHANNEL};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi};
use support::TestEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_card_approve_refuse_stale_feedback_deny() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
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
    assert_eq!(
        text,
        "This proposal is no longer pending: already decided by alice."
    );

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
    message_containing(&discord, thread, "stopped by alice").await;

    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

fn hostile_reply(cycle: usize) -> String {
    let noise = format!(
        "@everyone <@&{}> <@{}> ",
        support::fake_discord::ROLE_TEAM,
        BOB
    )
    .repeat(300);
    json!({
        "thoughts": {"observations": noise, "text": noise, "reasoning": noise, "self_criticism": noise, "plan": noise, "speak": noise},
        "command": {"name": "write_file", "args": {"filename": format!("h{cycle}.txt"), "contents": noise}}
    })
    .to_string()
}

fn status_of(message: &Value) -> String {
    message["embeds"][0]["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["name"] == "Status")
        .and_then(|f| f["value"].as_str())
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_n_runs_three_cycles_then_a_role_member_denies() {
    use support::fake_discord::{CAROL, ROLE_TEAM};
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "1.txt", "contents": "one"}),
    ));
    // A hostile reply: 10,000+ characters with @everyone and role mentions, run automatically.
    openai.push_content(hostile_reply(2));
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "3.txt", "contents": "three"}),
    ));
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "4.txt", "contents": "four"}),
    ));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Write files",
            name: Some("FileGPT"),
            ..Start::default()
        },
    )
    .await;

    let first = card(&discord, thread, "FileGPT · cycle 1").await;
    let opened = discord.click(ALICE, &[], &first, &button(&first, "Approve ×"));
    let modal = discord
        .wait_for("the Approve ×N modal", WAIT, |d| {
            d.callbacks(opened).into_iter().find(|c| c.kind == 9)
        })
        .await;
    assert_eq!(
        modal.data.pointer("/components/0/components/0/value"),
        Some(&json!("5")),
        "the default N comes from config"
    );
    discord.submit_modal(ALICE, &[], thread, opened, "3");
    let fourth = card(&discord, thread, "FileGPT · cycle 4").await;
    for cycle in [2, 3] {
        let shown = card(&discord, thread, &format!("FileGPT · cycle {cycle}")).await;
        assert_eq!(
            shown["components"],
            json!([]),
            "cycle {cycle} ran without buttons"
        );
        assert!(
            status_of(&shown).starts_with("Approved automatically"),
            "{}",
            status_of(&shown)
        );
    }
    assert!(
        !fourth["components"].as_array().unwrap().is_empty(),
        "the fourth asks again"
    );

    // Carol is not shared yet; after `/agent share role:team` her role lets her decide.
    let deny = button(&fourth, "Deny");
    let refused = discord.click(CAROL, &[ROLE_TEAM], &fourth, &deny);
    assert!(ephemeral_text(&discord, refused)
        .await
        .starts_with("Only the agent's owner"));
    let share = discord.slash(
        ALICE,
        &[],
        thread,
        "share",
        json!([{"name": "role", "type": 8, "value": ROLE_TEAM.to_string()}]),
        json!({"roles": {ROLE_TEAM.to_string(): support::fake_discord::role(ROLE_TEAM, "team")}}),
    );
    let shared = ephemeral_text(&discord, share).await;
    assert!(shared.contains("now shared with"), "{shared}");
    discord.click(CAROL, &[ROLE_TEAM], &fourth, &deny);
    message_containing(&discord, thread, "stopped by carol").await;
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_approvals_yield_exactly_one_decision_100_times() {
    const ROUNDS: usize = 100;
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for i in 0..=ROUNDS {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": format!("{i}.txt"), "contents": "x"}),
        ));
    }
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Race",
            name: Some("RaceGPT"),
            share_user: Some(BOB),
            ..Start::default()
        },
    )
    .await;
    for round in 1..=ROUNDS {
        let shown = card(&discord, thread, &format!("RaceGPT · cycle {round}")).await;
        let approve = button(&shown, "Approve");
        let a = discord.click(ALICE, &[], &shown, &approve);
        let b = discord.click(BOB, &[], &shown, &approve);
        card(&discord, thread, &format!("RaceGPT · cycle {}", round + 1)).await;
        // Exactly one result for this cycle, and the loser is told who decided.
        let results = discord
            .messages_in(thread)
            .iter()
            .filter(|m| {
                m["content"]
                    .as_str()
                    .unwrap_or("")
                    .contains(&format!("File {}.txt has been written", round - 1))
            })
            .count();
        assert_eq!(results, 1, "round {round}");
        // The edited card names the winner; the other clicker is told who decided.
        let edited = discord
            .messages_in(thread)
            .into_iter()
            .find(|m| m["id"] == shown["id"])
            .unwrap();
        let status = status_of(&edited);
        let (winner, loser, loser_click) = if status.contains("by alice") {
            ("alice", "bob", b)
        } else if status.contains("by bob") {
            ("bob", "alice", a)
        } else {
            panic!("round {round}: the card does not name a decider: {status}")
        };
        let told = ephemeral_text(&discord, loser_click).await;
        assert_eq!(
            told,
            format!("This proposal is no longer pending: already decided by {winner}."),
            "round {round}: what {loser} was told"
        );
        let winner_click = if loser_click == a { b } else { a };
        assert!(
            discord.followups_for(winner_click).is_empty()
                && discord.callbacks(winner_click).iter().all(|c| c.kind == 6),
            "round {round}: the winner gets no refusal"
        );
    }
    discord.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_waiting_across_a_restart_still_works() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "a.txt", "contents": "a"}),
    ));
    openai.push_content(agent_reply("read_file", json!({"filename": "a.txt"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Survive",
            name: Some("PhoenixGPT"),
            ..Start::default()
        },
    )
    .await;
    let first = card(&discord, thread, "PhoenixGPT · cycle 1").await;
    // The kill comes once the card's reference is on disk, as the bot's log says.
    bot.wait_for_log("card remembered", 1, WAIT).await;
    bot.kill().await;

    let bot = start_bot(&env, &discord).await;
    discord
        .wait_for("a second IDENTIFY", WAIT, |d| {
            (d.identifies() >= 2).then_some(())
        })
        .await;
    // The same card, still there, is clicked after the restart.
    let clicked = discord.click(ALICE, &[], &first, &button(&first, "Approve"));
    card(&discord, thread, "PhoenixGPT · cycle 2").await;
    assert_eq!(discord.callbacks(clicked)[0].kind, 6);
    let cards_for_cycle_1 = discord
        .messages_in(thread)
        .iter()
        .filter(|m| title(m) == "PhoenixGPT · cycle 1")
        .count();
    assert_eq!(
        cards_for_cycle_1, 1,
        "the old card was reused, not posted again"
    );
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_and_plain_messages_then_finish_and_export() {
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
    openai.push_content(agent_reply(
        "finish",
        json!({"reason": "poem and colour written"}),
    ));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Write a poem",
            name: Some("PoetGPT"),
            ..Start::default()
        },
    )
    .await;
    let first = card(&discord, thread, "PoetGPT · cycle 1").await;
    discord.click(ALICE, &[], &first, &button(&first, "Approve"));
    let second = card(&discord, thread, "PoetGPT · cycle 2").await;
    discord.click(ALICE, &[], &second, &button(&second, "Approve"));
    message_containing(&discord, thread, "asks: Which colour?").await;
    // Bob may not answer for the agent; Alice's message is the answer.
    discord.say(BOB, &[], thread, "green");
    discord.say(ALICE, &[], thread, "blue");
    let third = card(&discord, thread, "PoetGPT · cycle 3").await;
    assert!(discord.messages_in(thread).iter().any(|m| m["content"]
        .as_str()
        .unwrap_or("")
        .contains("The user's answer: blue")));
    assert!(third["components"]
        .as_array()
        .is_some_and(|c| !c.is_empty()));
    // While a card waits, a plain message is the team talking; a reply to the card is feedback.
    discord.say(ALICE, &[], thread, "nice so far");
    let third_id: u64 = third["id"].as_str().unwrap().parse().unwrap();
    discord.reply_to(ALICE, &[], thread, third_id, "use red instead");
    let fourth = card(&discord, thread, "PoetGPT · cycle 4").await;
    let said = |needle: &str| {
        discord.messages_in(thread).iter().any(|m| {
            m["author"]["id"] == support::fake_discord::APP.to_string().as_str()
                && m["content"].as_str().unwrap_or("").contains(needle)
        })
    };
    assert!(said("use red instead"));
    assert!(!said("nice so far"), "a plain message is not feedback");
    // A reply to a card that another has replaced decides nothing.
    discord.reply_to(ALICE, &[], thread, third_id, "late reply");
    discord.click(ALICE, &[], &fourth, &button(&fourth, "Approve"));
    discord
        .wait_for("the closing summary", WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .find(|m| title(m) == "PoetGPT finished")
        })
        .await;

    assert!(
        !said("late reply"),
        "a reply to an old card is not feedback"
    );
    let export = discord.slash(ALICE, &[], thread, "export", json!([]), json!({}));
    let attached = discord
        .wait_for("the export", WAIT, |d| {
            d.followups_for(export).first().cloned()
        })
        .await;
    let files: Vec<String> = attached["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["filename"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(files.len(), 3, "{attached}");
    assert!(
        files[0].ends_with("-transcript.md")
            && files[1].ends_with("-audit.md")
            && files[2].ends_with("-workspace.zip"),
        "{files:?}"
    );
    let transcript = attached["attachments"][0]["text"].as_str().unwrap();
    assert!(
        transcript.contains("### Cycle 2: `ask_user("),
        "{transcript}"
    );
    assert!(transcript.contains("The user's answer: blue"));
    assert!(attached["attachments"][2]["size"].as_u64().unwrap() > 100);
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_pause_resume_list_and_the_per_user_cap() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "a.txt", "contents": "a"}),
    ));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    std::fs::write(
        env.dir.path().join("bot.toml"),
        std::fs::read_to_string(env.dir.path().join("bot.toml")).unwrap()
            + "\n[discord]\nmax_agents_per_user = 1\n",
    )
    .unwrap();
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Idle",
            name: Some("IdleGPT"),
            ..Start::default()
        },
    )
    .await;
    let first = card(&discord, thread, "IdleGPT · cycle 1").await;

    // A second agent for the same person is over the cap of 1.
    let second = discord.slash(
        ALICE,
        &[],
        CHANNEL,
        "start",
        json!([{"name": "task", "type": 3, "value": "More"}]),
        json!({}),
    );
    // The refusal is the first response, so it is private.
    let text = answer(&discord, second, true).await;
    assert!(text.contains("the limit per person"), "{text}");
    assert_eq!(
        discord.callbacks(second)[0].kind,
        4,
        "refused before any deferral"
    );
    assert_eq!(discord.threads().len(), 1);

    let status = discord.slash(ALICE, &[], thread, "status", json!([]), json!({}));
    let shown = ephemeral_text(&discord, status).await;
    assert!(
        shown.contains("**IdleGPT** — awaiting decision — cycle 1")
            && shown.contains("\nSpend: $0.00 of $1.00 ($0.00 reserved for calls in flight)"),
        "{shown}"
    );

    let paused = discord.slash(ALICE, &[], thread, "pause", json!([]), json!({}));
    assert_eq!(ephemeral_text(&discord, paused).await, "Pausing.");
    message_containing(&discord, thread, "paused by alice").await;
    // Bob may not resume someone else's agent.
    let refused = discord.slash(BOB, &[], thread, "resume", json!([]), json!({}));
    assert!(ephemeral_text(&discord, refused)
        .await
        .starts_with("Only the agent's owner"));
    let resumed = discord.slash(ALICE, &[], thread, "resume", json!([]), json!({}));
    assert_eq!(ephemeral_text(&discord, resumed).await, "Resuming.");
    // The waiting proposal's card is shown again, in place.
    discord
        .wait_for("the card back in place", WAIT, |d| {
            d.messages_in(thread).into_iter().find(|m| {
                m["id"] == first["id"]
                    && status_of(m) == "Waiting for a decision"
                    && m["edited_timestamp"].is_string()
            })
        })
        .await;

    let list = discord.slash(ALICE, &[], CHANNEL, "list", json!([]), json!({}));
    let listed = ephemeral_text(&discord, list).await;
    assert!(
        listed.contains("**IdleGPT**") && listed.contains(&format!("<#{thread}>")),
        "{listed}"
    );
    discord.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_agents_start_at_once() {
    const AGENTS: usize = 50;
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for i in 0..AGENTS {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": format!("{i}.txt"), "contents": "x"}),
        ));
    }
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    std::fs::write(
        env.dir.path().join("bot.toml"),
        std::fs::read_to_string(env.dir.path().join("bot.toml")).unwrap()
            + "\n[discord]\nmax_agents_per_user = 0\nmax_agents_per_guild = 0\n",
    )
    .unwrap();
    let bot = start_bot(&env, &discord).await;
    let starts: Vec<u64> = (0..AGENTS)
        .map(|i| {
            discord.slash(
                ALICE,
                &[],
                CHANNEL,
                "start",
                json!([{"name": "task", "type": 3, "value": "go"}, {"name": "name", "type": 3, "value": format!("A{i}")}]),
                json!({}),
            )
        })
        .collect();
    let replies: Vec<String> = discord
        .wait_for("every start reply", WAIT, |d| {
            let replies: Vec<String> = starts
                .iter()
                .filter_map(|s| {
                    d.followups_for(*s)
                        .first()
                        .map(|m| m["content"].as_str().unwrap_or("").to_string())
                })
                .collect();
            (replies.len() == AGENTS).then_some(replies)
        })
        .await;
    let failed: Vec<&String> = replies
        .iter()
        .filter(|r| !r.starts_with("Started agent"))
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    for thread in discord.threads() {
        let thread: u64 = thread["id"].as_str().unwrap().parse().unwrap();
        discord
            .wait_for("a first card", WAIT, |d| {
                d.messages_in(thread)
                    .into_iter()
                    .find(|m| title(m).ends_with("· cycle 1"))
            })
            .await;
    }
    discord.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_image_is_attached_to_its_result_in_the_thread() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "generate_image",
        json!({"prompt": "A red fox in snow"}),
    ));
    openai.push_content(agent_reply("finish", json!({"reason": "drawn"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let path = env.dir.path().join("bot.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str("\n[images]\nmodel = \"dall-e-3\"\n");
    std::fs::write(&path, config).unwrap();
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Draw a fox",
            name: Some("FoxGPT"),
            ..Start::default()
        },
    )
    .await;
    let first = card(&discord, thread, "FoxGPT · cycle 1").await;
    discord.click(ALICE, &[], &first, &button(&first, "Approve"));
    let result = message_containing(&discord, thread, "Saved a 1024x1024 image").await;
    let attached = result["attachments"].as_array().unwrap();
    assert_eq!(attached.len(), 1, "{result}");
    assert_eq!(attached[0]["filename"], "1-a-red-fox-in-snow.png");
    let image = support::fake_openai::fake_image("A red fox in snow");
    assert_eq!(attached[0]["size"].as_u64(), Some(image.len() as u64));
    assert_eq!(
        attached[0]["text"].as_str().unwrap(),
        String::from_utf8_lossy(&image)
    );
    card(&discord, thread, "FoxGPT · cycle 2").await;
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_withdraws_a_question_archive_closes_the_thread_and_only_running_agents_count() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "a.txt", "contents": "a"}),
    ));
    openai.push_content(agent_reply(
        "ask_user",
        json!({"question": "Which colour?"}),
    ));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    std::fs::write(
        env.dir.path().join("bot.toml"),
        std::fs::read_to_string(env.dir.path().join("bot.toml")).unwrap()
            + "\n[discord]\nmax_agents_per_user = 1\n",
    )
    .unwrap();
    let bot = start_bot(&env, &discord).await;
    let first_thread = start_agent(
        &discord,
        Start {
            task: "Write a",
            name: Some("FirstGPT"),
            ..Start::default()
        },
    )
    .await;
    let first_card = card(&discord, first_thread, "FirstGPT · cycle 1").await;
    // Paused, the agent no longer counts against the cap of one: a second one starts.
    let paused = discord.slash(ALICE, &[], first_thread, "pause", json!([]), json!({}));
    assert_eq!(ephemeral_text(&discord, paused).await, "Pausing.");
    message_containing(&discord, first_thread, "paused by alice").await;
    let second_thread = start_agent(
        &discord,
        Start {
            task: "Ask about colours",
            name: Some("SecondGPT"),
            ..Start::default()
        },
    )
    .await;
    // Going on would make two running: refused.
    let refused = discord.slash(ALICE, &[], first_thread, "resume", json!([]), json!({}));
    let text = ephemeral_text(&discord, refused).await;
    assert!(
        text.starts_with("You already run 1 agents, the limit per person."),
        "{text}"
    );
    let list = discord.slash(ALICE, &[], CHANNEL, "list", json!([]), json!({}));
    let listed = ephemeral_text(&discord, list).await;
    let running = listed.find("__Running__\n**SecondGPT**");
    let paused = listed.find("__Paused__\n**FirstGPT**");
    assert!(
        running.is_some() && paused.is_some() && running < paused,
        "{listed}"
    );

    // The second agent asks a question; finishing it withdraws the question at once.
    let ask = card(&discord, second_thread, "SecondGPT · cycle 1").await;
    discord.click(ALICE, &[], &ask, &button(&ask, "Approve"));
    message_containing(&discord, second_thread, "asks: Which colour?").await;
    let finish = discord.slash(ALICE, &[], second_thread, "finish", json!([]), json!({}));
    assert!(ephemeral_text(&discord, finish)
        .await
        .starts_with("Finishing: the agent's task ends"));
    message_containing(&discord, second_thread, "the question was withdrawn").await;
    let closing = discord
        .wait_for("the closing summary", WAIT, |d| {
            d.messages_in(second_thread)
                .into_iter()
                .find(|m| title(m) == "SecondGPT finished")
        })
        .await;
    assert!(
        closing["embeds"][0]["description"]
            .as_str()
            .unwrap()
            .contains("Finished by alice."),
        "{closing}"
    );

    // Now the first may go on; its card is shown again.
    let resumed = discord.slash(ALICE, &[], first_thread, "resume", json!([]), json!({}));
    assert_eq!(ephemeral_text(&discord, resumed).await, "Resuming.");
    // Only its owner (or a thread manager) archives it; archiving finishes it first.
    let refused = discord.slash(BOB, &[], first_thread, "archive", json!([]), json!({}));
    assert!(ephemeral_text(&discord, refused)
        .await
        .starts_with("Only the agent's owner"));
    assert!(!discord.is_archived(first_thread));
    let archive = discord.slash(ALICE, &[], first_thread, "archive", json!([]), json!({}));
    assert!(ephemeral_text(&discord, archive)
        .await
        .starts_with("Finishing; the thread is archived"));
    message_containing(
        &discord,
        first_thread,
        "Not run: alice finished the agent's task.",
    )
    .await;
    discord
        .wait_for("the archived thread", WAIT, |d| {
            d.is_archived(first_thread).then_some(())
        })
        .await;
    // Its waiting card can no longer approve anything.
    discord.click(ALICE, &[], &first_card, &button(&first_card, "Approve"));
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_is_shared_at_its_start_with_several_people_and_roles() {
    use support::fake_discord::{CAROL, ROLE_TEAM};
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for n in 1..=3 {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": format!("{n}.txt"), "contents": "x"}),
        ));
    }
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    // Anything but mentions is refused before a thread is opened.
    let (options, resolved) = Start {
        task: "Write",
        share_with: Some("<@4000000000000000002> bob"),
        ..Start::default()
    }
    .options();
    let refused = discord.slash(ALICE, &[], CHANNEL, "start", options, resolved);
    assert!(answer(&discord, refused, true)
        .await
        .contains("`bob` is not a mention"));
    assert!(discord.threads().is_empty());
    let mentions = format!("<@{BOB}>, <@&{ROLE_TEAM}>");
    let thread = start_agent(
        &discord,
        Start {
            task: "Write",
            name: Some("TeamGPT"),
            share_with: Some(&mentions),
            ..Start::default()
        },
    )
    .await;
    // Bob is named; Carol decides through the team role, and not without it.
    let first = card(&discord, thread, "TeamGPT · cycle 1").await;
    discord.click(BOB, &[], &first, &button(&first, "Approve"));
    let second = card(&discord, thread, "TeamGPT · cycle 2").await;
    let refused = discord.click(CAROL, &[], &second, &button(&second, "Approve"));
    assert!(ephemeral_text(&discord, refused)
        .await
        .starts_with("Only the agent's owner"));
    discord.click(CAROL, &[ROLE_TEAM], &second, &button(&second, "Approve"));
    card(&discord, thread, "TeamGPT · cycle 3").await;
    discord.assert_clean();
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_deletes_an_agent_after_confirming() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    for n in 1..=2 {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": format!("{n}.txt"), "contents": "x"}),
        ));
    }
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot(&env, &discord).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Write",
            name: Some("GoneGPT"),
            ..Start::default()
        },
    )
    .await;
    let first = card(&discord, thread, "GoneGPT · cycle 1").await;
    discord.click(ALICE, &[], &first, &button(&first, "Approve"));
    let second = card(&discord, thread, "GoneGPT · cycle 2").await;
    // Only the owner (or a server admin) is offered the deletion.
    let refused = discord.slash(BOB, &[], thread, "delete", json!([]), json!({}));
    assert!(answer(&discord, refused, true)
        .await
        .starts_with("Only the agent's owner"));
    let asked = discord.slash(ALICE, &[], thread, "delete", json!([]), json!({}));
    let confirm = support::bot::response_shown(&discord, thread, asked, 4).await;
    assert!(
        confirm["content"]
            .as_str()
            .unwrap()
            .starts_with("Delete **GoneGPT** for good?"),
        "{confirm}"
    );
    // Bob's click on Alice's confirmation is refused too.
    let delete = button(&confirm, "Delete for good");
    let refused = discord.click(BOB, &[], &confirm, &delete);
    assert!(ephemeral_text(&discord, refused)
        .await
        .starts_with("Only the agent's owner"));
    discord.click(ALICE, &[], &confirm, &delete);
    message_containing(&discord, thread, "**GoneGPT** was deleted by alice").await;
    discord
        .wait_for("the archived thread", WAIT, |d| {
            d.is_archived(thread).then_some(())
        })
        .await;
    // Nothing of it is left: its card, the thread's commands and the command line find nothing.
    let late = discord.click(ALICE, &[], &second, &button(&second, "Approve"));
    assert!(!ephemeral_text(&discord, late).await.is_empty());
    let status = discord.slash(ALICE, &[], thread, "status", json!([]), json!({}));
    assert!(answer(&discord, status, true)
        .await
        .contains("Use this in an agent's thread."));
    let (_, listed, _) = env.run(&["list"]).await;
    assert!(!listed.contains("GoneGPT"), "{listed}");
    discord.assert_clean();
    openai.assert_clean();
    bot.kill().await;
}
