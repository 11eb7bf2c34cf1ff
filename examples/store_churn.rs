//! Measures sled alone under a store's write pattern: bytes written (the process's `write_bytes`
//! and the disk's own count), disk kept and memory per cycle, so the store's figures can be told
//! apart from sled's own.
//!
//! `cargo run --release --example store_churn`. Settings come from the environment: `AGENTS`
//! (300), `CYCLES` (30,000), `RATE` (350 cycles a second, about the bot's with 300 agents; 0 runs
//! as fast as sled goes, which writes far less a cycle, so a figure taken unpaced says little
//! about the bot), `THREADS` (4), `CACHE_MB` (8, sled's page cache), `FLUSH` (1: flush, 0: never)
//! and `FLUSH_EVERY` (8: a flush after every eighth write of the first tree, about the bot's 0.37
//! flushes a cycle), `FLUSHER_MS` (500: how often sled's own thread flushes, and then reclaims
//! segments; 0: never), `SEGMENT_KB` (8192), `COLD_DB` (1: the `cold` and `seq` writes go to a
//! second database with a log of its own, flushed with the first) and `SPEC`, a comma list of
//! `tree:bytes:count:kind` written each cycle, where kind is `hot` (one key per agent,
//! overwritten), `temp` (inserted, then removed), `cold` (a key per agent and cycle, so each
//! agent's newest records sit together at the end of its range), `seq` (a key rising across all
//! agents, as the ledger's ids do) or `swap` (a key per cycle, removed by its last write). The
//! default is what a Discord cycle of the load bench writes, measured from the store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};

use autothread::ops::proc_counters::{device_bytes_written, proc_counter};

const DISCORD_CYCLE: &str = "agents:950:3:hot,ahead:370:2:temp,audit:236:1:cold,\
    episodes:250:1:cold,journal:130:2:swap,decisions:90:1:temp,reservations:200:1:seq,\
    settlements:18:1:seq,workspace:50:1:cold,undo:37:1:cold";

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
    let cycles = setting("CYCLES", 30_000);
    let threads = setting("THREADS", 4);
    let flush = setting("FLUSH", 1) == 1;
    let flush_every = setting("FLUSH_EVERY", 8).max(1);
    let rate = setting("RATE", 350);
    let first_tree_writes = AtomicU64::new(0);
    let open = |path: std::path::PathBuf| {
        sled::Config::new()
            .path(path)
            .cache_capacity(setting("CACHE_MB", 8) << 20)
            .segment_size(setting("SEGMENT_KB", 8192) as usize * 1024)
            .flush_every_ms(Some(setting("FLUSHER_MS", 500)).filter(|ms| *ms > 0))
            .open()
            .unwrap()
    };
    let db = open(dir.path().to_path_buf());
    let cold_db = (setting("COLD_DB", 0) == 1).then(|| open(dir.path().join("cold")));
    // Flushes the second database with the first, as one durable point would.
    let flush_all = || {
        db.flush().unwrap();
        if let Some(cold) = &cold_db {
            cold.flush().unwrap();
        }
    };
    let spec = std::env::var("SPEC").unwrap_or_else(|_| DISCORD_CYCLE.to_string());
    let writes: Vec<Write> = spec
        .split(',')
        .map(|part| {
            let fields: Vec<&str> = part.trim().split(':').collect();
            Write {
                tree: match &cold_db {
                    Some(cold) if fields[3] == "cold" || fields[3] == "seq" => {
                        cold.open_tree(fields[0]).unwrap()
                    }
                    _ => db.open_tree(fields[0]).unwrap(),
                },
                bytes: fields[1].parse().unwrap(),
                count: fields[2].parse().unwrap(),
                kind: fields[3].to_string(),
            }
        })
        .collect();
    let disk_written = || device_bytes_written(dir.path()).expect("a store on a block device");
    let (written_before, disk_before, rss_before) = (
        proc_field("io", "write_bytes:"),
        disk_written(),
        proc_field("status", "VmRSS:"),
    );
    let (next, logical) = (AtomicU64::new(0), AtomicU64::new(0));
    let started = std::time::Instant::now();
    // RSS halfway through: the second half shows growth once sled's cache and buffers are full.
    let rss_halfway = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n == cycles / 2 {
                    rss_halfway.store(proc_field("status", "VmRSS:"), Ordering::Relaxed);
                }
                if n >= cycles {
                    break;
                }
                if rate > 0 {
                    // Paced like the bot, whose cycles wait on the model: sled's background
                    // work then runs between writes as it does there.
                    let due = std::time::Duration::from_secs_f64(n as f64 / rate as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
                let (agent, cycle) = (n % agents, n / agents);
                for (at, write) in writes.iter().enumerate() {
                    for round in 0..write.count {
                        let mut key = format!("agent-{agent:06}/").into_bytes();
                        match write.kind.as_str() {
                            "hot" => {}
                            "temp" => key = db.generate_id().unwrap().to_be_bytes().to_vec(),
                            "seq" => key = n.to_be_bytes().to_vec(),
                            _ => {
                                // Which write of the cycle it is, so that writes of one cycle
                                // to one tree are records of their own.
                                key.extend_from_slice(&cycle.to_be_bytes());
                                key.push(at as u8);
                            }
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
                        if flush
                            && at == 0
                            && first_tree_writes
                                .fetch_add(1, Ordering::Relaxed)
                                .is_multiple_of(flush_every)
                        {
                            flush_all();
                        }
                    }
                }
            });
        }
    });
    // What sled still holds in its buffers reaches the disk before the disk is read.
    flush_all();
    let per_cycle = |bytes: u64| bytes as f64 / cycles as f64 / 1024.0;
    let kept = db.size_on_disk().unwrap() + cold_db.map_or(0, |cold| cold.size_on_disk().unwrap());
    println!(
        "{cycles} cycles of {agents} agents in {:.1} s: {:.1} KB written ({:.1} KB counted in \
         write_bytes), {:.2} KB of records, {:.1} KB kept on disk a cycle; RSS {:+.0} bytes a \
         cycle, {:+.0} over the second half",
        started.elapsed().as_secs_f64(),
        per_cycle(disk_written() - disk_before),
        per_cycle(proc_field("io", "write_bytes:") - written_before),
        per_cycle(logical.load(Ordering::Relaxed)),
        per_cycle(kept),
        (proc_field("status", "VmRSS:") as f64 - rss_before as f64) * 1024.0 / cycles as f64,
        (proc_field("status", "VmRSS:") as f64 - rss_halfway.load(Ordering::Relaxed) as f64)
            * 1024.0
            / (cycles - cycles / 2) as f64,
    );
}
