//! Benchmark (prints figures; not a test): what a fixed 30-cycle file task costs in input tokens,
//! the task AutoGPT 0.2.2 was measured on (10 writes of 200–600 characters of prose, 10 appends,
//! 9 reads, finish). The real binary runs it in the console against the scripted fake server, at a
//! 4,096-token and a 128k-token context, with memory on; every chat request the fake saw is then
//! split into its parts (system, commands, progress, memories, reply format, schema, other), and
//! summaries and profiles are counted as calls of their own. It also prints the share of input a
//! provider's prefix cache would serve (OpenAI: the longest prefix shared with an earlier request,
//! from 1,024 tokens on, in steps of 128) and the cost at gpt-4o-mini's prices with and without it.
//!
//! Run with `cargo bench --bench tokens`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark stops at the first failure.

#[path = "../tests/it/support/fake_openai.rs"]
#[allow(dead_code)]
mod fake_openai;

use std::collections::BTreeMap;
use std::time::Duration;

use autothread::core::budget::{format_usd, Price};
use autothread::core::memory::MEMORY_HEADER;
use autothread::core::message::{TokenCounter, MESSAGE_OVERHEAD, REPLY_PRIMING};
use autothread::llm::tokens::TiktokenCounter;
use fake_openai::{agent_reply, Expect, FakeOpenAi, Kind};
use serde_json::{json, Value};

/// AutoGPT 0.2.2's prompt tokens over the 30 main-loop calls of this task at a 4,096-token
/// context (it makes no other chat call), as measured against the same fake.
const AUTOGPT_022_TOKENS: usize = 81_997;

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

/// The scripted replies: write, append and read a note nine times, then write and append a
/// tenth and finish: 10 writes, 10 appends, 9 reads, finish.
fn script() -> Vec<String> {
    let mut replies = Vec::new();
    for i in 0..10 {
        let file = format!("notes/town-{i}.txt");
        replies.push(agent_reply(
            "write_file",
            json!({"filename": file, "contents": prose(2 * i)}),
        ));
        replies.push(agent_reply(
            "append_to_file",
            json!({"filename": file, "text": prose(2 * i + 1)}),
        ));
        if i < 9 {
            replies.push(agent_reply("read_file", json!({"filename": file})));
        }
    }
    replies.push(agent_reply(
        "finish",
        json!({"reason": "All ten notes are written."}),
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
    if let Some(schema) = body.pointer("/response_format/json_schema/schema") {
        text.push_str(&schema.to_string());
    }
    for m in body["messages"].as_array().unwrap() {
        text.push_str(m["role"].as_str().unwrap());
        text.push('\n');
        text.push_str(m["content"].as_str().unwrap());
        text.push('\n');
    }
    counter.encode(&text)
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
    if let Some(schema) = body.pointer("/response_format/json_schema/schema") {
        parts.add("schema", counter.count(&schema.to_string()));
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
    let schema = body
        .pointer("/response_format/json_schema/schema")
        .map_or(0, |s| counter.count(&s.to_string()));
    messages + REPLY_PRIMING + schema
}

async fn run(context_tokens: u32, max_tokens: u32) {
    let counter = TiktokenCounter::for_model("gpt-4o-mini");
    let fake = FakeOpenAi::start(Expect::default()).await;
    let replies = script();
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
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_autothread"))
        .arg("--config")
        .arg(dir.path().join("bot.toml"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args([
            "console",
            "--continuous",
            "--limit",
            "40",
            "--budget",
            "5",
            "--name",
            "TownGPT",
            "--role",
            "a writer of notes about a harbour town",
            "--task",
            "Write ten notes about the harbour town into notes/town-0.txt … notes/town-9.txt: \
             write each, add a paragraph to it, read it back to check it, then finish.",
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
    let done = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
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

    let cycles = fake.requests(Kind::Cycle);
    // TOKENS_DUMP=1 prints the last main-loop request, to see what a prompt carries.
    if std::env::var_os("TOKENS_DUMP").is_some() {
        let last = cycles.last().unwrap();
        for m in last["messages"].as_array().unwrap() {
            println!("--- {}\n{}", m["role"], m["content"].as_str().unwrap());
        }
        println!("--- schema\n{}", last["response_format"]);
    }
    let mut earlier: Vec<Vec<u32>> = Vec::new();
    let (mut total, mut cached) = (0usize, 0usize);
    let mut by_part = Parts::default();
    println!("\n== context {context_tokens} tokens, reply reserve {max_tokens}");
    println!(" call   input  system commands progress memories  format  schema   other  cached");
    for (i, body) in cycles.iter().enumerate() {
        let parts = cycle_parts(&counter, body);
        let tokens = request_tokens(&counter, body);
        let hit = cached_prefix(&tokens, &earlier);
        earlier.push(tokens);
        let n = parts.total();
        total += n;
        cached += hit.min(n);
        let p = |k: &str| parts.0.get(k).copied().unwrap_or(0);
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
        by_part.merge(&parts);
    }
    let mut side_calls = Vec::new();
    for (kind, label) in [(Kind::Summary, "summaries"), (Kind::Profile, "profile")] {
        let bodies = fake.requests(kind);
        let tokens: usize = bodies.iter().map(|b| all_tokens(&counter, b)).sum();
        side_calls.push((label, bodies.len(), tokens));
        total += tokens;
    }
    println!(
        "-- input tokens by part, all {} main-loop calls:",
        cycles.len()
    );
    for (part, tokens) in &by_part.0 {
        println!("   {part:<13} {tokens:>7}");
    }
    for (label, calls, tokens) in &side_calls {
        println!("   {label:<13} {tokens:>7}  ({calls} calls)");
    }
    println!(
        "-- all chat input: {total} tokens = {:.2}× AutoGPT 0.2.2's {AUTOGPT_022_TOKENS} (target ≤ 0.60×)",
        total as f64 / AUTOGPT_022_TOKENS as f64
    );
    println!(
        "-- a prefix cache would serve {cached} of the main loop's tokens ({:.0}%)",
        100.0 * cached as f64 / by_part.total().max(1) as f64
    );
    let price = Price::from_usd_per_million_cached(0.15, 0.075, 0.60);
    let completion = reply_tokens as u64;
    println!(
        "-- at gpt-4o-mini prices: {} without the cache discount, {} with it (replies: {completion} tokens)",
        format_usd(price.cost(total as u64, completion)),
        format_usd(price.cost_with_cache(total as u64, cached as u64, completion)),
    );
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
        run(4_096, 1_000).await;
        run(128_000, 1_500).await;
    });
}
