//! Benchmark (prints figures; not a test): the per-cycle overhead of the agent loop outside the
//! model's latency — prompt assembly with token counting, reply parsing, the store commit and its
//! flush — at 10, 100 and 500 episodes; then real console runs against the scripted fake server
//! (30, 300 and 1,000 cycles): peak RSS, the whole process's overhead per cycle, and its disk
//! writes and store per cycle. The 30-cycle task runs seven times and its median is the figure,
//! since one run on a shared 2-core machine moves by a few tenths of a millisecond.
//! `BENCH_SHOW_LOG=1` counts the runs' log lines by shape.
//!
//! Run with `cargo bench --bench cycle`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark stops at the first failure.

#[path = "../tests/it/support/fake_openai.rs"]
#[allow(dead_code)]
mod fake_openai;

use std::time::{Duration, Instant};

use autothread::core::budget::Micros;
use autothread::core::commands::CommandSet;
use autothread::core::decision::Decision;
use autothread::core::event::{CallPurpose, Effect, Event};
use autothread::core::history::{Episode, Outcome};
use autothread::core::message::TokenCounter;
use autothread::core::policy::Policy;
use autothread::core::prompt::{ContextLimits, PromptExtras};
use autothread::core::reply::CommandCall;
use autothread::core::state::{AgentSettings, AgentState, Phase, Profile};
use autothread::core::step::{step, StepCtx};
use autothread::llm::tokens::TiktokenCounter;
use autothread::ops::proc_counters::proc_counter;
use autothread::store::{Commit, Store};
use autothread::tools::Registry;
use chrono::Utc;
use fake_openai::{agent_reply, Expect, FakeOpenAi};
use serde_json::json;

fn episode(cycle: u64) -> Episode {
    let text = format!(
        "Step {cycle} wrote a paragraph about the topic, with a few facts: the crate compiles in 3.2 s, uses 14 dependencies, and its README has 120 lines. "
    )
    .repeat(4);
    Episode {
        cycle,
        command: CommandCall {
            name: "write_file".into(),
            args: json!({"filename": format!("notes/{cycle}.md"), "contents": text.clone()})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        },
        reasoning: "Saving what I found so far keeps it out of my short-term memory.".into(),
        outcome: Outcome::Success(format!("File notes/{cycle}.md has been written successfully.")),
        summary: Some(format!(
            "Wrote notes/{cycle}.md with facts about build time (3.2 s), dependencies (14) and README length (120 lines)."
        )),
        decided_by: Some(autothread::core::person::ActedBy::Automatic("bench".into())),
        edited_by: Vec::new(),
        cost: autothread::core::budget::Micros::ZERO,
    }
}

fn agent_with(episodes: u64, model: &str) -> AgentState {
    let mut state = AgentState::new(
        "bench0000001".into(),
        "Research the crate and write a report into report.md".into(),
        Some(Profile {
            name: "ResearchGPT".into(),
            role: "a careful researcher".into(),
            best_practices: vec!["Cite numbers.".into()],
            constraints: vec!["Stay within the workspace.".into()],
        }),
        AgentSettings {
            model: model.into(),
            continuous: false,
            cycle_limit: 0,
            budget: Some(Micros(1_000_000_000)),
            policy: Default::default(),
            endpoint: None,
            prompt_budget_tokens: None,
        },
        Utc::now(),
    );
    state.money.spender = autothread::core::state::Spender {
        user: Some("1001".into()),
        guild: Some("2002".into()),
    };
    state.progress.episodes = (1..=episodes).map(episode).collect();
    state.progress.cycle = episodes + 1;
    state.progress.phase = Phase::Thinking;
    state
}

struct Stats {
    samples: Vec<Duration>,
}

impl Stats {
    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.samples.clone();
        sorted.sort();
        let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[index]
    }
    fn mean(&self) -> Duration {
        self.samples.iter().sum::<Duration>() / self.samples.len() as u32
    }
}

fn micros(d: Duration) -> String {
    format!("{:>9.1}", d.as_secs_f64() * 1e6)
}

fn overhead(episodes: u64, model: &str, limits: ContextLimits, iterations: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path()).expect("store");
    let registry = Registry::standard(&autothread::config::AgentConfig::default());
    let commands: &CommandSet = &registry.command_set();
    let counter = TiktokenCounter::for_model(model);
    let policy = Policy::default();
    let extras = PromptExtras::default();
    let base = agent_with(episodes, model);
    let reply = agent_reply(
        "read_file",
        json!({"filename": format!("notes/{episodes}.md")}),
    );
    let budgets =
        autothread::budget::Budgets::new(&store, &autothread::config::BudgetConfig::default())
            .expect("budgets");
    let (mut prompt_t, mut parse_t, mut commit_t, mut flush_t, mut budget_t, mut total_t) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut prompt_tokens = 0;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for _ in 0..iterations {
        let mut state = base.clone();
        // 0. The ledger: the budget view the step reads, then one call's reserve (durable),
        // and its settlement.
        let start = Instant::now();
        let view = budgets.view(&state, None, Utc::now()).expect("view");
        let charges = budgets
            .charges(
                &state.id,
                &state.money.spender,
                Micros(1_000_000_000),
                Utc::now(),
            )
            .expect("charges");
        let reservation = runtime
            .block_on(budgets.reserve(&charges, Micros(2_000), &state.id, "bench", Utc::now()))
            .expect("reserve")
            .expect("within budget");
        budgets
            .ledger()
            .settle(reservation.id, Micros(1_500))
            .expect("settle");
        let t_budget = start.elapsed();
        let ctx = StepCtx {
            now: Utc::now(),
            commands,
            policy: &policy,
            quorum: &Default::default(),
            expiry: &Default::default(),
            server_rules: &[],
            counter: &counter,
            limits,
            extras: &extras,
            full_steps: 4,
            step_lines: autothread::core::prompt::DEFAULT_STEP_LINES,
            smart_model_available: false,
            budget: Some(&view),
            memory: None,
            reply_format: autothread::core::step::ReplyFormat::CompactSchema,
            brake: autothread::config::BudgetConfig::default().brake_limits(),
        };
        // 1. A command finished: record the episode and assemble (and count) the next prompt.
        state.progress.phase = Phase::Executing;
        state.progress.pending = Some(autothread::core::state::Proposal {
            cycle: state.progress.cycle,
            thoughts: Default::default(),
            // A different folder each cycle: the same step over and over would be parked by
            // the runaway brake, which is part of what a cycle costs.
            command: CommandCall {
                name: "list_folder".into(),
                args: json!({ "folder": format!("dir{}", state.progress.cycle) })
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            },
            risk: autothread::core::commands::Risk::Read,
            interrupted: false,
            approved_by: Some(autothread::core::person::ActedBy::Automatic("bench".into())),
            spend: None,
            auto_stop: None,
            paced: None,
            edits: Vec::new(),
            approvals: Vec::new(),
            approvals_needed: 1,
            outgoing: None,
            deadline: None,
            remember: Vec::new(),
            stuck: None,
            script_check: None,
            revision: 0,
        });
        let cycle = state.progress.cycle;
        let start = Instant::now();
        let fx = step(
            &mut state,
            Event::CommandFinished {
                cycle,
                outcome: Outcome::Success(format!("dir{cycle}/ (3 files)")),
            },
            &ctx,
        );
        let t_prompt = start.elapsed();
        if let Some(Effect::CallModel(call)) = fx
            .iter()
            .find(|e| matches!(e, Effect::CallModel(c) if c.purpose == CallPurpose::Think))
        {
            prompt_tokens = counter.count_messages(&call.messages);
        }
        // 2. The model replied: parse, repair if needed, validate, propose.
        let seq = state.progress.call_seq;
        let start = Instant::now();
        let fx2 = step(
            &mut state,
            Event::ModelReplied {
                seq,
                purpose: CallPurpose::Think,
                text: reply.clone(),
                usage: None,
            },
            &ctx,
        );
        let t_parse = start.elapsed();
        assert!(fx2.iter().any(|e| matches!(e, Effect::ShowProposal { .. })));
        // 3. Persist the state, the new episode and the proposal; 4. flush (a durability point).
        let start = Instant::now();
        let new_episode = state.episode(cycle).cloned();
        store
            .commit(&Commit {
                state: Some(&state),
                episodes: new_episode.iter().collect(),
                ..Default::default()
            })
            .expect("commit");
        let t_commit = start.elapsed();
        let start = Instant::now();
        runtime.block_on(store.flush()).expect("flush");
        let t_flush = start.elapsed();
        prompt_t.push(t_prompt);
        parse_t.push(t_parse);
        commit_t.push(t_commit);
        flush_t.push(t_flush);
        budget_t.push(t_budget);
        total_t.push(t_prompt + t_parse + t_commit + t_flush + t_budget);
        let _ = Decision::Approve;
    }
    let row = |name: &str, samples: Vec<Duration>| {
        let stats = Stats { samples };
        println!(
            "  {name:<22} mean {} µs   p50 {} µs   p99 {} µs",
            micros(stats.mean()),
            micros(stats.percentile(0.5)),
            micros(stats.percentile(0.99))
        );
    };
    println!(
        "{episodes} episodes, {model} ({} context, {} reply reserve), {iterations} cycles, prompt {prompt_tokens} tokens:",
        limits.context_tokens, limits.max_tokens
    );
    row("prompt + token count", prompt_t);
    row("parse + validate", parse_t);
    row("store commit", commit_t);
    row("store flush (fsync)", flush_t);
    row("budget: view+reserve+settle", budget_t);
    row("total", total_t);
}

/// About `chars` characters of English-like text, different for every `seed`: what the store
/// keeps and compresses should look like an agent's notes, not one repeated letter.
fn prose(seed: u64, chars: usize) -> String {
    const WORDS: &[&str] = &[
        "the",
        "agent",
        "wrote",
        "a",
        "summary",
        "of",
        "report",
        "for",
        "team",
        "and",
        "then",
        "checked",
        "every",
        "source",
        "against",
        "notes",
        "from",
        "last",
        "week",
        "market",
        "price",
        "shipping",
        "ferry",
        "leaves",
        "at",
        "pier",
        "island",
        "weather",
        "forecast",
        "rain",
        "budget",
        "plan",
        "next",
        "step",
        "because",
        "data",
        "shows",
        "growth",
        "in",
        "north",
        "region",
        "while",
        "costs",
        "fell",
        "by",
        "percent",
        "customers",
        "asked",
        "about",
        "delivery",
        "times",
        "open",
        "questions",
        "remain",
        "on",
        "supplier",
        "contract",
        "draft",
        "review",
        "Monday",
        "meeting",
        "with",
        "finance",
        "sales",
    ];
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut text = String::with_capacity(chars + 16);
    while text.len() < chars {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(WORDS[(state >> 33) as usize % WORDS.len()]);
        text.push(if (state >> 20).is_multiple_of(11) {
            '.'
        } else {
            ' '
        });
    }
    text.truncate(chars);
    text
}

/// A run of a thousand cycles at once passes $2 of worst-case spend within the hour: the user's
/// spend pace and the runaway brake would slow it down and then park it, by design. They are off
/// here, since what is measured is the bot's own time.
const PACE_OFF: &str = "user_spend_per_hour_usd = 0\nrunaway_usd_per_hour = 0\n";

/// A console run of `cycles` cycles; `dimensions` asks for shorter vectors (`memory.dimensions`),
/// otherwise the fake's own 1,024 are stored. Returns the mean per-cycle overhead in ms; `quiet`
/// prints nothing (a repeat run, summed up by its caller).
fn peak_rss_of_console_run(cycles: usize, dimensions: Option<u32>, quiet: bool) -> f64 {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let fake = FakeOpenAi::start(Expect::default()).await;
        let print = |line: String| {
            if !quiet {
                println!("{line}");
            }
        };
        for i in 0..cycles {
            fake.push_content(agent_reply(
                "write_file",
                json!({"filename": format!("f{i}.txt"), "contents": prose(i as u64, 2000)}),
            ));
        }
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("bot.toml"),
            format!(
                "[llm]\nbase_url = \"{}\"\nmodel = \"gpt-4o-mini\"\n[memory]\n{}[budget]\n{PACE_OFF}",
                fake.base_url,
                dimensions.map_or(String::new(), |d| format!("dimensions = {d}\n"))
            ),
        )
        .expect("config");
        let started = Instant::now();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_autothread"))
            .arg("--config")
            .arg(dir.path().join("bot.toml"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args([
                "console",
                "--continuous",
                "--limit",
                &cycles.to_string(),
                "--name",
                "BenchGPT",
                "--task",
                "write files",
            ])
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_MODEL")
            .env("RUST_LOG", "warn,autothread::cli=info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn autothread");
        let pid = child.id().expect("pid");
        let mut stderr = child.stderr.take().expect("stderr");
        let log = tokio::spawn(async move {
            let mut text = String::new();
            tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text)
                .await
                .ok();
            text
        });
        let mut peak_kib = 0u64;
        // Bytes written by the process at every hundredth cycle, to show whether a long run's
        // writes per cycle settle or keep growing.
        let mut written_at_hundreds: Vec<u64> = Vec::new();
        let process = pid.to_string();
        let written_now = || proc_counter(&process, "io", "write_bytes:");
        loop {
            if (written_at_hundreds.len() + 1) * 100 <= fake.cycle_arrivals().len() {
                if let Some(bytes) = written_now() {
                    written_at_hundreds.push(bytes);
                }
            }
            if let Some(kib) = proc_counter(&process, "status", "VmHWM:") {
                peak_kib = peak_kib.max(kib);
            }
            match tokio::time::timeout(Duration::from_millis(5), child.wait()).await {
                Ok(_) => break,
                Err(_) => continue,
            }
        }
        print(format!(
            "console run: {cycles} cycles, {} dimensions, in {:.2} s wall (fake model answers at once), peak RSS {:.1} MiB",
            dimensions.unwrap_or(1024),
            started.elapsed().as_secs_f64(),
            peak_kib as f64 / 1024.0
        ));
        // From one cycle's model request to the next: everything the process does in a cycle
        // but wait for the model (which answers at once), without start-up and shutdown.
        let arrivals = fake.cycle_arrivals();
        let mut overhead_ms = f64::NAN;
        if let (Some(first), Some(last)) = (arrivals.first(), arrivals.last()) {
            let gaps = arrivals.len().saturating_sub(1).max(1);
            overhead_ms = last.duration_since(*first).as_secs_f64() * 1e3 / gaps as f64;
            print(format!(
                "  per-cycle overhead (whole process, memory on): {overhead_ms:.2} ms mean over {gaps} cycles"
            ));
            // Long runs also show how the overhead moves as the history grows.
            if arrivals.len() >= 500 {
                let blocks: Vec<String> = arrivals
                    .chunks(100)
                    .filter(|block| block.len() > 1)
                    .map(|block| {
                        let gaps = (block.len() - 1) as f64;
                        let mean = block[block.len() - 1].duration_since(block[0]).as_secs_f64();
                        format!("{:.2}", mean * 1e3 / gaps)
                    })
                    .collect();
                println!("  by hundreds of cycles (ms): {}", blocks.join(" "));
                let written: Vec<String> = written_at_hundreds
                    .windows(2)
                    .map(|pair| format!("{:.1}", (pair[1] - pair[0]) as f64 / 100.0 / 1e3))
                    .collect();
                println!("  written by hundreds of cycles (KB per cycle): {}", written.join(" "));
                let (longest_at, longest) = arrivals
                    .windows(2)
                    .map(|pair| pair[1].duration_since(pair[0]))
                    .enumerate()
                    .max_by_key(|(_, gap)| *gap)
                    .unwrap_or_default();
                println!(
                    "  longest: {:.2} ms, before cycle {}",
                    longest.as_secs_f64() * 1e3,
                    longest_at + 2
                );
            }
        }
        let log = log.await.expect("the log");
        if std::env::var("BENCH_SHOW_LOG").is_ok() {
            let mut seen = std::collections::BTreeMap::new();
            for line in log.lines() {
                let shape: String = line.chars().skip(28).take(90).collect();
                *seen.entry(shape).or_insert(0) += 1;
            }
            for (shape, n) in seen {
                eprintln!("{n:5} × {shape}");
            }
        }
        let report = log
            .lines()
            .find_map(|l| l.split("this run: ").nth(1))
            .unwrap_or_else(|| panic!("no disk report in the log:\n{log}"));
        let number_before = |word: &str| -> f64 {
            report
                .split(", ")
                .find(|part| part.contains(word))
                .and_then(|part| part.split_whitespace().find_map(|w| w.parse::<f64>().ok()))
                .unwrap_or(f64::NAN)
        };
        let per_cycle = |x: f64| x / cycles as f64;
        print(format!(
            "  per cycle: {:.2} durable flushes, {:.1} KB written, {:.1} KB of store kept ({report})",
            per_cycle(number_before("flushes")),
            per_cycle(number_before("written")) / 1e3,
            per_cycle(number_before("on disk")) / 1e3,
        ));
        overhead_ms
    })
}

/// Runs of the 30-cycle task after the first, for a figure a busy moment of this shared machine
/// does not decide.
const REPEATS_OF_THE_TASK: usize = 6;

/// The 30-cycle task (AutoGPT's, as the issue measures it) once in full, then again quietly; the
/// median of all the runs is the figure.
fn thirty_cycle_task() {
    let mut runs = vec![peak_rss_of_console_run(30, None, false)];
    runs.extend((0..REPEATS_OF_THE_TASK).map(|_| peak_rss_of_console_run(30, None, true)));
    runs.retain(|ms| ms.is_finite());
    runs.sort_by(f64::total_cmp);
    if let (Some(best), Some(worst)) = (runs.first(), runs.last()) {
        let all: Vec<String> = runs.iter().map(|ms| format!("{ms:.2}")).collect();
        println!(
            "  the 30-cycle task over {} runs: median {:.2} ms per cycle (best {best:.2}, worst {worst:.2}; {})",
            runs.len(),
            runs[runs.len() / 2],
            all.join(" ")
        );
    }
}

fn main() {
    // `cargo test --benches` passes --bench-free flags; only run when asked for a benchmark.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench --bench cycle -- console` runs only the whole-process runs.
    if std::env::args().any(|a| a == "console") {
        if std::env::var("BENCH_SHOW_LOG").is_err() {
            thirty_cycle_task();
            peak_rss_of_console_run(300, None, false);
        }
        peak_rss_of_console_run(long_run_cycles(), Some(256), false);
        return;
    }
    TiktokenCounter::for_model("gpt-4o-mini").warm_up();
    TiktokenCounter::for_model("smollm2").warm_up();
    let big = ContextLimits {
        context_tokens: 128_000,
        max_tokens: 1_500,
    };
    let small = ContextLimits {
        context_tokens: 4_096,
        max_tokens: 1_000,
    };
    for (episodes, iterations) in [(10u64, 200usize), (100, 100), (500, 50)] {
        overhead(episodes, "gpt-4o-mini", big, iterations);
        overhead(episodes, "smollm2", small, iterations);
    }
    thirty_cycle_task();
    peak_rss_of_console_run(300, None, false);
    peak_rss_of_console_run(long_run_cycles(), Some(256), false);
}

/// The long console run's cycles: 1,000, or `BENCH_LONG_CYCLES` to see where the figures settle.
fn long_run_cycles() -> usize {
    std::env::var("BENCH_LONG_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}
