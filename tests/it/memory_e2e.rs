//! Long-term memory end to end: the real binary writes cycle memories through the fake
//! OpenAI-compatible embeddings endpoint, `autothread memory search|forget|pin` and
//! `/memory search` with its Forget and Pin buttons work on them, only for those who may decide.

use crate::support;

use serde_json::{json, Value};
use support::bot::{answer, card, start_agent, start_bot, Start, WAIT};
use support::fake_discord::{FakeDiscord, ALICE, BOB, MEMBER_PERMS};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Kind};
use support::{created_agent_id, TestEnv};

const FACT: &str = "The ferry to Skye leaves at 7:40 from pier 3.";

/// The console run every test here makes: a named agent in continuous mode.
const CONSOLE_RUN: &[&str] = &[
    "console",
    "--task",
    "Note the ferry time",
    "--name",
    "FerryGPT",
    "--role",
    "r",
    "--continuous",
];

/// A first cycle that writes the fact, a second that reads something else, then finish.
fn script(openai: &FakeOpenAi) {
    openai.push_content(agent_reply(
        "write_file",
        json!({"filename": "ferry.txt", "contents": FACT}),
    ));
    openai.push_content(agent_reply("read_file", json!({"filename": "ferry.txt"})));
    openai.push_content(agent_reply("finish", json!({"reason": "noted"})));
}

/// Runs `CONSOLE_RUN` to its end, approving the first command; returns the agent's id.
async fn console_run(env: &TestEnv) -> String {
    let mut run = env.spawn(CONSOLE_RUN);
    run.wait_for("Input:", 1, WAIT).await;
    run.type_lines(&["y"]).await;
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok, "{out}{err}");
    created_agent_id(&out)
}

/// The `#id` of the first search result line that contains `needle`.
fn result_id(out: &str, needle: &str) -> u64 {
    let mut current = None;
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix('#') {
            current = rest
                .split_whitespace()
                .next()
                .and_then(|id| id.parse().ok());
        }
        if line.contains(needle) {
            if let Some(id) = current {
                return id;
            }
        }
    }
    panic!("no result containing {needle:?} in:\n{out}");
}

/// `memory.dimensions` asks the endpoint for shorter vectors, for storing and for searching alike,
/// and what is stored with them is found again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shorter_vectors_are_asked_for_stored_and_searched() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    script(&openai);
    let env = TestEnv::with_memory(&openai.base_url, "guild_calls_per_minute = 0\n");
    let config_path = env.dir.path().join("bot.toml");
    let config = std::fs::read_to_string(&config_path).unwrap().replace(
        "query_model = \"fake-query\"\n",
        "query_model = \"fake-query\"\ndimensions = 64\n",
    );
    std::fs::write(&config_path, config).unwrap();
    let id = console_run(&env).await;
    let (ok, out, err) = env
        .run(&["memory", "search", &id, "when does the ferry to Skye leave"])
        .await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("Skye"), "{out}");
    let asked = openai.embedding_dimensions();
    assert!(asked.len() >= 2, "{asked:?}");
    assert!(asked.iter().all(|d| *d == Some(64)), "{asked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_memories_are_written_searched_forgotten_and_pinned() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    script(&openai);
    let env = TestEnv::with_memory(&openai.base_url, "guild_calls_per_minute = 0\n");
    let id = console_run(&env).await;
    // Passages were embedded with the passage model. (Whether a cycle's recall already used the
    // query model depends on whether the previous cycle's memory was written by then.)
    assert!(openai
        .embedded()
        .iter()
        .any(|(model, _)| model == "fake-passage"));

    let (ok, out, err) = env
        .run(&["memory", "search", &id, "when does the ferry to Skye leave"])
        .await;
    assert!(ok, "{out}{err}");
    let first = out.lines().next().unwrap_or("");
    // The read that found the fact is its most relevant memory (a step with a one-line outcome is
    // remembered as its action and result).
    assert!(first.contains("cycle 2  cycle"), "{out}");
    // Searches embed with the query model.
    assert!(openai
        .embedded()
        .iter()
        .any(|(model, _)| model == "fake-query"));
    let fact_id = result_id(&out, "leaves at 7:40");
    let other_id = result_id(&out, "Cycle 3:");

    let (ok, out, _) = env
        .run(&["memory", "pin", &id, &other_id.to_string()])
        .await;
    assert!(
        ok && out.contains(&format!("Pinned memory #{other_id}")),
        "{out}"
    );
    let (ok, out, _) = env
        .run(&["memory", "forget", &id, &fact_id.to_string()])
        .await;
    assert!(
        ok && out.contains(&format!("Forgot memory #{fact_id}")),
        "{out}"
    );
    let (ok, out, _) = env.run(&["memory", "search", &id, "ferry Skye 7:40"]).await;
    assert!(ok, "{out}");
    assert!(!out.contains(&format!("#{fact_id} ")), "forgotten: {out}");
    assert!(out.contains("[pinned]"), "{out}");
    // Forgetting twice, or a memory that does not exist, is a clear error.
    let (ok, _, err) = env
        .run(&["memory", "forget", &id, &fact_id.to_string()])
        .await;
    assert!(
        !ok && err.contains(&format!("no memory {fact_id} for this agent")),
        "{err}"
    );
    // The pin and the forget are in the agent's audit trail, newest first; the failed forget is not.
    let (ok, out, err) = env.run(&["audit", &id]).await;
    assert!(ok, "{out}{err}");
    let forgot = out
        .find(&format!(
            "operator (command line) · forgot memory #{fact_id} (text digest "
        ))
        .expect(&out);
    let pinned = out
        .find(&format!(
            "operator (command line) · pinned memory #{other_id}"
        ))
        .expect(&out);
    assert!(forgot < pinned, "{out}");
    assert_eq!(out.matches("forgot memory").count(), 1, "{out}");
    assert!(
        !out.contains("leaves at 7:40"),
        "a forgotten text is not kept: {out}"
    );
    openai.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_memory_search_with_forget_and_pin_for_deciders_only() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    script(&openai);
    let discord = FakeDiscord::start().await;
    let env = TestEnv::with_memory(&openai.base_url, "guild_calls_per_minute = 0\n");
    let _bot = start_bot(&env, &discord).await;
    let start = Start {
        task: "Note the ferry time",
        name: Some("FerryGPT"),
        continuous: Some(5),
        ..Start::default()
    };
    let thread = start_agent(&discord, start).await;
    // Cycles 1 and 2 run by themselves; finish asks.
    card(&discord, thread, "FerryGPT · cycle 3").await;
    // Cycle 1's memory is written when its summary lands, at the start of cycle 2.
    let search = |user: u64| {
        discord.slash_command(
            "memory",
            user,
            &[],
            MEMBER_PERMS,
            thread,
            "search",
            json!([{"name": "query", "type": 3, "value": "when does the ferry to Skye leave"}]),
            json!({}),
        )
    };
    let refused = search(BOB);
    assert!(answer(&discord, refused, true)
        .await
        .starts_with("Only the agent's owner"));
    let found = search(ALICE);
    let text = answer(&discord, found, true).await;
    assert!(
        text.contains("cycle 1 · cycle") && text.contains("leaves at 7:40"),
        "{text}"
    );
    let followup: Value = discord.followups_for(found)[0].clone();
    let buttons: Vec<(String, String)> = followup["components"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|row| row["components"].as_array().cloned().unwrap_or_default())
        .map(|b| {
            (
                b["label"].as_str().unwrap_or("").to_string(),
                b["custom_id"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let (label, forget) = buttons
        .iter()
        .find(|(label, _)| label.starts_with("Forget"))
        .cloned()
        .expect("a Forget button");
    let memory_id = label.trim_start_matches("Forget #").to_string();
    // Someone who may not decide cannot forget it; the owner can.
    let message = followup;
    let bob_click = discord.click(BOB, &[], &message, &forget);
    assert!(answer(&discord, bob_click, true)
        .await
        .starts_with("Only the agent's owner"));
    let alice_click = discord.click(ALICE, &[], &message, &forget);
    assert_eq!(
        answer(&discord, alice_click, true).await,
        format!("Forgot memory #{memory_id}.")
    );
    let again = search(ALICE);
    let text = answer(&discord, again, true).await;
    assert!(!text.contains(&format!("**#{memory_id}**")), "{text}");
    discord.assert_clean();
}

/// Runs a console agent in continuous mode for `pairs` write-and-read pairs and a finish, and
/// returns its stderr.
async fn run_cycles(env: &TestEnv, openai: &FakeOpenAi, pairs: usize) -> String {
    run_cycles_logging(env, openai, pairs, "warn").await
}

/// `run_cycles` with the binary's log filter given.
async fn run_cycles_logging(
    env: &TestEnv,
    openai: &FakeOpenAi,
    pairs: usize,
    log_filter: &str,
) -> String {
    for cycle in 1..=pairs {
        openai.push_content(agent_reply(
            "write_file",
            json!({"filename": format!("note{cycle}.txt"), "contents": FACT}),
        ));
        openai.push_content(agent_reply(
            "read_file",
            json!({"filename": format!("note{cycle}.txt")}),
        ));
    }
    openai.push_content(agent_reply("finish", json!({"reason": "noted"})));
    let mut run = support::Running::new_public(
        env.command(CONSOLE_RUN)
            .env("RUST_LOG", log_filter)
            .spawn()
            .expect("the autothread binary starts"),
    );
    run.wait_for("Input:", 1, WAIT).await;
    run.type_lines(&["y"]).await;
    let (ok, out, err) = run.finish(WAIT).await;
    assert!(ok && out.contains("noted"), "{out}{err}");
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_without_embeddings_turns_memory_off_once_without_retries() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.set_embeddings_failing(Some(501));
    let env = TestEnv::with_memory(&openai.base_url, "guild_calls_per_minute = 0\n");
    let err = run_cycles(&env, &openai, 2).await;
    // The first request's 501 is final: no retry, and no request in the next four cycles (the
    // probe interval is ten minutes).
    assert_eq!(openai.embedded().len(), 1, "{:?}", openai.embedded());
    assert_eq!(err.matches("memory is off").count(), 1, "{err}");
    assert!(
        err.contains("HTTP 501") && err.contains("does not support embeddings"),
        "the warning gives the server's reason: {err}"
    );
    assert!(!err.contains("memory queued"), "one warning only: {err}");
    openai.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_embeddings_endpoint_is_left_alone_after_three_failures() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.set_embeddings_failing(Some(503));
    let env = TestEnv::with_memory(&openai.base_url, "guild_calls_per_minute = 0\n");
    let err = run_cycles(&env, &openai, 4).await;
    // A 503 may have been billed, so each call is tried once (and charged), and three failed
    // calls in a row open the breaker for 30 s (longer than the rest of the run). A cycle's
    // memory is written while the next cycle flushes the queue and recalls, so up to two more
    // calls can be on their way when it opens: at most 5 calls whatever the run's length, where
    // without the breaker the nine cycles' writes, queue flushes and recalls would make about 24.
    let requests = openai.embedded().len();
    assert!((3..=5).contains(&requests), "{:?}", openai.embedded());
    assert_eq!(err.matches("memory is off").count(), 1, "{err}");
    openai.assert_clean();
}

/// A cycle with memory on makes three paid calls (the model, the memory's embedding and the
/// recall query's) and runs a command, yet flushes the store once: the embeddings' reservations
/// and the next model call's ride on the step's own flush, and an auto-approved command that
/// lands with its result is stored with it. Every call is still reserved and settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_with_memory_flushes_the_store_once_and_settles_every_call() {
    let (openai, cycles) = cycles_with_memory_flush_once_and_settle(false).await;
    // Every cycle after the first recalls, and every cycle that ran a command remembers it,
    // except that a step whose memory waits for its model summary is remembered only when the
    // summary arrives: on a loaded machine the newest two may still wait when the run stops at
    // its limit (a resumed agent asks for them again).
    assert!(
        openai.embedded().len() >= 2 * (cycles - 1) - 2,
        "memory was on: {} embedding requests",
        openai.embedded().len()
    );
}

/// With one model for memories and queries, a cycle's memory and its next recall query go to
/// the endpoint in one request (of two inputs, the memory first) through the real client, the
/// cycle still flushes once, and nothing is left reserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_embeddings_model_a_cycle_asks_for_its_memory_and_recall_at_once() {
    let (openai, cycles) = cycles_with_memory_flush_once_and_settle(true).await;
    let requests = openai.embedded();
    let joined: Vec<&Vec<String>> = requests
        .iter()
        .filter(|(model, inputs)| model == "fake-passage" && inputs.len() == 2)
        .map(|(_, inputs)| inputs)
        .collect();
    // Alone go the first memory (nothing stored yet for the next recall to search), the last
    // (`finish` has no recall after it), and any that waits for its model summary; a busy
    // machine may also find the first one still on its way at the next step (11 requests here,
    // 8 or 9 joined).
    assert!(
        requests.len() <= cycles + 2 && joined.len() >= cycles - 4,
        "{} requests for {cycles} cycles, {} joined: {requests:?}",
        requests.len(),
        joined.len()
    );
    for inputs in joined {
        assert!(
            inputs[0].starts_with("Cycle ") && inputs[1].contains("Note the ferry time"),
            "a memory, then a recall query: {inputs:?}"
        );
    }
}

/// Runs 11 cycles with memory on (`one_model`: the passage model embeds queries too) and checks
/// that each cycle flushed the store once and every call was settled; gives the fake and the
/// number of cycles.
async fn cycles_with_memory_flush_once_and_settle(one_model: bool) -> (FakeOpenAi, usize) {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    let pairs = 5;
    let env = TestEnv::with_memory(&openai.base_url, "guild_calls_per_minute = 0\n");
    if one_model {
        let path = env.dir.path().join("bot.toml");
        let config = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, config.replace("query_model = \"fake-query\"\n", "")).unwrap();
    }
    let err = run_cycles_logging(&env, &openai, pairs, "warn,autothread::cli=info").await;
    let cycles = 2 * pairs + 1;
    let flushes = durable_flushes(&err);
    // One per cycle (`write_file` and `read_file` land with their results, so the console does
    // not store their proposals first), and a few outside them: the agent's creation, its first
    // step, the first cycle's call (no prompt before it to reserve by), `finish`'s proposal and
    // its decision, the exit (16 for 11 cycles here; one more is allowed for a busy machine).
    assert!(
        flushes <= cycles + 6,
        "{flushes} durable flushes for {cycles} cycles:\n{err}"
    );
    let (ok, budget, _) = env.run(&["budget"]).await;
    assert!(ok, "{budget}");
    let accounts: Vec<&str> = budget.lines().filter(|l| l.contains("reserved")).collect();
    assert!(!accounts.is_empty(), "{budget}");
    for account in accounts {
        assert!(
            account.contains("reserved (0 µ$)") && !account.contains(" 0 spent"),
            "every call settled, nothing left reserved:\n{budget}"
        );
    }
    openai.assert_clean();
    (openai, cycles)
}

/// A cycle's model call is reserved with its recall, in the step's own flush, going by the last
/// prompt's size with room to grow; the call then settles that reservation at what it cost, not
/// at the (larger) amount set aside, and nothing stays reserved when the run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_reserved_with_its_recall_is_charged_what_it_cost() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.set_usage(PRICED_PROMPT_TOKENS, PRICED_REPLY_TOKENS);
    let env = TestEnv::with_memory(&openai.base_url, PRICED);
    let err = run_cycles_logging(&env, &openai, 3, "warn,autothread::cli=info").await;
    let calls = openai.requests(Kind::Cycle).len() + openai.requests(Kind::Summary).len();
    assert!(calls >= 7, "{calls} model calls");
    assert_each_call_charged_what_it_cost(&env, calls, &err).await;
    openai.assert_clean();
}

/// Without memory the cycle's model call is started by the step that stores the last result,
/// and is reserved before that step's flush, so a cycle still flushes once (it flushed twice:
/// the call's reservation had a flush of its own). The call settles that reservation at what it
/// cost, and nothing stays reserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_without_memory_flushes_once_and_its_call_is_charged_what_it_cost() {
    let openai = FakeOpenAi::start(Expect::test_model()).await;
    openai.set_usage(PRICED_PROMPT_TOKENS, PRICED_REPLY_TOKENS);
    let env = TestEnv::with_budget(&openai.base_url, "", PRICED);
    let pairs = 5;
    let err = run_cycles_logging(&env, &openai, pairs, "warn,autothread::cli=info").await;
    assert!(openai.embedded().is_empty(), "memory was off");
    let cycles = 2 * pairs + 1;
    let flushes = durable_flushes(&err);
    // As with memory: one a cycle and a few around them (see the test above).
    assert!(
        flushes <= cycles + 6,
        "{flushes} durable flushes for {cycles} cycles:\n{err}"
    );
    let calls = openai.requests(Kind::Cycle).len() + openai.requests(Kind::Summary).len();
    assert_each_call_charged_what_it_cost(&env, calls, &err).await;
    openai.assert_clean();
}

/// $10 and $30 a million tokens: a call of 1,000 prompt and 100 reply tokens costs 13,000 µ$.
const PRICED: &str = "guild_calls_per_minute = 0\n[budget.prices.\"test-model\"]\ninput_per_million = 10.0\noutput_per_million = 30.0\n";
const PRICED_PROMPT_TOKENS: u64 = 1000;
const PRICED_REPLY_TOKENS: u64 = 100;
const PRICED_CALL_MICROS: usize = 13_000;

/// The durable flushes the console's disk report at exit counts.
fn durable_flushes(log: &str) -> usize {
    support::durable_flushes(log).unwrap_or_else(|| panic!("no disk report in the log:\n{log}"))
        as usize
}

/// The owner spent exactly `calls` priced calls at what each cost, with nothing left reserved.
async fn assert_each_call_charged_what_it_cost(env: &TestEnv, calls: usize, log: &str) {
    let (ok, budget, _) = env.run(&["budget"]).await;
    assert!(ok, "{budget}");
    let owner = budget
        .lines()
        .find(|l| l.contains("the owner's daily budget"))
        .unwrap_or_else(|| panic!("no owner's account:\n{budget}"));
    assert!(
        owner.contains(&format!("spent ({} µ$)", PRICED_CALL_MICROS * calls))
            && owner.contains("reserved (0 µ$)"),
        "{calls} calls at {PRICED_CALL_MICROS} µ$ each, settled at what they cost:\n{budget}\n{log}"
    );
}
