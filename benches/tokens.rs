//! Benchmark (prints figures; not a test): what a fixed file task costs in input tokens. The
//! 30-cycle task is the one AutoGPT 0.2.2 was measured on (10 writes of 200–600 characters of
//! prose, 10 appends, 9 reads, finish); the 100-cycle task goes on the same way (33 notes) to show
//! how a long-running agent's calls grow. The real binary runs each in the console against the
//! scripted fake server, at a 4,096-token and a 128k-token context, with memory on. Every chat
//! request the fake saw is counted as a provider bills it: its messages, and its whole
//! `response_format` (OpenAI places the schema in the prompt) and `tools` if any; main-loop
//! requests are split into their parts (system, commands, progress, memories, reply format,
//! schema, other), and summaries, profiles and critiques are counted as calls of their own. It
//! also prints, at 128k, the largest cycle against the per-agent prompt budget and cycle 100
//! against cycle 10; the share of input a provider's prefix cache would serve (OpenAI: the
//! longest prefix shared with an earlier request, from 1,024 tokens on, in steps of 128); and the
//! dollar cost with and without that cache at gpt-4o-mini's prices (cache reads at half price,
//! writes free) and at a model that bills cache writes (reads at a tenth, writes at 1.25×).
//!
//! Run with `cargo test --bench tokens -- --nocapture` (a debug build is enough: it counts
//! tokens, not time).
#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark stops at the first failure.

#[path = "../tests/it/support/fake_openai.rs"]
#[allow(dead_code)]
mod fake_openai;

use std::collections::BTreeMap;
use std::time::Duration;

use autothread::config::DEFAULT_PROMPT_BUDGET_TOKENS;
use autothread::core::budget::{Micros, Price};
use autothread::core::memory::MEMORY_HEADER;
use autothread::core::message::{TokenCounter, MESSAGE_OVERHEAD, REPLY_PRIMING};
use autothread::core::usage::Usage;
use autothread::llm::tokens::TiktokenCounter;
use fake_openai::{agent_reply, Expect, FakeOpenAi, Kind};
use serde_json::{json, Value};

/// AutoGPT 0.2.2's prompt tokens over the 30 main-loop calls of this task at a 4,096-token
/// context (it makes no other chat call), as measured against the same fake.
const AUTOGPT_022_TOKENS: usize = 81_997;
/// What the 30-cycle task may cost at 4,096 tokens: half of AutoGPT 0.2.2's.
const TARGET_TOKENS: usize = 41_000;

const SENTENCES: &[&str] = &[
    "The harbour town wakes early, and the ferry leaves at seven sharp.",
    "Fishermen mend their nets on the quay while gulls argue over scraps.",
    "A narrow lane climbs from the market to the old lighthouse on the hill.",
    "The bakery sells rye bread, cinnamon buns and a dense almond cake.",
    "In winter the bay freezes near the shore and children skate on it.",
    "The museum keeps a whaling boat, three anchors and a ship's bell from 1871.",
    "Tourists come in July for the regatta and leave with sunburnt noses.",
    "The library opens at ten and lends bicycles as well as books.",
];

/// Prose of 200 to 600 characters, different for each step.
fn prose(step: usize) -> String {
    let wanted = 200 + (step * 97) % 401;
    let mut text = String::new();
    let mut i = step;
    while text.len() < wanted {
        text.push_str(SENTENCES[i % SENTENCES.len()]);
        text.push(' ');
        i += 3;
    }
    text.truncate(wanted);
    text.trim_end().to_string()
}

/// The scripted replies of a `cycles`-step task: write, append and read a note, again and again,
/// then finish. For 30 cycles: 10 writes, 10 appends, 9 reads, finish.
fn script(cycles: usize) -> Vec<String> {
    let mut replies = Vec::new();
    let mut note = 0;
    while replies.len() + 1 < cycles {
        let file = format!("notes/town-{note}.txt");
        let steps = [
            agent_reply(
                "write_file",
                json!({"filename": file, "contents": prose(2 * note)}),
            ),
            agent_reply(
                "append_to_file",
                json!({"filename": file, "text": prose(2 * note + 1)}),
            ),
            agent_reply("read_file", json!({"filename": file})),
        ];
        let room = cycles - 1 - replies.len();
        replies.extend(steps.into_iter().take(room));
        note += 1;
    }
    replies.push(agent_reply(
        "finish",
        json!({"reason": format!("All {note} notes are written.")}),
    ));
    replies
}

/// One request's input tokens by part.
#[derive(Default, Clone)]
struct Parts(BTreeMap<&'static str, usize>);

impl Parts {
    fn add(&mut self, part: &'static str, tokens: usize) {
        *self.0.entry(part).or_default() += tokens;
    }
    fn total(&self) -> usize {
        self.0.values().sum()
    }
    fn merge(&mut self, other: &Parts) {
        for (part, tokens) in &other.0 {
            self.add(part, *tokens);
        }
    }
}

/// The part of the cycle prompt a message is.
fn part_of(role: &str, content: &str) -> &'static str {
    if content.starts_with("## Progress") {
        "progress"
    } else if content.starts_with(MEMORY_HEADER) {
        "memories"
    } else if content.starts_with("Respond with a single JSON object") {
        "reply format"
    } else if role == "system" && content.starts_with("You are ") {
        "system"
    } else if content.starts_with("\"\"\"") {
        "task"
    } else {
        "other"
    }
}

/// The request as the provider reads it, in order: the schema (OpenAI places it in the prompt's
/// prefix), then each message; for the prefix-cache estimate.
fn request_tokens(counter: &TiktokenCounter, body: &Value) -> Vec<u32> {
    let mut text = String::new();
    text.push_str(&billed_extras(body));
    for m in body["messages"].as_array().unwrap() {
        text.push_str(m["role"].as_str().unwrap());
        text.push('\n');
        text.push_str(m["content"].as_str().unwrap());
        text.push('\n');
    }
    counter.encode(&text)
}

/// What a request sends besides its messages that the provider reads as input: the whole
/// `response_format` (a schema is placed in the prompt; its type, name and strictness are counted
/// too, rather than guessed away) and any `tools`.
fn billed_extras(body: &Value) -> String {
    let mut text = String::new();
    for key in ["response_format", "tools"] {
        if let Some(value) = body.get(key).filter(|v| !v.is_null()) {
            text.push_str(&value.to_string());
        }
    }
    text
}

/// Input tokens a prefix cache would serve: the longest prefix shared with an earlier request,
/// counted from 1,024 tokens on in steps of 128 (OpenAI's rule).
fn cached_prefix(tokens: &[u32], earlier: &[Vec<u32>]) -> usize {
    let shared = earlier
        .iter()
        .map(|e| e.iter().zip(tokens).take_while(|(a, b)| a == b).count())
        .max()
        .unwrap_or(0);
    if shared < 1024 {
        0
    } else {
        shared / 128 * 128
    }
}

/// Splits one cycle request into parts; the system message's command list is its own part.
fn cycle_parts(counter: &TiktokenCounter, body: &Value) -> Parts {
    let mut parts = Parts::default();
    for m in body["messages"].as_array().unwrap() {
        let (role, content) = (m["role"].as_str().unwrap(), m["content"].as_str().unwrap());
        let part = part_of(role, content);
        if part == "system" {
            let (before, commands) = match content.find("## Commands") {
                Some(at) => {
                    let end = content[at..]
                        .find("\n\n## ")
                        .map_or(content.len(), |e| at + e);
                    (
                        format!("{}{}", &content[..at], &content[end..]),
                        &content[at..end],
                    )
                }
                None => (content.to_string(), ""),
            };
            parts.add("system", counter.count(&before) + MESSAGE_OVERHEAD);
            parts.add("commands", counter.count(commands));
        } else {
            parts.add(part, counter.count(content) + MESSAGE_OVERHEAD);
        }
    }
    parts.add("other", REPLY_PRIMING);
    let extras = billed_extras(body);
    if !extras.is_empty() {
        parts.add("schema", counter.count(&extras));
    }
    parts
}

fn all_tokens(counter: &TiktokenCounter, body: &Value) -> usize {
    let messages: usize = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| counter.count(m["content"].as_str().unwrap()) + MESSAGE_OVERHEAD)
        .sum();
    let extras = billed_extras(body);
    let extras = if extras.is_empty() {
        0
    } else {
        counter.count(&extras)
    };
    messages + REPLY_PRIMING + extras
}

/// What one run cost: all chat input, and each main-loop call's input in order.
struct RunTotals {
    total: usize,
    per_cycle: Vec<usize>,
}

/// The smallest prompt OpenAI's cache serves or writes.
const CACHE_MIN_TOKENS: usize = 1024;

/// Dollars to a hundredth of a cent: a run costs cents.
fn dollars(cost: Micros) -> String {
    format!("${:.4}", cost.0 as f64 / 1e6)
}

/// gpt-4o-mini's price: $0.15 a million in, cache reads at half that, writes at the input
/// price, $0.60 out.
fn mini_price() -> Price {
    Price::from_usd_per_million_cached(0.15, 0.075, 0.60)
}

/// A model that bills cache writes: $1 a million in, reads $0.10, writes $1.25, $5 out
/// (Claude Haiku 4.5's prices).
fn write_billing_price() -> Price {
    Price::from_usd_per_million_cached(1.0, 0.10, 5.0).with_cache_writes(1.25)
}

async fn run(context_tokens: u32, max_tokens: u32, cycles: usize) -> RunTotals {
    let counter = TiktokenCounter::for_model("gpt-4o-mini");
    let fake = FakeOpenAi::start(Expect::default()).await;
    let replies = script(cycles);
    let reply_tokens: usize = replies.iter().map(|r| counter.count(r)).sum();
    for reply in &replies {
        fake.push_content(reply.clone());
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bot.toml"),
        format!(
            "[llm]\nbase_url = \"{base}\"\nmodel = \"gpt-4o-mini\"\n\n\
             [llm.models.\"gpt-4o-mini\"]\ncontext_tokens = {context_tokens}\nmax_tokens = {max_tokens}\n\n\
             [memory]\nenabled = true\npassage_model = \"fake-passage\"\nquery_model = \"fake-query\"\n\n\
             [budget]\nguild_calls_per_minute = 0\nfree_models = [\"fake-passage\", \"fake-query\"]\n",
            base = fake.base_url
        ),
    )
    .unwrap();
    let limit = (cycles + 10).to_string();
    let notes = cycles.div_ceil(3);
    let task = format!(
        "Write {notes} notes about the harbour town into notes/town-0.txt … notes/town-{}.txt: \
         write each, add a paragraph to it, read it back to check it, then finish.",
        notes - 1
    );
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_autothread"))
        .arg("--config")
        .arg(dir.path().join("bot.toml"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args([
            "console",
            "--continuous",
            "--limit",
            &limit,
            "--budget",
            "5",
            "--name",
            "TownGPT",
            "--role",
            "a writer of notes about a harbour town",
            "--task",
            &task,
        ])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_MODEL")
        .env_remove("OPENAI_EMBED_BASE")
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn autothread");
    // Control commands (finish) still ask: answer yes.
    let mut child = output;
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all("y\n".repeat(5).as_bytes()).await.unwrap();
    }
    let done = tokio::time::timeout(Duration::from_secs(600), child.wait_with_output())
        .await
        .expect("the run ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(
        stdout.contains("finished"),
        "the run did not finish:\n{stdout}\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert_eq!(fake.remaining_cycle_steps(), 0, "every scripted step ran");

    let requests = fake.requests(Kind::Cycle);
    assert_eq!(requests.len(), cycles, "one main-loop call a cycle");
    // TOKENS_DUMP=1 prints the last main-loop request, to see what a prompt carries.
    if std::env::var_os("TOKENS_DUMP").is_some() {
        let last = requests.last().unwrap();
        for m in last["messages"].as_array().unwrap() {
            println!("--- {}\n{}", m["role"], m["content"].as_str().unwrap());
        }
        println!("--- billed beside the messages\n{}", billed_extras(last));
    }
    let mut earlier: Vec<Vec<u32>> = Vec::new();
    let (mut total, mut cached, mut written) = (0usize, 0usize, 0usize);
    let mut per_cycle = Vec::new();
    let mut by_part = Parts::default();
    println!("\n== {cycles} cycles, context {context_tokens} tokens, reply reserve {max_tokens}");
    println!(" call   input  system commands progress memories  format  schema   other  cached");
    for (i, body) in requests.iter().enumerate() {
        let parts = cycle_parts(&counter, body);
        let tokens = request_tokens(&counter, body);
        let hit = cached_prefix(&tokens, &earlier);
        earlier.push(tokens);
        let n = parts.total();
        total += n;
        cached += hit.min(n);
        // A provider that caches writes what it did not serve of a prompt long enough to cache.
        if n >= CACHE_MIN_TOKENS {
            written += n - hit.min(n);
        }
        per_cycle.push(n);
        let p = |k: &str| parts.0.get(k).copied().unwrap_or(0);
        // A long run prints every tenth call.
        if cycles <= 30 || (i + 1) % 10 == 0 || i == 0 {
            println!(
                "{:>5} {:>7} {:>7} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7}",
                i + 1,
                n,
                p("system") + p("task"),
                p("commands"),
                p("progress"),
                p("memories"),
                p("reply format"),
                p("schema"),
                p("other"),
                hit.min(n)
            );
        }
        by_part.merge(&parts);
    }
    let mut side_calls = Vec::new();
    for (kind, label) in [
        (Kind::Summary, "summaries"),
        (Kind::Profile, "profile"),
        (Kind::Critique, "critiques"),
    ] {
        let bodies = fake.requests(kind);
        let tokens: usize = bodies.iter().map(|b| all_tokens(&counter, b)).sum();
        side_calls.push((label, bodies.len(), tokens));
        total += tokens;
    }
    println!(
        "-- input tokens by part, all {} main-loop calls:",
        requests.len()
    );
    for (part, tokens) in &by_part.0 {
        println!("   {part:<13} {tokens:>7}");
    }
    for (label, calls, tokens) in &side_calls {
        println!("   {label:<13} {tokens:>7}  ({calls} calls)");
    }
    if cycles == 30 {
        println!(
            "-- all chat input: {total} tokens = {:.2}× AutoGPT 0.2.2's {AUTOGPT_022_TOKENS} (target ≤ {TARGET_TOKENS}, 0.50×)",
            total as f64 / AUTOGPT_022_TOKENS as f64
        );
    } else {
        println!("-- all chat input: {total} tokens");
    }
    let loop_tokens = by_part.total().max(1);
    println!(
        "-- a prefix cache would serve {cached} of the main loop's tokens ({:.0}%)",
        100.0 * cached as f64 / loop_tokens as f64
    );
    // The cost as the ledger charges it (`Price::cost_of`), from the usage a provider would
    // report: without a cache, every input token at the input price; with one, the served
    // prefix at the read price and, at a model that bills writes, the rest of each cached-size
    // prompt at the write price.
    let completion = reply_tokens as u64;
    let without_cache = Usage {
        prompt_tokens: total as u64,
        completion_tokens: completion,
        cached_prompt_tokens: 0,
        cache_write_tokens: 0,
    };
    let with_cache = Usage {
        cached_prompt_tokens: cached as u64,
        cache_write_tokens: written as u64,
        ..without_cache
    };
    for (label, price) in [
        (
            "gpt-4o-mini's prices ($0.15/M in, reads $0.075, $0.60/M out)",
            mini_price(),
        ),
        (
            "a model that bills cache writes ($1/M in, reads $0.10, writes $1.25, $5/M out)",
            write_billing_price(),
        ),
    ] {
        println!(
            "-- at {label}: {} without the cache, {} with it (replies: {completion} tokens)",
            dollars(price.cost_of(without_cache)),
            dollars(price.cost_of(with_cache)),
        );
    }
    RunTotals { total, per_cycle }
}

fn main() {
    // `cargo test --benches` passes --bench-free flags; only run when asked for a benchmark.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let small = run(4_096, 1_000, 30).await;
        run(128_000, 1_500, 30).await;
        run(4_096, 1_000, 100).await;
        let long = run(128_000, 1_500, 100).await;
        let budget = DEFAULT_PROMPT_BUDGET_TOKENS as usize;
        let largest = long.per_cycle.iter().copied().max().unwrap_or(0);
        let (tenth, hundredth) = (long.per_cycle[9], long.per_cycle[99]);
        // Older steps leave the prompt in blocks, so a cycle's size swings within a block: the
        // largest from cycle 30 on is the honest bound.
        let largest_late = long.per_cycle[29..].iter().copied().max().unwrap_or(0);
        println!("\n== summary");
        println!(
            "-- 30 cycles at 4,096 tokens: {} tokens ({}, target ≤ {TARGET_TOKENS})",
            small.total,
            if small.total <= TARGET_TOKENS { "met" } else { "NOT met" }
        );
        println!(
            "-- 100 cycles at 128k: largest cycle {largest} tokens, within the per-agent prompt budget of {budget}: {}",
            if largest <= budget { "yes" } else { "NO" }
        );
        println!(
            "-- 100 cycles at 128k: cycle 100 costs {hundredth} tokens, cycle 10 {tenth}: {:.2}× (target ≤ 1.20×)",
            hundredth as f64 / tenth as f64
        );
        println!(
            "-- 100 cycles at 128k: the largest cycle from 30 on costs {largest_late} tokens: {:.2}× cycle 10",
            largest_late as f64 / tenth as f64
        );
    });
}
