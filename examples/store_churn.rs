//! Measures sled alone under a store's write pattern: bytes written (`/proc/self/io`), disk kept
//! and memory per cycle, so the store's figures can be told apart from sled's own.
//!
//! `cargo run --release --example store_churn`. Settings come from the environment: `AGENTS`
//! (300), `CYCLES` (100,000), `THREADS` (4), `CACHE_MB` (8, sled's page cache), `FLUSH` (1: flush
//! after each write of the first tree, as the bot flushed after each write of an agent's state;
//! 0: never), `SEGMENT_KB` (8192) and `SPEC`, a comma list of `tree:bytes:count:kind` written each
//! cycle, where kind is `hot` (one key per agent, overwritten), `temp` (inserted, then removed),
//! `cold` (a key per cycle; a second write overwrites it) or `swap` (a key per cycle, removed by
//! its last write). The default is what a Discord cycle of the load bench writes, measured from
//! the store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};

use autothread::ops::proc_counters::proc_counter;

const DISCORD_CYCLE: &str = "agents:950:3:hot,ahead:370:2:temp,audit:236:1:cold,\
    episodes:250:1:cold,journal:130:2:swap,decisions:90:1:cold,reservations:200:1:cold,\
    settlements:18:1:cold,workspace:50:1:cold,undo:37:1:cold";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Bytes that do not compress, as the store's packed records barely do.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A counter of this process from `/proc/self`; the example needs Linux.
fn proc_field(file: &str, field: &str) -> u64 {
    proc_counter("self", file, field).expect("a Linux /proc counter")
}

struct Write {
    tree: sled::Tree,
    bytes: usize,
    count: u64,
    kind: String,
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let agents = setting("AGENTS", 300);
    let cycles = setting("CYCLES", 100_000);
    let threads = setting("THREADS", 4);
    let flush = setting("FLUSH", 1) == 1;
    let db = sled::Config::new()
        .path(dir.path())
        .cache_capacity(setting("CACHE_MB", 8) << 20)
        .segment_size(setting("SEGMENT_KB", 8192) as usize * 1024)
        .open()
        .unwrap();
    let spec = std::env::var("SPEC").unwrap_or_else(|_| DISCORD_CYCLE.to_string());
    let writes: Vec<Write> = spec
        .split(',')
        .map(|part| {
            let fields: Vec<&str> = part.trim().split(':').collect();
            Write {
                tree: db.open_tree(fields[0]).unwrap(),
                bytes: fields[1].parse().unwrap(),
                count: fields[2].parse().unwrap(),
                kind: fields[3].to_string(),
            }
        })
        .collect();
    let (written_before, rss_before) = (
        proc_field("io", "write_bytes:"),
        proc_field("status", "VmRSS:"),
    );
    let (next, logical) = (AtomicU64::new(0), AtomicU64::new(0));
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= cycles {
                    break;
                }
                let (agent, cycle) = (n % agents, n / agents);
                for (at, write) in writes.iter().enumerate() {
                    for round in 0..write.count {
                        let mut key = format!("agent-{agent:06}/").into_bytes();
                        match write.kind.as_str() {
                            "hot" => {}
                            "temp" => key = db.generate_id().unwrap().to_be_bytes().to_vec(),
                            _ => key.extend_from_slice(&cycle.to_be_bytes()),
                        }
                        logical.fetch_add((key.len() + write.bytes) as u64, Ordering::Relaxed);
                        if write.kind == "swap" && round + 1 == write.count {
                            write.tree.remove(&key).unwrap();
                        } else {
                            let value = noise(n * 31 + at as u64 * 7 + round, write.bytes);
                            write.tree.insert(&key, value).unwrap();
                        }
                        if write.kind == "temp" {
                            write.tree.remove(&key).unwrap();
                        }
                        if flush && at == 0 {
                            db.flush().unwrap();
                        }
                    }
                }
            });
        }
    });
    let per_cycle = |bytes: u64| bytes as f64 / cycles as f64 / 1024.0;
    println!(
        "{cycles} cycles of {agents} agents in {:.1} s: {:.1} KB written, {:.2} KB of records, \
         {:.1} KB kept on disk a cycle; RSS {:+.0} bytes a cycle",
        started.elapsed().as_secs_f64(),
        per_cycle(proc_field("io", "write_bytes:") - written_before),
        per_cycle(logical.load(Ordering::Relaxed)),
        per_cycle(db.size_on_disk().unwrap()),
        (proc_field("status", "VmRSS:") as f64 - rss_before as f64) * 1024.0 / cycles as f64,
    );
}
