//! Benchmark (prints figures; not a test): many agents cycling at once in the real bot (its own
//! process, release build) against the fake Discord, with a fake model that answers after a
//! delay. Every card is approved by a click as soon as it appears, so each agent cycles as fast as
//! the model lets it. Prints the click acknowledgements (p50, p99, max, and how many missed
//! Discord's 3 s), the cycles run, and the bot's resident memory after warm-up and at the end, per
//! agent and per 1,000 cycles.
//!
//! Run with `cargo bench --bench load`. Settings come from the environment: `BENCH_AGENTS`
//! (1000), `BENCH_SECS` (120, after warm-up), `BENCH_WARMUP_SECS` (30), `BENCH_MODEL_MS` (200),
//! `BENCH_MEMORY` (0; 1 turns long-term memory on, with the fake's embeddings), `BENCH_CACHE_MB` (sled's
//! page cache) and `BENCH_FLUSH_WINDOW_MS` (the bot's flush window; both the bot's default unless
//! set).
#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark stops at the first failure.

#[path = "../tests/it/support/mod.rs"]
mod support;

#[path = "shared/discord.rs"]
mod discord_common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use autothread::ops::proc_counters::{device_bytes_written, proc_counter};
use discord_common::{approve_id, ms, percentile, start_agents, start_unlimited_bot, title};
use serde_json::{json, Value};
use support::fake_discord::{FakeDiscord, ALICE};
use support::fake_openai::{agent_reply, Expect, FakeOpenAi, Reply};
use support::TestEnv;

/// Discord's limit for acknowledging an interaction.
const ACK_LIMIT: Duration = Duration::from_secs(3);

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The cycle a card shows, from its title ("… · cycle N").
fn cycle_of(card: &Value) -> Option<u64> {
    title(card).rsplit("· cycle ").next()?.trim().parse().ok()
}

fn rss_mib(pid: u32) -> f64 {
    proc_counter(&pid.to_string(), "status", "VmRSS:").map_or(f64::NAN, |kib| kib as f64 / 1024.0)
}

/// An acknowledgement slower than this is listed with the time it came, to tell a stall from
/// a steady tail.
const SLOW_ACK: Duration = Duration::from_secs(1);

/// What the bot has written to disk so far (`/proc/<pid>/io`), in bytes.
fn written_bytes(pid: u32) -> u64 {
    proc_counter(&pid.to_string(), "io", "write_bytes:").unwrap_or(0)
}

/// The size of the store's files, in bytes.
fn store_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| match entry.metadata() {
                    Ok(meta) if meta.is_dir() => store_bytes(&entry.path()),
                    Ok(meta) => meta.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Clicks sent and not yet answered, and the latencies of those that were.
#[derive(Default)]
struct Clicks {
    /// Each click, when it was sent, and the seconds into the run at which it was.
    waiting: Vec<(u64, Instant, f64)>,
    acked: Vec<Duration>,
    missed: usize,
    /// Slow or missing acknowledgements: seconds into the run, and the latency (`None`: none came).
    slow: Vec<(f64, Option<Duration>)>,
}

impl Clicks {
    /// Collects the acknowledgements that arrived; a click unanswered past the limit is missed.
    fn collect(&mut self, discord: &FakeDiscord) {
        let mut still = Vec::with_capacity(self.waiting.len());
        for (click, sent, at) in self.waiting.drain(..) {
            match discord.callbacks(click).first() {
                Some(callback) => {
                    if callback.latency > ACK_LIMIT {
                        self.missed += 1;
                    }
                    if callback.latency > SLOW_ACK {
                        self.slow.push((at, Some(callback.latency)));
                    }
                    self.acked.push(callback.latency);
                }
                None if sent.elapsed() > ACK_LIMIT => {
                    self.missed += 1;
                    self.slow.push((at, None));
                }
                None => still.push((click, sent, at)),
            }
        }
        self.waiting = still;
    }
}

/// What the clicking thread saw.
struct Driven {
    last_clicked: HashMap<u64, u64>,
    clicks: Clicks,
    measured: Clicks,
    cycles_at_warmup: u64,
    rss_at_warmup: f64,
    rss_samples: Vec<(f64, f64)>,
    /// Bytes written by the bot, the store's size and the bytes written to the store's disk
    /// (`None` on no block device, such as a tmpfs temporary folder), when the warm-up ended.
    disk_at_warmup: (u64, u64, Option<u64>),
}

/// Approves every new card as it appears, for the warm-up and then the measured seconds; clicks
/// after warm-up are the measured ones.
fn drive(
    discord: &FakeDiscord,
    threads: &[u64],
    (pid, data): (u32, &std::path::Path),
    warmup: u64,
    secs: u64,
) -> Driven {
    let mut driven = Driven {
        last_clicked: HashMap::new(),
        clicks: Clicks::default(),
        measured: Clicks::default(),
        cycles_at_warmup: 0,
        rss_at_warmup: f64::NAN,
        rss_samples: Vec::new(),
        disk_at_warmup: (0, 0, None),
    };
    let run_started = Instant::now();
    let total = Duration::from_secs(warmup + secs);
    let mut next_sample = Instant::now();
    while run_started.elapsed() < total {
        let warm = run_started.elapsed() >= Duration::from_secs(warmup);
        if warm && driven.rss_at_warmup.is_nan() {
            driven.rss_at_warmup = rss_mib(pid);
            driven.disk_at_warmup = (
                written_bytes(pid),
                store_bytes(data),
                device_bytes_written(data),
            );
            driven.cycles_at_warmup = driven.last_clicked.values().sum();
        }
        for thread in threads {
            let Some(card) = discord.newest_in(*thread) else {
                continue;
            };
            let Some(cycle) = cycle_of(&card) else {
                continue;
            };
            let id = approve_id(&card);
            if id.is_empty() || driven.last_clicked.get(thread).copied() >= Some(cycle) {
                continue;
            }
            driven.last_clicked.insert(*thread, cycle);
            let click = discord.click(ALICE, &[], &card, &id);
            let into = if warm {
                &mut driven.measured
            } else {
                &mut driven.clicks
            };
            into.waiting
                .push((click, Instant::now(), run_started.elapsed().as_secs_f64()));
        }
        driven.clicks.collect(discord);
        driven.measured.collect(discord);
        if Instant::now() >= next_sample {
            driven
                .rss_samples
                .push((run_started.elapsed().as_secs_f64(), rss_mib(pid)));
            next_sample += Duration::from_secs(10);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    driven
}

fn main() {
    let agents = setting("BENCH_AGENTS", 1000) as usize;
    let secs = setting("BENCH_SECS", 120);
    let warmup = setting("BENCH_WARMUP_SECS", 30);
    let model_ms = setting("BENCH_MODEL_MS", 200);
    let memory = setting("BENCH_MEMORY", 0) == 1;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let openai = FakeOpenAi::start(Expect::default()).await;
        openai.set_endless(Reply::Delay(
            Duration::from_millis(model_ms),
            Box::new(Reply::Content(agent_reply(
                "write_file",
                json!({"filename": "notes-{n}.txt", "contents": "one more line of notes"}),
            ))),
        ));
        let discord = FakeDiscord::start().await;
        // A soak of half an hour would otherwise keep every card and dispatch the fake ever saw,
        // about 170 KB a cycle: the harness filled this machine's memory after 15 minutes and the
        // bot, starved of it, answered late.
        discord.keep_history_bounded();
        // BENCH_CACHE_MB sets sled's page cache, to weigh memory against throughput, and
        // BENCH_FLUSH_WINDOW_MS the bot's flush window, to weigh a step's wait against the disk.
        let mut budget = "guild_calls_per_minute = 0\n\n[store]\n".to_string();
        for (variable, key) in [
            ("BENCH_CACHE_MB", "cache_mb"),
            ("BENCH_FLUSH_WINDOW_MS", "flush_window_ms"),
        ] {
            if let Ok(value) = std::env::var(variable) {
                budget.push_str(&format!("{key} = {value}\n"));
            }
        }
        let budget = budget.as_str();
        let env = if memory {
            TestEnv::with_memory(&openai.base_url, budget)
        } else {
            TestEnv::with_budget(&openai.base_url, "timeout_secs = 60\n", budget)
        };
        let bot = start_unlimited_bot(&env, &discord).await;
        let pid = bot.pid();
        let started = Instant::now();
        let mut threads: Vec<u64> = Vec::with_capacity(agents);
        // Started in batches, as people would, rather than 1,000 slash commands in one instant.
        for batch in (0..agents).collect::<Vec<_>>().chunks(100) {
            threads.extend(
                start_agents(&discord, batch.len())
                    .await
                    .into_iter()
                    .map(|(thread, _)| thread),
            );
        }
        println!(
            "{agents} agents started in {:.1} s ({} ms model, memory {})",
            started.elapsed().as_secs_f64(),
            model_ms,
            if memory { "on" } else { "off" }
        );

        // The clicking runs on its own thread: a pass over 1,000 threads on the runtime that
        // serves the fakes would hold up their answers and be counted as the bot's latency.
        let driver = {
            let discord = discord.clone();
            let data = env.data_dir();
            std::thread::spawn(move || drive(&discord, &threads, (pid, &data), warmup, secs))
        };
        let Driven {
            last_clicked,
            clicks: _,
            mut measured,
            cycles_at_warmup,
            rss_at_warmup,
            rss_samples,
            disk_at_warmup,
        } = tokio::task::spawn_blocking(move || driver.join().expect("the driver"))
            .await
            .expect("the driver");
        // The clicks still waiting get their chance to be answered.
        tokio::time::sleep(ACK_LIMIT).await;
        measured.collect(&discord);
        let all_cycles = last_clicked.values().sum::<u64>();
        let cycles_run = all_cycles - cycles_at_warmup;
        let rss_end = rss_mib(pid);
        let (written_end, store_end, device_end) = (
            written_bytes(pid),
            store_bytes(&env.data_dir()),
            device_bytes_written(&env.data_dir()),
        );
        if measured.acked.is_empty() {
            panic!("no click was acknowledged after warm-up");
        }
        println!(
            "{} clicks in {secs} s after {warmup} s of warm-up: ack p50 {}  p99 {}  max {}; {} missed Discord's 3 s",
            measured.acked.len() + measured.missed,
            ms(percentile(&measured.acked, 0.5)),
            ms(percentile(&measured.acked, 0.99)),
            ms(percentile(&measured.acked, 1.0)),
            measured.missed
        );
        println!(
            "{cycles_run} cycles ({:.1} per second, {:.1} per agent per minute)",
            cycles_run as f64 / secs as f64,
            cycles_run as f64 / agents as f64 / (secs as f64 / 60.0)
        );
        println!(
            "bot RSS {rss_at_warmup:.1} MiB after warm-up, {rss_end:.1} MiB at the end ({:+.1}%): {:.3} MiB per agent, {:+.2} MiB per 1,000 cycles",
            (rss_end / rss_at_warmup - 1.0) * 100.0,
            rss_end / agents as f64,
            (rss_end - rss_at_warmup) / (cycles_run.max(1) as f64 / 1000.0)
        );
        // The bot's memory moves with sled's segment buffers, so one reading at each end can
        // land on a peak or a trough: the whole range after warm-up is the figure to judge.
        let after_warmup: Vec<f64> = rss_samples
            .iter()
            .filter(|(at, _)| *at >= warmup as f64)
            .map(|(_, mib)| *mib)
            .collect();
        if !after_warmup.is_empty() {
            let (low, high) = after_warmup
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), m| (lo.min(*m), hi.max(*m)));
            let mean = after_warmup.iter().sum::<f64>() / after_warmup.len() as f64;
            println!(
                "bot RSS after warm-up, {} readings 10 s apart: {low:.1} to {high:.1} MiB ({:+.1}% to {:+.1}% of the reading at warm-up), mean {mean:.1}",
                after_warmup.len(),
                (low / rss_at_warmup - 1.0) * 100.0,
                (high / rss_at_warmup - 1.0) * 100.0,
            );
        }
        // Slow acknowledgements by the ten seconds of the run they fell in: a stall shows as one
        // crowded window, a tail as many thin ones.
        let mut windows: std::collections::BTreeMap<u64, (usize, usize, Duration)> =
            std::collections::BTreeMap::new();
        for (at, latency) in &measured.slow {
            let window = windows.entry(*at as u64 / 10 * 10).or_default();
            match latency {
                Some(latency) => {
                    window.0 += 1;
                    window.2 = window.2.max(*latency);
                }
                None => window.1 += 1,
            }
        }
        let shown: Vec<String> = windows
            .iter()
            .map(|(at, (slow, unanswered, worst))| {
                format!("{at}s: {slow} slow (worst {}), {unanswered} unanswered", ms(*worst))
            })
            .collect();
        println!(
            "acks over {} s or none, by 10 s of the run: {}",
            SLOW_ACK.as_secs(),
            if shown.is_empty() { "none".to_string() } else { shown.join("; ") }
        );
        let per_cycle = |bytes: u64| bytes as f64 / cycles_run.max(1) as f64 / 1024.0;
        // The process's count is in whole page-cache folios (see `device_bytes_written`); the
        // disk's is what reached it, from every writer on the machine.
        let to_the_disk = match (disk_at_warmup.2, device_end) {
            (Some(before), Some(after)) => format!(
                "{:.1} KB written to the disk a cycle",
                per_cycle(after.saturating_sub(before))
            ),
            _ => "the store's disk not counted (no block device)".to_string(),
        };
        println!(
            "bot disk after warm-up: {to_the_disk} ({:.1} KB in the bot's write_bytes, which \
             counts whole page-cache folios) and the store grown by {:.1} KB a cycle; store \
             {:.0} MiB at the end",
            per_cycle(written_end.saturating_sub(disk_at_warmup.0)),
            per_cycle(store_end.saturating_sub(disk_at_warmup.1)),
            store_end as f64 / (1 << 20) as f64
        );
        let trace: Vec<String> = rss_samples
            .iter()
            .map(|(at, mib)| format!("{at:.0}s {mib:.0}"))
            .collect();
        println!("bot RSS over the run (MiB): {}", trace.join(", "));
        let violations = discord.errors();
        println!("fake Discord violations: {}", violations.len());
        // What they were, not only how many: the first few and the last.
        let shown = violations
            .iter()
            .take(5)
            .chain(violations.iter().skip(5).last());
        for violation in shown {
            println!("  {violation}");
        }
        // Stopped as a deploy stops it, so the bot logs what it did to the disk over the run.
        bot.terminate();
        let (_, _, log) = bot.finish(Duration::from_secs(90)).await;
        match support::durable_flushes(&log) {
            Some(flushes) => println!(
                "{flushes} durable flushes for {all_cycles} cycles with warm-up: {:.2} a cycle",
                flushes as f64 / all_cycles.max(1) as f64
            ),
            None => println!("the bot logged no disk report when it stopped"),
        }
    });
}
