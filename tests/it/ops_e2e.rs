//! What a deployment sees of the real binary: the health, readiness and metrics listener, JSON
//! logs, and the graceful shutdown on SIGTERM.

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::bot::{card, start_agent, start_bot_with, Start, WAIT};
use support::fake_discord::FakeDiscord;
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind, Reply};
use support::{Running, TestEnv};

/// The listener's address from the start-up line `ops listener: http://ADDR (…)`.
async fn ops_address(bot: &Running) -> String {
    bot.wait_for_log("ops listener: http://", 1, WAIT).await;
    let log = bot.stderr();
    let at = log.find("ops listener: http://").unwrap() + "ops listener: http://".len();
    log[at..]
        .split([' ', '"', '\\'])
        .next()
        .unwrap()
        .to_string()
}

async fn get(addr: &str, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// glibc keeps pages freed inside its heaps resident; the bot hands them back from a thread of
/// its own, which must be running for as long as the bot is.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bot_runs_the_thread_that_hands_free_heap_pages_back() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot_with(&env, &discord, &[], None).await;
    let tasks = std::fs::read_dir(format!("/proc/{}/task", bot.pid())).unwrap();
    let names: Vec<String> = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect();
    assert!(
        names.iter().any(|name| name == "heap-trim"),
        "the bot's threads: {names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_metrics_and_json_logs() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "a.txt", "contents": "a"}),
    ));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    // No RUST_LOG: the bot's own default (info) decides what a healthy start prints.
    let bot = start_bot_with(&env, &discord, &["--log-format", "json"], None).await;
    let addr = ops_address(&bot).await;

    let (status, body) = get(&addr, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    // The image's HEALTHCHECK: `autothread health` against the listener.
    let health = |listen: String| {
        let mut cmd = env.command(&["health"]);
        cmd.env("AUTOTHREAD_OPS_LISTEN", listen);
        Running::new_public(cmd.spawn().unwrap()).finish(WAIT)
    };
    let (ok, out, err) = health(addr.clone()).await;
    assert!(ok && out.starts_with("ok:"), "{out}{err}");

    let thread = start_agent(
        &discord,
        Start {
            task: "Watch me",
            name: Some("OpsGPT"),
            ..Start::default()
        },
    )
    .await;
    card(&discord, thread, "OpsGPT · cycle 1").await;

    let (status, body) = get(&addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    for check in [
        "ok    store: open",
        "ok    gateway: connected",
        "ok    model endpoint: answered",
    ] {
        assert!(body.contains(check), "{check:?} in {body}");
    }

    let (status, metrics) = get(&addr, "/metrics").await;
    assert_eq!(status, 200);
    for series in [
        "autothread_agents{state=\"awaiting decision\"} 1",
        "autothread_pending_cards 1",
        "autothread_cycles_total 1",
        "autothread_model_calls_total{model=\"test-model\",purpose=\"think\",outcome=\"replied\"} 1",
        "autothread_tokens_total{model=\"test-model\",kind=\"prompt\"}",
        "autothread_spend_microdollars_total{model=\"test-model\"}",
        "autothread_model_call_seconds_bucket{model=\"test-model\"",
        "autothread_interaction_ack_seconds_count{kind=\"command\"} 1",
        "# HELP autothread_store_bytes",
    ] {
        assert!(metrics.contains(series), "{series:?} in\n{metrics}");
    }

    // Every log line is one JSON object; the start-up names each subsystem at info.
    let log = bot.stderr();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let messages: Vec<&str> = lines
        .iter()
        .filter(|l| l["level"] == "INFO")
        .filter_map(|l| l["fields"]["message"].as_str())
        .collect();
    for subsystem in [
        "store: ",
        "model endpoint: ",
        "memory: off",
        "web: ",
        "discord: ",
        "ops listener: ",
    ] {
        assert!(
            messages.iter().any(|m| m.starts_with(subsystem)),
            "{subsystem:?} in {messages:?}"
        );
    }
    assert!(!log.contains("fake-token"), "no secret in the log");
    bot.kill().await;
    let (ok, out, _) = health(addr).await;
    assert!(!ok && out.starts_with("not healthy"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_model_call_lets_it_finish_and_the_agent_continues_after_restart() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    // The first cycle's reply takes a while: SIGTERM arrives while it is under way.
    openai.push(Reply::Delay(
        Duration::from_millis(1500),
        Box::new(Reply::Content(agent_reply(
            "write_file",
            json!({"filename": "a.txt", "contents": "a"}),
        ))),
    ));
    openai.push_content(agent_reply("read_file", json!({"filename": "a.txt"})));
    openai.push_content(agent_reply("finish", json!({"reason": "all done"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::new(&openai.base_url, "");
    let bot = start_bot_with(&env, &discord, &[], Some("warn,autothread=info")).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Write a and read it back",
            name: Some("DrainGPT"),
            continuous: Some(5),
            ..Start::default()
        },
    )
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while openai.requests(Kind::Cycle).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no cycle call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bot.terminate();
    let (ok, out, err) = bot.finish(WAIT).await;
    assert!(ok, "exit 0 after SIGTERM\n{out}\n{err}");
    assert!(
        err.contains("SIGTERM") && err.contains("shut down cleanly"),
        "{err}"
    );
    // The call under way was answered and paid; nothing new started during the drain.
    assert_eq!(openai.requests(Kind::Cycle).len(), 1);

    let bot = start_bot_with(&env, &discord, &[], Some("warn,autothread=info")).await;
    let finished = discord
        .wait_for("the agent to finish after the restart", WAIT, |d| {
            d.messages_in(thread)
                .into_iter()
                .find(|m| m.to_string().contains("all done"))
        })
        .await;
    let (_, out, _) = {
        bot.terminate();
        bot.finish(WAIT).await
    };
    assert!(
        !out.contains("Settled"),
        "no call was settled at its worst case: {out}"
    );
    assert!(finished.to_string().contains("all done"));
    // The write approved before the shutdown ran once, after the restart.
    assert_eq!(openai.requests(Kind::Cycle).len(), 3);
    discord.assert_clean();
    openai.assert_clean();
}

/// Runs `autothread check` with the environment a deployment would have.
async fn check(env: &TestEnv, discord_base: &str, token: &str) -> (bool, String, String) {
    let mut cmd = env.command(&["check"]);
    cmd.env("DISCORD_TOKEN", token)
        .env("DISCORD_API_BASE", discord_base)
        .env("OPENAI_API_KEY", "sk-check-secret");
    Running::new_public(cmd.spawn().unwrap()).finish(WAIT).await
}

fn without_web(env: &TestEnv) {
    let path = env.dir.path().join("bot.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(path, format!("{config}\n[web]\nenabled = false\n")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_proves_each_endpoint_and_names_the_bot_holding_the_store() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.set_embeddings_failing(Some(501));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_memory(&openai.base_url, "");
    without_web(&env);
    let bot = start_bot_with(&env, &discord, &[], Some("warn")).await;

    let (ok, out, err) = check(&env, &discord.base_url, "fake-token").await;
    assert!(ok, "{out}{err}");
    for expected in [
        "✓ config: valid",
        "is in use by a running bot (process ",
        "✓ chat endpoint: ",
        "answers with model test-model (response format json_schema accepted)",
        "✓ context window: model test-model: 4096 tokens from [llm.models], replies up to 500",
        "! embeddings: ",
        "HTTP 501",
        "agents will run without long-term memory",
        "✓ discord: the token is valid: the bot is fakebot",
        "! web search: the web commands are off",
        "The deployment is ready.",
    ] {
        assert!(out.contains(expected), "{expected:?} in\n{out}");
    }
    assert_eq!(openai.requests(Kind::Check).len(), 1);
    for secret in ["sk-check-secret", "fake-token"] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret} leaked"
        );
    }
    bot.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_on_a_dead_model_endpoint_and_a_refused_token() {
    let discord = FakeDiscord::start().await;
    // Nothing listens on port 9 of loopback (discard): the connection is refused at once.
    let env = TestEnv::new("http://127.0.0.1:9/v1", "");
    without_web(&env);
    let (ok, out, err) = check(&env, &discord.base_url, "wrong-token").await;
    assert!(!ok, "{out}{err}");
    for expected in [
        "✓ store: opens in ",
        "✗ chat endpoint: http://127.0.0.1:9/v1: ",
        "✓ context window: model test-model: 4096 tokens from [llm.models]",
        "✗ discord: Discord refused DISCORD_TOKEN (401)",
        "Something required failed",
    ] {
        assert!(out.contains(expected), "{expected:?} in\n{out}");
    }
    assert!(!out.contains("wrong-token") && !err.contains("wrong-token"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_status_budget_export_and_memory_work_while_the_bot_holds_the_store() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "ferry.txt", "contents": "The ferry leaves at 7:40."}),
    ));
    openai.push_content(agent_reply("read_file", json!({"filename": "ferry.txt"})));
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_memory(&openai.base_url, "guild_calls_per_minute = 0\n");
    let bot = start_bot_with(&env, &discord, &[], Some("warn")).await;
    let thread = start_agent(
        &discord,
        Start {
            task: "Note the ferry time",
            name: Some("FerryGPT"),
            continuous: Some(1),
            ..Start::default()
        },
    )
    .await;
    card(&discord, thread, "FerryGPT · cycle 2").await;
    let admin_file = env.data_dir().join("autothread.admin.json");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&admin_file).unwrap().permissions(),
    );
    assert_eq!(
        mode & 0o777,
        0o600,
        "only the bot's user may read the token"
    );

    // Each command is answered by the running bot; none fails on sled's lock.
    let (ok, out, err) = env.run(&["list"]).await;
    assert!(ok && out.contains("FerryGPT"), "{out}{err}");
    let id = out
        .lines()
        .find(|l| l.contains("FerryGPT"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string();
    let (ok, out, err) = env.run(&["status", &id[..6]]).await;
    assert!(ok, "{out}{err}");
    for expected in [
        "(FerryGPT): awaiting decision, cycle 2",
        "Waiting for a decision on cycle 2: read_file({\"filename\":\"ferry.txt\"})",
        "Usage: ",
    ] {
        assert!(out.contains(expected), "{expected:?} in {out}");
    }
    let (ok, out, err) = env.run(&["budget", &id]).await;
    assert!(ok && out.contains(" spent ("), "{out}{err}");
    let (ok, out, err) = env.run(&["memory", "search", &id, "ferry"]).await;
    assert!(ok && out.contains("ferry.txt"), "{out}{err}");
    let exported = env.dir.path().join("export");
    let (ok, out, err) = env
        .run(&["export", &id, "--out", exported.to_str().unwrap()])
        .await;
    assert!(ok, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(exported.join("workspace/ferry.txt")).unwrap(),
        "The ferry leaves at 7:40."
    );
    assert!(std::fs::read_to_string(exported.join("transcript.md"))
        .unwrap()
        .contains("FerryGPT"));

    // Without the token the endpoint answers nothing.
    let admin: Value =
        serde_json::from_str(&std::fs::read_to_string(&admin_file).unwrap()).unwrap();
    let refused = reqwest::Client::new()
        .post(format!(
            "http://{}/admin/inspect",
            admin["addr"].as_str().unwrap()
        ))
        .bearer_auth("not-the-token")
        .json(&json!({"command": "list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);

    // A stopped bot removes its admin file; the commands then open the store themselves.
    bot.terminate();
    bot.finish(WAIT).await;
    assert!(!admin_file.exists());
    let (ok, out, err) = env.run(&["list"]).await;
    assert!(ok && out.contains("FerryGPT"), "{out}{err}");
    openai.assert_clean();
}
