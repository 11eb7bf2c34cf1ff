//! Vector search benchmark (`cargo bench --bench memory`): on seeded clustered 384-d unit vectors,
//! build time, single-thread query latency and QPS at recall@10 ≥ 0.95 (with the ef that reaches
//! it) and memory, for hnsw_rs (SIMD) and exact search; the size where the graph starts to beat
//! exact search; and hnswlib on the same files in the same run (benches/hnswlib_compare.py).
//!
//! First, a cold start: one agent of BENCH_COLD_START memories (100,000 by default, 0 skips it)
//! stored through the memory service, then the time from opening the store to the first search,
//! with the graph built from the store and loaded from its saved files (`-- cold` stops there).
//!
//! BENCH_SIZES=10000,100000 by default; add 1000000 when there is time (the graph build takes
//! minutes). BENCH_SKIP_HNSWLIB=1 skips the Python side.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark stops at the first failure.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use std::sync::Arc;

use autothread::budget::Budgets;
use autothread::config::Config;
use autothread::core::budget::Micros;
use autothread::core::memory::MemorySource;
use autothread::core::state::Spender;
use autothread::llm::embed::{EmbedPurpose, Embedded, Embedder};
use autothread::llm::tokens::TiktokenCounter;
use autothread::llm::LlmError;
use autothread::memory::index::{clustered_unit_vectors, GraphOrigin, HnswParams, VectorIndex};
use autothread::memory::{Memory, Payer};
use autothread::store::Store;
use serde_json::Value;

const DIM: usize = 384;
const K: usize = 10;
const QUERIES: usize = 300;
const TARGET_RECALL: f64 = 0.95;
const EFS: &[usize] = &[10, 16, 24, 32, 48, 64, 96, 128, 256];
const PARAMS: HnswParams = HnswParams {
    m: 16,
    ef_construction: 200,
    ef_search: 64,
};

fn rss_kib() -> u64 {
    autothread::ops::proc_counters::proc_counter("self", "status", "VmRSS:").unwrap_or(0)
}

struct Run {
    ef: usize,
    recall: f64,
    p50: Duration,
    p99: Duration,
    qps: f64,
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

/// Queries one at a time on this thread; recall against `truth`.
fn measure(
    search: impl Fn(&[f32]) -> Vec<u64>,
    queries: &[Vec<f32>],
    truth: &[Vec<u64>],
    ef: usize,
) -> Run {
    let mut samples = Vec::with_capacity(queries.len());
    let mut found = 0;
    let started = Instant::now();
    for (query, want) in queries.iter().zip(truth) {
        let t = Instant::now();
        let got = search(query);
        samples.push(t.elapsed());
        let want: HashSet<&u64> = want.iter().collect();
        found += got.iter().filter(|id| want.contains(id)).count();
    }
    let total = started.elapsed();
    Run {
        ef,
        recall: found as f64 / (queries.len() * K) as f64,
        p50: percentile(&mut samples, 0.5),
        p99: percentile(&mut samples, 0.99),
        qps: queries.len() as f64 / total.as_secs_f64(),
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn write_f32(path: &Path, rows: &[Vec<f32>]) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    for row in rows {
        for x in row {
            file.write_all(&x.to_le_bytes()).expect("write");
        }
    }
}

fn write_u32(path: &Path, rows: &[Vec<u64>]) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    for row in rows {
        for id in row {
            file.write_all(&(*id as u32).to_le_bytes()).expect("write");
        }
    }
}

/// Runs the hnswlib script on the same files; `None` (with the reason printed) when it cannot run.
fn hnswlib(dir: &Path, n: usize) -> Option<Value> {
    if std::env::var("BENCH_SKIP_HNSWLIB").is_ok() {
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = root.join("target/bench-venv/bin/python");
    if !venv.exists() {
        eprintln!("  preparing hnswlib in target/bench-venv (once; about a minute)...");
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(root.join("target/bench-venv"))
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(root.join("target/bench-venv/bin/pip"))
                .args(["install", "-q", "hnswlib", "numpy"])
                .status()
                .is_ok_and(|s| s.success());
        if !made {
            println!(
                "  hnswlib: skipped (could not install hnswlib and numpy into target/bench-venv)"
            );
            return None;
        }
    }
    let efs = EFS
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let output = Command::new(&venv)
        .arg(root.join("benches/hnswlib_compare.py"))
        .arg("--data")
        .arg(dir.join("data.f32"))
        .arg("--queries")
        .arg(dir.join("queries.f32"))
        .arg("--truth")
        .arg(dir.join("truth.u32"))
        .args(["--dim", &DIM.to_string(), "--k", &K.to_string()])
        .args(["--m", &PARAMS.m.to_string()])
        .args(["--ef-construction", &PARAMS.ef_construction.to_string()])
        .args(["--efs", &efs, "--threads", "2"])
        .output()
        .ok()?;
    if !output.status.success() {
        println!(
            "  hnswlib: failed at n={n}: {}",
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return None;
    }
    serde_json::from_slice(&output.stdout).ok()
}

fn first_at_target(runs: &[Run]) -> Option<&Run> {
    runs.iter().find(|r| r.recall >= TARGET_RECALL)
}

fn size(n: usize) {
    println!(
        "\n== {n} vectors, {DIM} dimensions, {QUERIES} queries, k={K}, M={}, ef_construction={} ==",
        PARAMS.m, PARAMS.ef_construction
    );
    let data = clustered_unit_vectors(n, DIM, 1);
    let queries = clustered_unit_vectors(QUERIES, DIM, 2);
    let items: Vec<(u64, Vec<f32>)> = data
        .iter()
        .enumerate()
        .map(|(i, v)| (i as u64, v.clone()))
        .collect();
    let none = HashSet::new();

    let before = rss_kib();
    let exact = VectorIndex::build(DIM, items.clone(), PARAMS, usize::MAX);
    let exact_kib = rss_kib().saturating_sub(before);
    let truth: Vec<Vec<u64>> = queries
        .iter()
        .map(|q| exact.exact(q, K, &none).iter().map(|s| s.id).collect())
        .collect();
    let exact_run = measure(
        |q| exact.exact(q, K, &none).iter().map(|s| s.id).collect(),
        &queries,
        &truth,
        0,
    );
    println!(
        "exact    : p50 {:>8.1} µs  p99 {:>8.1} µs  {:>8.0} QPS  recall 1.000  memory {} MiB",
        us(exact_run.p50),
        us(exact_run.p99),
        exact_run.qps,
        exact_kib / 1024
    );
    drop(exact);

    let before = rss_kib();
    let started = Instant::now();
    let mut graph = VectorIndex::build(DIM, items, PARAMS, 0);
    let build = started.elapsed();
    let graph_kib = rss_kib().saturating_sub(before);
    println!(
        "hnsw_rs  : build {:.1} s ({:.0} inserts/s, 2 threads), memory {} MiB (vectors {} MiB + graph)",
        build.as_secs_f64(),
        n as f64 / build.as_secs_f64(),
        graph_kib / 1024,
        graph.vector_bytes() / (1024 * 1024)
    );
    let mut runs = Vec::new();
    for &ef in EFS {
        graph.set_ef_search(ef);
        let run = measure(
            |q| graph.search(q, K, &none).iter().map(|s| s.id).collect(),
            &queries,
            &truth,
            ef,
        );
        println!(
            "  ef {:>3}: recall {:.3}  p50 {:>7.1} µs  p99 {:>7.1} µs  {:>7.0} QPS",
            run.ef,
            run.recall,
            us(run.p50),
            us(run.p99),
            run.qps
        );
        runs.push(run);
    }
    let ours = first_at_target(&runs);

    let dir = tempfile::tempdir().expect("temp dir");
    write_f32(&dir.path().join("data.f32"), &data);
    write_f32(&dir.path().join("queries.f32"), &queries);
    write_u32(&dir.path().join("truth.u32"), &truth);
    drop(data);
    if let Some(result) = hnswlib(dir.path(), n) {
        println!(
            "hnswlib {}: build {:.1} s (2 threads), index {} MiB",
            result["version"].as_str().unwrap_or("?"),
            result["build_seconds"].as_f64().unwrap_or(0.0),
            result["index_bytes"].as_u64().unwrap_or(0) / (1024 * 1024)
        );
        let theirs: Vec<Run> = result["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| Run {
                ef: r["ef"].as_u64().unwrap_or(0) as usize,
                recall: r["recall"].as_f64().unwrap_or(0.0),
                p50: Duration::from_secs_f64(r["p50_us"].as_f64().unwrap_or(0.0) / 1e6),
                p99: Duration::from_secs_f64(r["p99_us"].as_f64().unwrap_or(0.0) / 1e6),
                qps: r["qps"].as_f64().unwrap_or(0.0),
            })
            .collect();
        for run in &theirs {
            println!(
                "  ef {:>3}: recall {:.3}  p50 {:>7.1} µs  p99 {:>7.1} µs  {:>7.0} QPS",
                run.ef,
                run.recall,
                us(run.p50),
                us(run.p99),
                run.qps
            );
        }
        if let (Some(a), Some(b)) = (ours, first_at_target(&theirs)) {
            println!(
                "at recall@10 ≥ {TARGET_RECALL}: hnsw_rs ef {} {:.0} QPS (recall {:.3}) vs hnswlib ef {} {:.0} QPS (recall {:.3}): ratio {:.2}×",
                a.ef, a.qps, a.recall, b.ef, b.qps, b.recall, a.qps / b.qps
            );
        }
    }
    if let Some(a) = ours {
        println!(
            "hnsw_rs at recall ≥ {TARGET_RECALL}: ef {}, {:.0} QPS vs exact {:.0} QPS",
            a.ef, a.qps, exact_run.qps
        );
    }
}

/// Exact search against the graph at the ef that reaches the target, at growing sizes.
fn crossover() {
    println!("\n== crossover: single-thread p50 per query, exact vs hnsw_rs at recall@10 ≥ {TARGET_RECALL} ==");
    let none = HashSet::new();
    let queries = clustered_unit_vectors(200, DIM, 4);
    for n in [500usize, 1_000, 2_000, 5_000, 10_000, 20_000] {
        let items: Vec<(u64, Vec<f32>)> = clustered_unit_vectors(n, DIM, 3)
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i as u64, v))
            .collect();
        let mut index = VectorIndex::build(DIM, items, PARAMS, 0);
        let truth: Vec<Vec<u64>> = queries
            .iter()
            .map(|q| index.exact(q, K, &none).iter().map(|s| s.id).collect())
            .collect();
        let exact = measure(
            |q| index.exact(q, K, &none).iter().map(|s| s.id).collect(),
            &queries,
            &truth,
            0,
        );
        let mut graph = None;
        for &ef in EFS {
            index.set_ef_search(ef);
            let run = measure(
                |q| index.search(q, K, &none).iter().map(|s| s.id).collect(),
                &queries,
                &truth,
                ef,
            );
            if run.recall >= TARGET_RECALL {
                graph = Some(run);
                break;
            }
        }
        match graph {
            Some(g) => println!(
                "  {n:>6}: exact {:>7.1} µs   hnsw_rs {:>7.1} µs (ef {}, recall {:.3})   {}",
                us(exact.p50),
                us(g.p50),
                g.ef,
                g.recall,
                if g.p50 < exact.p50 {
                    "graph faster"
                } else {
                    "exact faster"
                }
            ),
            None => println!(
                "  {n:>6}: exact {:>7.1} µs   hnsw_rs never reached the target",
                us(exact.p50)
            ),
        }
    }
}

/// Embeds "m<i>" as the i-th of a fixed set of clustered vectors, so memories can be stored
/// through the real memory service without a model.
struct TableEmbedder {
    table: Vec<Vec<f32>>,
}

#[async_trait::async_trait]
impl Embedder for TableEmbedder {
    fn model(&self, _purpose: EmbedPurpose) -> &str {
        "table"
    }

    async fn embed(&self, texts: &[String], _purpose: EmbedPurpose) -> Result<Embedded, LlmError> {
        let vectors = texts
            .iter()
            .map(|t| {
                let i: usize = t.trim_start_matches('m').parse().unwrap_or(0);
                self.table[i % self.table.len()].clone()
            })
            .collect();
        Ok(Embedded {
            vectors,
            prompt_tokens: Some(texts.len() as u64),
        })
    }
}

fn memory_service(dir: &Path, table: &Arc<TableEmbedder>) -> (Store, Memory) {
    let store = Store::open(dir).unwrap();
    let mut config = Config::default();
    config.budget.free_models = vec!["table".into()];
    config.memory.hnsw_m = PARAMS.m;
    config.memory.hnsw_ef_construction = PARAMS.ef_construction;
    let budgets = Arc::new(Budgets::new(&store, &config.budget).unwrap());
    let memory = Memory::new(
        &store,
        table.clone(),
        budgets,
        Arc::new(TiktokenCounter::for_model("gpt-4o-mini")),
        &config.memory,
    )
    .unwrap();
    (store, memory)
}

/// A restart with one agent of `n` memories: the time from opening the store to the first
/// search's answer, once with the graph built from the store (as before saved graphs) and once
/// loaded from its saved files.
fn cold_start(n: usize) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // BENCH_COLD_DIR keeps the store between runs, to time the start again without storing.
    let kept = std::env::var("BENCH_COLD_DIR")
        .ok()
        .map(std::path::PathBuf::from);
    let path = kept.clone().unwrap_or_else(|| dir.path().to_path_buf());
    let reuse = kept.is_some() && path.join("hnsw").exists();
    let table = Arc::new(TableEmbedder {
        table: clustered_unit_vectors(n, DIM, 11),
    });
    let payer = Payer {
        agent: "big".into(),
        spender: Spender {
            user: Some("u".into()),
            guild: Some("g".into()),
        },
        agent_limit: Micros(u64::MAX / 4),
    };
    let started = Instant::now();
    runtime.block_on(async {
        if reuse {
            return;
        }
        let (_store, memory) = memory_service(&path, &table);
        for i in 0..n {
            memory
                .remember(&payer, i as u64, MemorySource::Cycle, &format!("m{i}"))
                .await
                .unwrap();
        }
    });
    println!(
        "cold start: {n} memories of {DIM} dimensions stored in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The first search is answered from the stored vectors at once; the graph comes after.
    let restart = |expected: GraphOrigin| {
        let started = Instant::now();
        let (first, graph) = runtime.block_on(async {
            let (_store, memory) = memory_service(&path, &table);
            let hits = memory.search(&payer, "m5", 10).await.unwrap();
            assert_eq!(hits.len(), 10);
            let first = started.elapsed().as_secs_f64();
            let origin = loop {
                if let Some(origin) = memory.graph_origin("big") {
                    break origin;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            assert_eq!(origin, expected);
            (first, started.elapsed().as_secs_f64())
        });
        println!(
            "cold start, graph {expected:?}: first search answered {first:.2} s after opening \
             the store, graph searched from {graph:.2} s"
        );
    };
    if !reuse {
        std::fs::remove_dir_all(path.join("hnsw")).ok();
        restart(GraphOrigin::Built);
        // The built graph is saved in the background: wait for it before the next start.
        while !std::fs::read_dir(path.join("hnsw"))
            .map(|mut d| d.any(|e| e.unwrap().path().join("manifest.json").exists()))
            .unwrap_or(false)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    restart(GraphOrigin::Loaded);
    let saved: u64 = std::fs::read_dir(path.join("hnsw"))
        .unwrap()
        .flat_map(|agent| std::fs::read_dir(agent.unwrap().path()).unwrap())
        .map(|file| file.unwrap().metadata().unwrap().len())
        .sum();
    println!(
        "cold start: the saved graph takes {:.0} MiB on disk",
        saved as f64 / (1024.0 * 1024.0)
    );
}

fn main() {
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let cold: usize = std::env::var("BENCH_COLD_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    if cold > 0 {
        cold_start(cold);
        if std::env::args().any(|a| a == "cold") {
            return;
        }
    }
    crossover();
    for n in sizes {
        size(n);
    }
}
