//! End to end spend control: the real binary (console and Discord) against the fake OpenAI
//! server with priced models. Retries are charged once, a crash between reserve and settle is
//! charged at its worst case on the next start, an exhausted budget pauses and raising it
//! resumes, and two agents of one user share that user's daily budget.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::bot::{answer, card, start_agent, start_bot, Start};
use support::fake_discord::{FakeDiscord, ADMIN_PERMS, ALICE, CHANNEL, MEMBER_PERMS};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind, Reply};
use support::{created_agent_id, TestEnv};

use support::WAIT;

/// $10 per million prompt tokens, $30 per million completion tokens: the fake's default usage
/// (100 + 20 tokens) costs exactly 1000 + 600 = 1600 micro-dollars per call.
const PRICED: &str = "guild_calls_per_minute = 0\n[budget.prices.\"test-model\"]\ninput_per_million = 10.0\noutput_per_million = 30.0\n";

async fn fake() -> FakeOpenAi {
    FakeOpenAi::start(Expect::test_model()).await
}

/// The "spent" and "reserved" micro-dollars of one budget line of `autothread budget ID`.
fn budget_line(out: &str, label: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{out}"));
    let micros: Vec<u64> = line
        .split('(')
        .skip(1)
        .filter_map(|part| part.split(" µ$)").next()?.parse().ok())
        .collect();
    assert_eq!(micros.len(), 2, "{line}");
    (micros[0], micros[1])
}

async fn agent_budget(env: &TestEnv, id: &str) -> String {
    let (ok, out, err) = env.run(&["budget", id]).await;
    assert!(ok, "budget failed: {out}{err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_storm_is_charged_once_and_the_card_shows_the_cost() {
    let fake = fake().await;
    fake.push(Reply::Status(429, "text/plain", "Too Many Requests".into()));
    fake.push(Reply::Status(429, "application/json", r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#.into()));
    fake.push_content(agent_reply("finish", json!({"reason": "done"})));
    let env = TestEnv::with_budget(&fake.base_url, "", PRICED);
    let mut run = env.spawn(&[
        "console", "--task", "Say done", "--name", "PayGPT", "--role", "a payer", "--budget", "0.5",
    ]);
    run.wait_for("Input:", 1, WAIT).await;
    let shown = run.stdout();
    assert!(
        shown.contains("BUDGET: Next step ≈ $") && shown.contains("left of $0.50"),
        "{shown}"
    );
    run.type_lines(&["y"]).await;
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    assert_eq!(fake.requests(Kind::Cycle).len(), 3);
    fake.assert_clean();
    let id = created_agent_id(&out);
    let report = agent_budget(&env, &id).await;
    assert_eq!(budget_line(&report, "the agent's budget"), (1600, 0));
    assert!(report.contains("of $0.50"), "{report}");
    assert_eq!(budget_line(&report, "the owner's daily budget"), (1600, 0));
    // Cost where people look: the finish line, and the transcript's total and steps.
    assert!(out.contains("Spent $0.0016 in 1 cycle ("), "{out}");
    let dir = env.dir.path().join("export");
    let (ok, shown, err) = env
        .run(&["export", &id, "--out", dir.to_str().unwrap()])
        .await;
    assert!(ok, "{shown}{err}");
    let transcript = std::fs::read_to_string(dir.join("transcript.md")).unwrap();
    assert!(
        transcript.contains("- **Spent:** $0.0016 (the agent and its sub-agents)")
            && transcript.contains("*Cost:* $0.0016"),
        "{transcript}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_reserve_and_settle_is_charged_at_the_worst_case_on_restart() {
    let fake = fake().await;
    fake.push(Reply::Delay(
        Duration::from_secs(30),
        Box::new(Reply::Content(agent_reply(
            "finish",
            json!({"reason": "never seen"}),
        ))),
    ));
    let env = TestEnv::with_budget(&fake.base_url, "timeout_secs = 60\n", PRICED);
    let run = env.spawn(&[
        "console", "--task", "Wait", "--name", "SlowGPT", "--role", "r",
    ]);
    run.wait_for("Created agent", 1, WAIT).await;
    let id = created_agent_id(&run.stdout());
    tokio::time::timeout(WAIT, async {
        while fake.requests(Kind::Cycle).is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the call reaches the model");
    run.kill().await;

    // The reservation was durable before the call went out.
    let (spent, reserved) = budget_line(&agent_budget(&env, &id).await, "the agent's budget");
    assert_eq!(spent, 0);
    assert!(
        reserved > 1600,
        "the worst case covers the prompt and max_tokens: {reserved}"
    );

    fake.push_content(agent_reply("finish", json!({"reason": "done"})));
    let mut run = env.spawn(&["console", "--resume", &id]);
    run.wait_for("Input:", 1, WAIT).await;
    assert!(
        run.stdout()
            .contains("Settled 1 model call(s) interrupted by a crash at their worst case"),
        "{}",
        run.stdout()
    );
    run.type_lines(&["y"]).await;
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    let report = agent_budget(&env, &id).await;
    assert_eq!(
        budget_line(&report, "the agent's budget"),
        (reserved + 1600, 0)
    );
    assert_eq!(
        budget_line(&report, "the owner's daily budget"),
        (reserved + 1600, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_budget_pauses_and_a_raised_one_resumes() {
    let fake = fake().await;
    // Each step writes another file: steps that fail would bring the stuck panel.
    for i in 0..12 {
        fake.push_content(agent_reply(
            "write_file",
            json!({"filename": format!("{i}.txt"), "contents": "x"}),
        ));
    }
    fake.push_content(agent_reply("finish", json!({"reason": "read enough"})));
    // Prompts are free and replies dear: a cycle call's worst case is exactly its 500-token
    // reserve at $100 per million (0.05 dollars), more than the whole budget, so calls go out
    // with fewer reply tokens until not even 256 (0.0256) fit; each call reports 20 completion
    // tokens (0.002).
    let env = TestEnv::with_budget(
        &fake.base_url,
        "",
        "guild_calls_per_minute = 0\n[budget.prices.\"test-model\"]\ninput_per_million = 0.0\noutput_per_million = 100.0\n",
    );
    let run = env.spawn(&[
        "console",
        "--task",
        "Read files",
        "--name",
        "ReaderGPT",
        "--role",
        "r",
        "--continuous",
        "--budget",
        "0.03",
    ]);
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("paused: the agent's budget ($0.030) has")
            && out.contains("of $0.030. Raise its budget to continue: autothread console --resume")
            && out.contains(" --budget 1.03"),
        "{out}"
    );
    let id = created_agent_id(&out);
    let (spent_before, reserved) =
        budget_line(&agent_budget(&env, &id).await, "the agent's budget");
    assert!(
        spent_before <= 30_000 && reserved == 0,
        "{spent_before} {reserved}"
    );
    let cycles_before = fake.requests(Kind::Cycle).len();
    assert!(cycles_before >= 1);
    // The last calls the budget could pay for went out with fewer reply tokens, not refused:
    // a call with the whole reserve would have cost more than was left.
    let lowered: Vec<u64> = fake
        .requests(Kind::Cycle)
        .iter()
        .filter_map(|body| body["max_tokens"].as_u64())
        .filter(|&n| n < 500)
        .collect();
    assert!(
        !lowered.is_empty() && lowered.iter().all(|&n| n >= 256),
        "{lowered:?}"
    );

    let mut run = env.spawn(&["console", "--resume", &id, "--continuous", "--budget", "2"]);
    run.wait_for("Input:", 1, WAIT).await;
    run.type_lines(&["y"]).await;
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("read enough"), "{out}");
    assert_eq!(fake.remaining_cycle_steps(), 0);
    fake.assert_clean();
    let (spent, _) = budget_line(&agent_budget(&env, &id).await, "the agent's budget");
    assert!(spent > spent_before && spent <= 2_000_000, "{spent}");
}

/// No spend goes unaccounted: an unpriced model is refused at start, and an agent whose model
/// lost its price (the operator took it off the free list) pauses at its next call, naming the fix,
/// without a request reaching the endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpriced_model_is_refused_and_never_spends() {
    // An unknown model gets the 4k guess and its 1,000-token reply reserve.
    let fake = FakeOpenAi::start(Expect {
        max_tokens: Some(1_000),
        response_format: Some("json_schema"),
        context_tokens: Some(4_096),
    })
    .await;
    let env = TestEnv::new(&fake.base_url, "");
    let (ok, _, err) = env
        .run(&["console", "--task", "x", "--model", "gpt-9-preview"])
        .await;
    assert!(!ok);
    assert!(
        err.contains("no price is known for model \"gpt-9-preview\"")
            && err.contains("budget.free_models"),
        "{err}"
    );

    fake.push_content(agent_reply("read_file", json!({"filename": "a.txt"})));
    let run = env.spawn(&[
        "console",
        "--task",
        "Read",
        "--name",
        "LocalGPT",
        "--role",
        "r",
        "--model",
        "mystery-7b",
        "--limit",
        "1",
        "--continuous",
    ]);
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    let id = created_agent_id(&out);
    let calls = fake.requests(Kind::Cycle).len();
    assert_eq!(calls, 1);
    // The operator no longer lists the model as free.
    let config_path = env.dir.path().join("bot.toml");
    let config = std::fs::read_to_string(&config_path).unwrap();
    std::fs::write(&config_path, config.replace(", \"mystery-7b\"", "")).unwrap();
    let run = env.spawn(&["console", "--resume", &id, "--continuous", "--limit", "3"]);
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("paused") && out.contains("no price is known for model \"mystery-7b\""),
        "{out}"
    );
    assert_eq!(fake.requests(Kind::Cycle).len(), calls, "no call was made");
    fake.assert_clean();
}

/// Cached input is charged at the cached price: OpenAI's `prompt_tokens_details.cached_tokens`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_input_is_charged_at_the_cached_price() {
    let fake = fake().await;
    // 1,000 prompt tokens of which 800 cached, 20 completion tokens, at $10 / $1 / $30 per
    // million: 200 × 10 + 800 × 1 + 20 × 30 = 3,400 µ$ (uncached it would be 10,600).
    fake.set_usage_with_cache(1_000, 20, 800);
    fake.push_content(agent_reply("finish", json!({"reason": "done"})));
    let env = TestEnv::with_budget(
        &fake.base_url,
        "",
        "guild_calls_per_minute = 0\n[budget.prices.\"test-model\"]\ninput_per_million = 10.0\ncached_input_per_million = 1.0\noutput_per_million = 30.0\n",
    );
    let mut run = env.spawn(&[
        "console", "--task", "Say done", "--name", "CacheGPT", "--role", "r",
    ]);
    run.wait_for("Input:", 1, WAIT).await;
    run.type_lines(&["y"]).await;
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    let id = created_agent_id(&out);
    let (spent, reserved) = budget_line(&agent_budget(&env, &id).await, "the agent's budget");
    assert_eq!((spent, reserved), (3_400, 0));
    fake.assert_clean();
}

/// Input a model bills as written to its prompt cache is charged at the write price, beside
/// the cached input at the read price: `prompt_tokens_details.cache_write_tokens`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_writes_are_charged_at_the_write_price_beside_reads_at_the_read_price() {
    let fake = fake().await;
    // 1,000 prompt tokens: 600 read from the cache, 300 written to it, 100 neither; 20 out. At
    // $10 in, $1 read, $12.50 written, $30 out per million: 100 × 10 + 600 × 1 + 300 × 12.5 +
    // 20 × 30 = 5,950 µ$ (with writes at the input price it would be 5,200).
    fake.set_usage_with_cache_writes(1_000, 20, 600, 300);
    fake.push_content(agent_reply("finish", json!({"reason": "done"})));
    let env = TestEnv::with_budget(
        &fake.base_url,
        "",
        "guild_calls_per_minute = 0\n[budget.prices.\"test-model\"]\ninput_per_million = 10.0\ncached_input_per_million = 1.0\ncache_write_per_million = 12.5\noutput_per_million = 30.0\n",
    );
    let mut run = env.spawn(&[
        "console", "--task", "Say done", "--name", "CacheGPT", "--role", "r",
    ]);
    run.wait_for("Input:", 1, WAIT).await;
    run.type_lines(&["y"]).await;
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    let id = created_agent_id(&out);
    let (spent, reserved) = budget_line(&agent_budget(&env, &id).await, "the agent's budget");
    assert_eq!((spent, reserved), (5_950, 0));
    fake.assert_clean();
}

/// Alice starts an agent on a reading task.
async fn start_reader(discord: &FakeDiscord, name: &str, budget: Option<f64>) -> u64 {
    let start = Start {
        task: "Read things",
        name: Some(name),
        budget,
        ..Start::default()
    };
    start_agent(discord, start).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_of_one_user_share_the_daily_budget_until_an_admin_raises_it() {
    let openai = fake().await;
    for i in 0..4 {
        openai.push_content(agent_reply(
            "read_file",
            json!({"filename": format!("{i}.txt")}),
        ));
    }
    // Every call reports 400 completion tokens; with free prompts at $100 per million
    // completion tokens a cycle call reserves 0.05 dollars and costs 0.04.
    openai.set_usage(100, 400);
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_budget(
        &openai.base_url,
        "",
        "guild_calls_per_minute = 0\nuser_daily_usd = 0.10\n[budget.prices.\"test-model\"]\ninput_per_million = 0.0\noutput_per_million = 100.0\n",
    );
    let _bot = start_bot(&env, &discord).await;

    // More than the configured maximum ($20) is refused to a member.
    let too_much = discord.slash(
        ALICE,
        &[],
        CHANNEL,
        "start",
        json!([{"name": "task", "type": 3, "value": "Spend"}, {"name": "budget", "type": 10, "value": 25.0}]),
        json!({}),
    );
    assert!(answer(&discord, too_much, true)
        .await
        .starts_with("An agent's budget can be at most $20.00 here"));
    assert!(discord.threads().is_empty());

    let first = start_reader(&discord, "FirstGPT", None).await;
    let card_a = card(&discord, first, "FirstGPT · cycle 1").await;
    let footer = card_a["embeds"][0]["footer"]["text"].as_str().unwrap_or("");
    assert!(
        footer.starts_with("Next step ≈ $") && footer.contains("left in the owner's daily budget"),
        "{footer}"
    );
    // 0.04 spent today: the second agent's first call (worst case 0.05) still fits.
    let second = start_reader(&discord, "SecondGPT", Some(0.5)).await;
    card(&discord, second, "SecondGPT · cycle 1").await;
    let status = discord.slash(ALICE, &[], second, "status", json!([]), json!({}));
    let text = answer(&discord, status, true).await;
    assert!(text.contains("\nSpend: $0.040 of $0.50 ("), "{text}");

    // 0.08 spent: the first agent's next cycle call cannot be covered by what is left today.
    discord.click(
        ALICE,
        &[],
        &card_a,
        &support::bot::button(&card_a, "Approve"),
    );
    let parked = card(
        &discord,
        first,
        "⏸️ FirstGPT paused: the owner's daily budget ran out",
    )
    .await;
    // Only server admins raise the owner's daily budget, even from the owner's own card.
    let plus_one = support::bot::button(&parked, "+$1");
    let refused = discord.click(ALICE, &[], &parked, &plus_one);
    assert!(answer(&discord, refused, true)
        .await
        .starts_with("Only server admins"));

    // The read's one-line outcome needs no summary call, and the cycle call (not even 256 reply
    // tokens, 0.0256, fit in the 0.02 left) was not made: ask until the books are closed.
    let mut text = String::new();
    for _ in 0..50 {
        let shown = discord.slash_group(
            ALICE,
            &[],
            MEMBER_PERMS,
            first,
            "budget",
            "show",
            json!([]),
            json!({}),
        );
        text = answer(&discord, shown, true).await;
        if !text.contains("reserved") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        text.contains("**FirstGPT**: $0.040 of $1.00")
            && text.contains("**The owner's daily budget**: $0.080 of $0.10")
            && text.contains("**The server's daily budget**: $0.080 of $20.00"),
        "{text}"
    );

    // The owner cannot raise the server's budgets; an admin can, and the paused agent continues.
    let refused = discord.slash_group(
        ALICE,
        &[],
        MEMBER_PERMS,
        first,
        "budget",
        "set",
        json!([{"name": "scope", "type": 4, "value": 1}, {"name": "usd", "type": 10, "value": 1.0}]),
        json!({}),
    );
    assert!(answer(&discord, refused, true)
        .await
        .starts_with("Only server admins"));
    let raised = discord.slash_group(
        support::fake_discord::BOB,
        &[],
        ADMIN_PERMS,
        first,
        "budget",
        "set",
        json!([{"name": "scope", "type": 4, "value": 1}, {"name": "usd", "type": 10, "value": 1.0}]),
        json!({}),
    );
    let text = answer(&discord, raised, true).await;
    assert_eq!(
        text,
        "Each user's daily budget is now $1.00. 1 agent paused for budget is trying again."
    );
    let card_a2 = card(&discord, first, "FirstGPT · cycle 2").await;
    let footer = card_a2["embeds"][0]["footer"]["text"]
        .as_str()
        .unwrap_or("");
    assert!(
        footer.ends_with("$0.88 left in the owner's daily budget"),
        "{footer}"
    );
    discord.assert_clean();
    openai.assert_clean();
}

/// What autocomplete offered for `/agent start model:` after the member typed `typed`.
async fn offered_models(discord: &FakeDiscord, sub: &str, typed: &str) -> Vec<String> {
    let typing = discord.autocomplete(
        ALICE,
        CHANNEL,
        sub,
        json!([{"name": "task", "type": 3, "value": "t"}, {"name": "model", "type": 3, "value": typed, "focused": true}]),
    );
    discord
        .wait_for("the autocomplete result", WAIT, |d| {
            d.callbacks(typing).into_iter().find(|c| c.kind == 8)
        })
        .await
        .data["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["value"].as_str().unwrap().to_string())
        .collect()
}

/// Members choose among the models their server offers (autocomplete shows them); a model not
/// offered, or without a price, cannot be started or added; only admins change the list, which
/// survives a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_choose_among_the_models_their_server_offers() {
    let fake = FakeOpenAi::start(Expect {
        response_format: Some("json_schema"),
        ..Expect::default()
    })
    .await;
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_budget(
        &fake.base_url,
        "",
        "guild_calls_per_minute = 0\n\n[discord]\nmodels = [\"gpt-4o-mini\"]\n",
    );
    let bot = start_bot(&env, &discord).await;
    assert_eq!(
        offered_models(&discord, "start", "").await,
        ["test-model", "gpt-4o-mini"]
    );
    assert_eq!(
        offered_models(&discord, "start", "GPT").await,
        ["gpt-4o-mini"]
    );

    // A paid model the server does not offer (a dated snapshot of a priced one) is refused.
    let (options, resolved) = Start {
        task: "t",
        model: Some("gpt-4o-2024-08-06"),
        ..Start::default()
    }
    .options();
    let refused = discord.slash(ALICE, &[], CHANNEL, "start", options, resolved);
    let said = answer(&discord, refused, true).await;
    assert!(
        said.contains("`gpt-4o-2024-08-06` is not one of the models this server offers: `test-model`, `gpt-4o-mini`"),
        "{said}"
    );
    assert!(discord.threads().is_empty());

    // Members cannot change the list; admins can, with priced models only.
    let allow = |user: u64, perms: &str, model: &str| {
        discord.slash_group(
            user,
            &[],
            perms,
            CHANNEL,
            "models",
            "allow",
            json!([{"name": "model", "type": 3, "value": model}]),
            json!({}),
        )
    };
    let by_member = allow(ALICE, MEMBER_PERMS, "gpt-4.1-nano");
    assert!(answer(&discord, by_member, true)
        .await
        .starts_with("Only server admins"));
    let unpriced = allow(support::fake_discord::BOB, ADMIN_PERMS, "mystery-70b");
    let said = answer(&discord, unpriced, true).await;
    assert!(
        said.contains("cannot be offered: no price is known for model \"mystery-70b\""),
        "{said}"
    );
    let added = allow(support::fake_discord::BOB, ADMIN_PERMS, "gpt-4.1-nano");
    let said = answer(&discord, added, true).await;
    assert_eq!(
        said,
        "Models offered here: `test-model`, `gpt-4o-mini`, `gpt-4.1-nano` (the first is the default)."
    );

    // The admins' list outlives the process, and an offered model starts an agent that uses it.
    bot.terminate();
    let (ok, out, err) = bot.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    let _bot = start_bot(&env, &discord).await;
    discord
        .wait_for("a second IDENTIFY", WAIT, |d| {
            (d.identifies() >= 2).then_some(())
        })
        .await;
    assert_eq!(
        offered_models(&discord, "start", "nano").await,
        ["gpt-4.1-nano"]
    );
    fake.push_content(agent_reply("finish", json!({"reason": "done"})));
    let thread = start_agent(
        &discord,
        Start {
            task: "Say done",
            name: Some("NanoGPT"),
            model: Some("gpt-4.1-nano"),
            ..Start::default()
        },
    )
    .await;
    card(&discord, thread, "NanoGPT · cycle 1").await;
    assert_eq!(fake.requests(Kind::Cycle)[0]["model"], "gpt-4.1-nano");
    discord.assert_clean();
}

/// The PNG attached to the bot's private answer to `interaction`: its bytes once Discord has
/// them, checked to be an image Discord can show.
async fn attached_png(discord: &FakeDiscord, interaction: u64) -> (String, Vec<u8>) {
    let answered = discord
        .wait_for("an answer with a file", WAIT, |d| {
            d.followups_for(interaction).first().cloned()
        })
        .await;
    assert_eq!(answered["flags"], 64, "the answer must be private");
    let file = &answered["attachments"][0];
    assert_eq!(file["content_type"], "image/png", "{answered}");
    assert_eq!(
        (file["width"].as_u64(), file["height"].as_u64()),
        (Some(900), Some(500))
    );
    let text = answered["content"].as_str().unwrap_or_default().to_string();
    (text, discord.attachment_bytes(file))
}

/// Decodes a PNG and returns the share of its pixels that are not white, in percent.
fn inked_percent(png_bytes: &[u8]) -> f64 {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((frame.width, frame.height), (900, 500));
    let pixels = &pixels[..frame.buffer_size()];
    let step = frame.color_type.samples();
    let inked = pixels
        .chunks_exact(step)
        .filter(|p| p[..3].iter().any(|&c| c != 255))
        .count();
    inked as f64 * 100.0 / (pixels.len() / step) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_charts_the_burn_down_and_admins_chart_the_servers_spend_per_day() {
    let openai = fake().await;
    for i in 0..2 {
        openai.push_content(agent_reply(
            "read_file",
            json!({"filename": format!("{i}.txt")}),
        ));
    }
    // 400 completion tokens at $100 per million: each cycle's call costs $0.04.
    openai.set_usage(100, 400);
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_budget(
        &openai.base_url,
        "",
        "guild_calls_per_minute = 0\n[budget.prices.\"test-model\"]\ninput_per_million = 0.0\noutput_per_million = 100.0\n",
    );
    let _bot = start_bot(&env, &discord).await;
    let thread = start_reader(&discord, "ChartGPT", Some(0.5)).await;
    let first = card(&discord, thread, "ChartGPT · cycle 1").await;
    discord.click(ALICE, &[], &first, &support::bot::button(&first, "Approve"));
    card(&discord, thread, "ChartGPT · cycle 2").await;

    // The burn-down comes with the status, privately.
    let status = discord.slash(ALICE, &[], thread, "status", json!([]), json!({}));
    let (text, png) = attached_png(&discord, status).await;
    assert!(text.contains("\nSpend: $0.080 of $0.50 ("), "{text}");
    let inked = inked_percent(&png);
    assert!(
        inked > 3.0,
        "the burn-down is nearly blank: {inked:.1}% inked"
    );

    // The server's spend per day is for its admins.
    let chart = |user, permissions| {
        discord.slash_group(
            user,
            &[],
            permissions,
            CHANNEL,
            "budget",
            "chart",
            json!([{"name": "days", "type": 4, "value": 7}]),
            json!({}),
        )
    };
    let refused = chart(ALICE, MEMBER_PERMS);
    assert!(answer(&discord, refused, true)
        .await
        .starts_with("Only server admins"));
    let shown = chart(support::fake_discord::BOB, ADMIN_PERMS);
    let (text, png) = attached_png(&discord, shown).await;
    assert_eq!(
        text,
        "The server spent $0.080 in the last 7 days (UTC).\nBy person: alice $0.080\nBy agent: ChartGPT $0.080"
    );
    let inked = inked_percent(&png);
    assert!(
        inked > 3.0,
        "the daily chart is nearly blank: {inked:.1}% inked"
    );
    discord.assert_clean();
    openai.assert_clean();
}

/// A model slower than the timeout (`llm.timeout_secs = 1` against a 2.5 s answer) still
/// generates, and a provider bills it: each attempt is charged its reservation, a retry goes out
/// only under a reservation of its own, and the agent stops at its cap instead of retrying for
/// free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_slower_than_the_timeout_is_charged_each_attempt_and_stops_at_the_cap() {
    let fake = fake().await;
    for _ in 0..6 {
        fake.push(Reply::Delay(
            Duration::from_millis(2500),
            Box::new(Reply::Content(agent_reply(
                "finish",
                json!({"reason": "too late"}),
            ))),
        ));
    }
    // Free prompts and $100 per million reply tokens: a call's worst case is its 500-token
    // reserve, 50,000 µ$. Of the $0.08 budget the first attempt reserves that much, the second
    // the 30,000 left (a 300-token reply), and a third cannot be paid for.
    let env = TestEnv::with_budget(
        &fake.base_url,
        "timeout_secs = 1\n",
        "guild_calls_per_minute = 0\n[budget.prices.\"test-model\"]\ninput_per_million = 0.0\noutput_per_million = 100.0\n",
    );
    let run = env.spawn(&[
        "console", "--task", "Wait", "--name", "SlowGPT", "--role", "r", "--budget", "0.08",
    ]);
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("paused: the agent's budget ($0.080)"), "{out}");
    let id = created_agent_id(&out);
    // Every request the model generated for is one the budget paid for, and no more were sent.
    assert_eq!(fake.requests(Kind::Cycle).len(), 2);
    assert_eq!(fake.billed_generations(), 2);
    let report = agent_budget(&env, &id).await;
    let (spent, reserved) = budget_line(&report, "the agent's budget");
    assert_eq!((spent, reserved), (80_000, 0), "{report}");
    let bill = fake.bill(autothread::core::budget::Price::from_usd_per_million(
        0.0, 100.0,
    ));
    assert!(
        bill > autothread::core::budget::Micros::ZERO && bill.0 <= spent,
        "billed {bill:?}, charged {spent}"
    );
    assert_eq!(
        budget_line(&report, "the owner's daily budget"),
        (80_000, 0)
    );
    fake.assert_clean();
}

/// Cheap prices for a long run: a cycle's call and an embedding cost some micro-dollars each,
/// so every reservation left open would show.
const CHEAP: &str = "guild_calls_per_minute = 0\n[budget.prices.\"test-model\"]\ninput_per_million = 0.01\noutput_per_million = 0.01\n[budget.prices.\"fake-passage\"]\ninput_per_million = 0.02\noutput_per_million = 0.0\n[budget.prices.\"fake-query\"]\ninput_per_million = 0.02\noutput_per_million = 0.0\n";

/// However often a console run is killed (kill -9) at any point of its cycles, an agent that then
/// finishes cleanly holds no reservation: what a crash left open is settled at the next start,
/// and what the last run reserved is settled before it ends. The agent's profile is asked of the
/// model, and embeddings answer slowly, so that kills also land during the profile call and
/// while memories wait for their embeddings with their reservations made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_agent_holds_no_reservation_whatever_crashes_came_before() {
    use rand::{Rng, SeedableRng};
    let fake = fake().await;
    fake.set_endless(Reply::Content(agent_reply(
        "write_file",
        json!({"filename": "note{n}.txt", "contents": "The ferry leaves at nine."}),
    )));
    fake.set_embeddings_delay(Duration::from_millis(150));
    // One profile for each run that may still be creating the agent when it is killed.
    for _ in 0..13 {
        fake.push_profile(
            json!({"name": "NoteGPT", "description": "a note taker.",
                   "directives": {"best_practices": ["Be brief."], "constraints": ["Notes only."]}})
            .to_string(),
        );
    }
    let env = TestEnv::with_memory(&fake.base_url, CHEAP);
    let mut run = env.spawn(&["console", "--task", "Note the ferry times", "--continuous"]);
    run.wait_for("Created agent", 1, WAIT).await;
    let id = created_agent_id(&run.stdout());
    let mut rng = rand::rngs::StdRng::seed_from_u64(58);
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(30..700))).await;
        run.kill().await;
        run = env.spawn(&["console", "--resume", &id, "--continuous"]);
        run.wait_for("Resuming agent", 1, WAIT).await;
    }
    tokio::time::sleep(Duration::from_millis(rng.random_range(30..700))).await;
    fake.push_content(agent_reply("finish", json!({"reason": "noted"})));
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok && out.contains("noted"), "{out}{err}");
    let report = agent_budget(&env, &id).await;
    let (spent, reserved) = budget_line(&report, "the agent's budget");
    assert!(spent > 0, "{report}");
    assert_eq!(reserved, 0, "{report}");
    assert_eq!(
        budget_line(&report, "the owner's daily budget").1,
        0,
        "{report}"
    );
}

/// A reply whose stream breaks off after its first tokens was generated that far, and a provider
/// bills it that far: it is charged the tokens it streamed, neither nothing nor its whole
/// reservation, and is not asked again (half a reply has been shown). The agent pauses on the
/// failure holding no reservation, and the ledger agrees with the fake's bill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_broken_mid_reply_is_charged_what_it_streamed() {
    use autothread::core::budget::{Micros, Price};
    use autothread::core::message::TokenCounter;
    let fake = fake().await;
    let text = agent_reply("write_file", json!({"filename": "a.txt", "contents": "x"}));
    let pieces = 12;
    fake.push(Reply::BrokenStream {
        text: text.clone(),
        pieces,
    });
    // Free prompts and $100 per million reply tokens (100 µ$ a token): a call's worst case is its
    // 500-token reserve, 50,000 µ$, and each token streamed costs 100 µ$.
    let env = TestEnv::with_budget(
        &fake.base_url,
        "stream = \"always\"\n",
        "guild_calls_per_minute = 0\n[budget.prices.\"test-model\"]\ninput_per_million = 0.0\noutput_per_million = 100.0\n",
    );
    let run = env.spawn(&[
        "console", "--task", "Write", "--name", "CutGPT", "--role", "r", "--budget", "1",
    ]);
    let (ok, out, err) = run.finish(WAIT).await;
    // A model error pauses the agent, which the console's exit status says.
    assert!(!ok, "{out}{err}");
    assert!(out.contains("broke off"), "{out}{err}");
    let id = created_agent_id(&out);
    assert_eq!(fake.requests(Kind::Cycle).len(), 1, "not asked again");
    assert_eq!(fake.billed_generations(), 1);

    let price = Price::from_usd_per_million(0.0, 100.0);
    let streamed = support::fake_openai::streamed_prefix(&text, pieces);
    // What the bot counts of the text it was shown, with the tokenizer it uses for the model.
    let counted =
        autothread::llm::tokens::TiktokenCounter::for_model("test-model").count(&streamed);
    let charged = price.cost(0, counted as u64);
    let reservation = price.cost(0, 500);
    let report = agent_budget(&env, &id).await;
    assert_eq!(
        budget_line(&report, "the agent's budget"),
        (charged.0, 0),
        "{report}"
    );
    assert_eq!(
        budget_line(&report, "the owner's daily budget"),
        (charged.0, 0),
        "{report}"
    );
    assert!(
        charged > Micros::ZERO && charged.0 * 4 < reservation.0,
        "{charged:?} of {reservation:?}"
    );
    let bill = fake.bill(price);
    assert!(
        bill > Micros::ZERO && charged.0.abs_diff(bill.0) <= reservation.0,
        "billed {bill:?}, charged {charged:?}"
    );
    // The ledger never charges less than the fake billed: the bot's count of an unknown
    // model's text errs high.
    assert!(charged >= bill, "billed {bill:?}, charged {charged:?}");
    fake.assert_clean();
}
