//! Two `autothread run` processes, each serving one of two gateway shards with its own store,
//! against the fake Discord, which sends each server's events to the shard Discord would: each
//! server's agent lives in its own process, and nothing crosses between them.

use crate::support;

use serde_json::json;
use support::bot::{answer, button, card, start_bot_on_shards, WAIT};
use support::fake_discord::{FakeDiscord, ALICE, CHANNEL, CHANNEL_B, GUILD, GUILD_B};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Reply};
use support::TestEnv;

/// Alice runs `/agent start` in `channel`; returns the new thread.
async fn start_in(discord: &FakeDiscord, channel: u64, name: &str) -> u64 {
    let before = discord.threads().len();
    let options = json!([{"name": "task", "type": 3, "value": format!("Keep notes for {name}")},
                         {"name": "name", "type": 3, "value": name}]);
    let started = discord.slash(ALICE, &[], channel, "start", options, json!({}));
    let reply = answer(discord, started, false).await;
    let threads = discord.threads();
    assert_eq!(threads.len(), before + 1, "no thread was opened: {reply}");
    threads.last().unwrap()["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_serve_one_shard_each_and_no_agent_crosses_to_the_other() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.set_endless(Reply::Content(agent_reply(
        "write_file",
        json!({"filename": "notes.txt", "contents": "note {n}"}),
    )));
    let discord = FakeDiscord::start().await;
    // Discord's rule, (guild_id >> 22) % 2, puts the two servers on different shards.
    assert_eq!((GUILD >> 22) % 2, 1);
    assert_eq!((GUILD_B >> 22) % 2, 0);
    let (env_zero, env_one) = (
        TestEnv::new(&openai.base_url, ""),
        TestEnv::new(&openai.base_url, ""),
    );
    let zero = start_bot_on_shards(&env_zero, &discord, "0", 2, &[0]).await;
    let one = start_bot_on_shards(&env_one, &discord, "1..2", 2, &[1]).await;

    let thread_one = start_in(&discord, CHANNEL, "ShardOneGPT").await;
    let thread_zero = start_in(&discord, CHANNEL_B, "ShardZeroGPT").await;
    let threads = discord.threads();
    assert_eq!(threads[0]["guild_id"], GUILD.to_string());
    assert_eq!(threads[1]["guild_id"], GUILD_B.to_string());

    // Each card's buttons work: the click reaches the process that posted the card.
    for (thread, name) in [(thread_one, "ShardOneGPT"), (thread_zero, "ShardZeroGPT")] {
        let first = card(&discord, thread, &format!("{name} · cycle 1")).await;
        let approved = discord.click(ALICE, &[], &first, &button(&first, "Approve"));
        card(&discord, thread, &format!("{name} · cycle 2")).await;
        assert_eq!(discord.callbacks(approved)[0].kind, 6, "acknowledged once");
    }

    // Each process holds only its own server's agent.
    for (env, mine, other) in [
        (&env_zero, "ShardZeroGPT", "ShardOneGPT"),
        (&env_one, "ShardOneGPT", "ShardZeroGPT"),
    ] {
        let (ok, listed, err) = env.run(&["list"]).await;
        assert!(ok, "{err}");
        assert!(listed.contains(mine), "{listed}");
        assert!(!listed.contains(other), "{listed}");
    }
    // Every event reached the shard that serves its server, and only that one.
    assert!(discord.queued_payloads().is_empty());
    discord.assert_clean();
    zero.terminate();
    one.terminate();
    let (zero_ok, _, _) = zero.finish(WAIT).await;
    let (one_ok, _, _) = one.finish(WAIT).await;
    assert!(zero_ok && one_ok, "both processes stop cleanly");

    // A store started with another process's shards is refused, naming why, before connecting.
    let (ok, _, err) = env_one
        .run(&["run", "--shards", "0", "--total-shards", "2"])
        .await;
    assert!(!ok);
    assert!(
        err.contains("does not serve with shard 0 of 2") && err.contains("is on shard 1"),
        "{err}"
    );
    let (ok, _, err) = env_one
        .run(&["run", "--shards", "0..3", "--total-shards", "2"])
        .await;
    assert!(!ok);
    assert!(err.contains("numbered 0 to 1"), "{err}");
}
