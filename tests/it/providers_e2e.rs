//! Providers end to end, the real binary against the fake: an Azure OpenAI deployment (its
//! `api-version` query and `api-key` header), OpenAI's reasoning models (`max_completion_tokens`,
//! no temperature), and an unknown model's context window (reported by the server, or a warned
//! guess).

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind, AZURE_KEY};
use crate::support::{Running, TestEnv};

const WAIT: Duration = Duration::from_secs(60);

/// Runs a console agent for one write and a finish, in continuous mode, with `vars` in its
/// environment; returns (success, stdout, stderr).
async fn write_and_finish(
    env: &TestEnv,
    openai: &FakeOpenAi,
    args: &[&str],
    vars: &[(&str, &str)],
) -> (bool, String, String) {
    // Reading back two lines leaves a step the model condenses: a summary call too.
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "plan.txt", "contents": "step one\nstep two"}),
    ));
    openai.push_content(agent_reply("read_file", json!({"filename": "plan.txt"})));
    openai.push_content(agent_reply("finish", json!({"reason": "written"})));
    let mut all = vec![
        "console",
        "--task",
        "Write the plan",
        "--name",
        "PlanGPT",
        "--role",
        "r",
        "--continuous",
    ];
    all.extend_from_slice(args);
    let mut command = env.command(&all);
    for (name, value) in vars {
        command.env(name, value);
    }
    let mut run = Running::new_public(command.spawn().expect("the binary starts"));
    run.wait_for("Input:", 1, WAIT).await;
    run.type_lines(&["y"]).await;
    run.finish(WAIT).await
}

/// `[budget.prices]` for the test model: a paid provider refuses an unpriced model.
const PRICED: &str = "guild_calls_per_minute = 0\n\n[budget.prices.\"test-model\"]\ninput_per_million = 1.0\noutput_per_million = 2.0\n";

/// The `prompt_cache_key` of every chat request the fake saw after the first `skip` of each kind
/// (cycles, then summaries); `None` where a request had none.
fn cache_keys(openai: &FakeOpenAi, skip: (usize, usize)) -> Vec<Option<String>> {
    let key = |body: Value| {
        body.get("prompt_cache_key")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let cycles = openai.requests(Kind::Cycle).into_iter().skip(skip.0);
    let summaries = openai.requests(Kind::Summary).into_iter().skip(skip.1);
    cycles.chain(summaries).map(key).collect()
}

/// Each agent's calls carry one prompt-cache key of its own, a digest that names neither the
/// agent nor a person, where the endpoint is said to take it; a server that is not OpenAI's is
/// sent none by default, since it might refuse a field it does not know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_s_calls_carry_its_own_prompt_cache_key_only_where_the_endpoint_takes_it() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let env = TestEnv::with_budget(&openai.base_url, "", PRICED);
    let (ok, out, err) = write_and_finish(&env, &openai, &[], &[]).await;
    assert!(ok && out.contains("written"), "{out}{err}");
    let keys = cache_keys(&openai, (0, 0));
    assert!(keys.len() >= 3, "every cycle: {keys:?}");
    assert!(keys.iter().all(Option::is_none), "{keys:?}");
    openai.assert_clean();

    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let env = TestEnv::with_budget(&openai.base_url, "prompt_cache_key = \"always\"\n", PRICED);
    let mut agents = Vec::new();
    for _ in 0..2 {
        let seen_before = (
            openai.requests(Kind::Cycle).len(),
            openai.requests(Kind::Summary).len(),
        );
        let (ok, out, err) = write_and_finish(&env, &openai, &[], &[]).await;
        assert!(ok && out.contains("written"), "{out}{err}");
        let keys: Vec<String> = cache_keys(&openai, seen_before)
            .into_iter()
            .map(|key| key.expect("every call of the agent carries a key"))
            .collect();
        assert!(keys.len() >= 3, "{keys:?}");
        assert!(
            keys.iter().all(|k| k == &keys[0]),
            "one key an agent: {keys:?}"
        );
        let id = crate::support::created_agent_id(&out);
        let key = keys[0].clone();
        assert!(key.len() <= 64, "{key}");
        assert!(
            !key.contains(&id) && !key.contains("PlanGPT"),
            "{key} names {id}"
        );
        agents.push(key);
    }
    assert_ne!(agents[0], agents[1], "each agent has its own key");
    openai.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_deployment_gets_its_api_version_and_its_api_key_header() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let deployment = format!("{}/openai/deployments/prod-4o", openai.azure_root());
    let env = TestEnv::with_budget(
        &deployment,
        "provider = \"azure\"\napi_version = \"2024-10-21\"\n",
        PRICED,
    );
    let (ok, out, err) =
        write_and_finish(&env, &openai, &[], &[("AZURE_OPENAI_API_KEY", AZURE_KEY)]).await;
    assert!(ok && out.contains("written"), "{out}{err}");
    // Both cycles and the step's summary went to the deployment, with the version as a query
    // (not glued before the path) and the key as `api-key`; the fake refuses a bearer token.
    let calls = openai.azure_calls();
    assert!(calls.len() >= 3, "{calls:?}");
    assert!(
        calls
            .iter()
            .all(|(name, version)| name == "prod-4o" && version == "2024-10-21"),
        "{calls:?}"
    );
    assert!(
        !out.contains(AZURE_KEY) && !err.contains(AZURE_KEY),
        "the key is never printed"
    );
    openai.assert_clean();

    // The agent keeps its endpoint: resuming it without the config's Azure section still calls
    // the deployment the Azure way.
    let id = crate::support::created_agent_id(&out);
    std::fs::write(
        env.dir.path().join("bot.toml"),
        format!(
            "[llm]\nbase_url = \"{deployment}\"\nmodel = \"test-model\"\ntimeout_secs = 2\n\n\
             [llm.models.\"test-model\"]\ncontext_tokens = 4096\nmax_tokens = 500\n\n\
             [memory]\nenabled = false\n\n[budget]\n{PRICED}"
        ),
    )
    .unwrap();
    let before = openai.azure_calls().len();
    let (ok, out, err) = resume_with_follow_up(&env, &openai, &id).await;
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("Azure OpenAI API version 2024-10-21"),
        "the saved endpoint is named: {out}"
    );
    assert!(openai.azure_calls().len() > before, "{out}{err}");
    openai.assert_clean();
}

async fn resume_with_follow_up(
    env: &TestEnv,
    openai: &FakeOpenAi,
    id: &str,
) -> (bool, String, String) {
    openai.push_content(agent_reply("finish", json!({"reason": "again"})));
    let mut command = env.command(&[
        "console",
        "--resume",
        id,
        "--task",
        "Once more",
        "--continuous",
    ]);
    command.env("AZURE_OPENAI_API_KEY", AZURE_KEY);
    let mut run = Running::new_public(command.spawn().expect("the binary starts"));
    run.close_stdin();
    run.finish(WAIT).await
}

#[tokio::test]
async fn a_base_url_with_an_api_version_query_is_refused_with_the_way_to_configure_azure() {
    let env = TestEnv::new(
        "https://example.openai.azure.com/openai/deployments/x?api-version=2024-10-21",
        "",
    );
    let (ok, out, err) = env.run(&["check"]).await;
    assert!(!ok, "{out}{err}");
    let said = format!("{out}{err}");
    assert!(
        said.contains("llm.base_url")
            && said.contains("llm.provider = \"azure\"")
            && said.contains("llm.api_version"),
        "{said}"
    );
}

fn bodies(openai: &FakeOpenAi) -> Vec<Value> {
    let mut all = openai.requests(Kind::Cycle);
    all.extend(openai.requests(Kind::Summary));
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_models_get_max_completion_tokens_and_no_temperature() {
    // The fake refuses `max_tokens` and a temperature for o-series and gpt-5 models, as OpenAI does.
    let openai = FakeOpenAi::start(Expect {
        max_tokens: Some(8_000),
        response_format: Some("json_schema"),
        context_tokens: None,
    })
    .await;
    let env = TestEnv::new(
        &openai.base_url,
        "temperature = 0.2\nreasoning_effort = \"low\"\n",
    );
    let (ok, out, err) =
        write_and_finish(&env, &openai, &["--model", "gpt-5-mini-2025-08-07"], &[]).await;
    assert!(ok && out.contains("written"), "{out}{err}");
    let sent = bodies(&openai);
    assert!(sent.len() >= 3, "{sent:?}");
    for body in &sent {
        // Cycles get the model's reserve; a summary's 200 tokens are raised to 2,000, since a
        // reasoning model thinks inside its reply budget.
        let reply = body["max_completion_tokens"].as_u64();
        assert!(matches!(reply, Some(8_000) | Some(2_000)), "{body}");
        assert_eq!(body["reasoning_effort"], "low", "{body}");
        assert!(body.get("max_tokens").is_none(), "{body}");
        assert!(body.get("temperature").is_none(), "{body}");
    }
    // A snapshot is priced as its family: each call of 100 + 20 tokens costs 65 µ$.
    let id = crate::support::created_agent_id(&out);
    let (_, budget, _) = env.run(&["budget", &id]).await;
    let spent: u64 = budget
        .split(" spent (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no spend in {budget}"));
    assert_eq!(spent, 65 * sent.len() as u64, "{budget}");
    assert!(
        openai
            .requests(Kind::Summary)
            .iter()
            .all(|body| body["max_completion_tokens"] == 2_000),
        "{sent:?}"
    );
    openai.assert_clean();

    // Any other model keeps `max_tokens` and the configured temperature.
    let plain = FakeOpenAi::start(Expect::test_model()).await;
    let env = TestEnv::new(&plain.base_url, "temperature = 0.2\n");
    let (ok, out, err) = write_and_finish(&env, &plain, &[], &[]).await;
    assert!(ok, "{out}{err}");
    for body in bodies(&plain) {
        assert_eq!(body["temperature"].as_f64(), Some(0.2f32 as f64), "{body}");
        assert!(body.get("reasoning_effort").is_none(), "{body}");
    }
    plain.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_models_window_comes_from_the_server_or_is_a_warned_guess() {
    // llama.cpp reports the window it was started with as `meta.n_ctx`: 3,072 tokens, so replies
    // get a quarter (768) and every prompt must fit in what is left.
    let openai = FakeOpenAi::start(Expect {
        max_tokens: Some(768),
        response_format: Some("json_schema"),
        context_tokens: Some(3_072),
    })
    .await;
    openai.set_models_listing(json!({"object": "list", "data": [
        {"id": "local-llama", "object": "model", "meta": {"n_ctx": 3072, "n_ctx_train": 8192}}
    ]}));
    let env = TestEnv::new(&openai.base_url, "");
    let (ok, out, err) = write_and_finish(&env, &openai, &["--model", "local-llama"], &[]).await;
    assert!(ok && out.contains("written"), "{out}{err}");
    assert_eq!(openai.models_listed(), 1);
    assert!(!err.contains("is unknown"), "{err}");
    let said = check_with_model(&env, "local-llama").await;
    assert!(
        said.contains("✓ context window: model local-llama: 3072 tokens as the server reports, replies up to 768"),
        "{said}"
    );
    openai.assert_clean();

    // A server without a listing leaves the 4k guess, and the log says so once, with the fix.
    let silent = FakeOpenAi::start(Expect {
        max_tokens: Some(1_000),
        response_format: Some("json_schema"),
        context_tokens: Some(4_096),
    })
    .await;
    let env = TestEnv::new(&silent.base_url, "");
    let (ok, out, err) = write_and_finish(&env, &silent, &["--model", "mystery-7b"], &[]).await;
    assert!(ok, "{out}{err}");
    assert_eq!(
        err.matches("model mystery-7b: its context window is unknown")
            .count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("assuming 4096 tokens")
            && err.contains("[llm.models.\"mystery-7b\"] context_tokens"),
        "{err}"
    );
    assert_eq!(silent.models_listed(), 1, "asked once, at start-up");
    let said = check_with_model(&env, "mystery-7b").await;
    assert!(
        said.contains("! context window: model mystery-7b: its context window is unknown"),
        "{said}"
    );
    silent.assert_clean();
}

/// `autothread check`'s output with the model named by `OPENAI_MODEL`.
async fn check_with_model(env: &TestEnv, model: &str) -> String {
    let mut command = env.command(&["check"]);
    command.env("OPENAI_MODEL", model);
    let mut run = Running::new_public(command.spawn().expect("the binary starts"));
    run.close_stdin();
    let (_, out, err) = run.finish(WAIT).await;
    format!("{out}{err}")
}
