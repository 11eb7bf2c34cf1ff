//! Benchmark (prints figures; not a test): the code sandbox's overhead per run (p50 and p99 of a
//! trivial `print`, against the same interpreter started without the sandbox), and for each
//! hostile program, which limit ended it and when.
//!
//! Run with `cargo bench --bench sandbox`; `BENCH_RUNS` sets the number of trivial runs (200),
//! `BENCH_HOSTILE=0` skips the hostile programs (which take about four minutes).
#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark stops at the first failure.

use std::time::{Duration, Instant};

use autothread::config::{SandboxConfig, WorkspaceConfig};
use autothread::sandbox::{Program, Sandbox};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // `cargo test --benches` passes --bench-free flags; only run when asked for a benchmark.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let config = SandboxConfig::default();
    // The bare interpreter first, the one the sandbox finds (the first python3 of its own PATH),
    // started the same way, before anything of the sandbox exists in this process.
    let python = ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .map(|dir| std::path::Path::new(dir).join(&config.python))
        .find(|path| path.is_file())
        .expect("python3 in /usr/local/bin, /usr/bin or /bin");
    let mut plain = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let out = std::process::Command::new(&python)
            .args(["-I", "-B", "-c", "print(1)"])
            .output()
            .unwrap();
        plain.push(started.elapsed());
        assert!(out.status.success());
    }
    let sandbox = Sandbox::probe(&config).unwrap_or_else(|why| panic!("no sandbox here: {why}"));
    println!("sandbox: {}", sandbox.describe());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let workspace = WorkspaceConfig::default();
    let trivial = Program::Python {
        code: "print(1)".into(),
    };
    let mut sandboxed = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let ran = runtime
            .block_on(sandbox.run(&trivial, Vec::new(), &workspace))
            .unwrap();
        sandboxed.push(started.elapsed());
        assert!(ran.succeeded() && ran.stdout.trim() == "1", "{ran:?}");
    }
    sandboxed.sort();
    plain.sort();
    let (p50, p99) = (percentile(&sandboxed, 0.5), percentile(&sandboxed, 0.99));
    let (plain50, plain99) = (percentile(&plain, 0.5), percentile(&plain, 0.99));
    println!(
        "trivial print, {runs} runs each: sandboxed p50 {:.1} ms p99 {:.1} ms; unsandboxed p50 {:.1} ms p99 {:.1} ms; overhead p50 {:.1} ms p99 {:.1} ms",
        ms(p50),
        ms(p99),
        ms(plain50),
        ms(plain99),
        ms(p50.saturating_sub(plain50)),
        ms(p99.saturating_sub(plain99)),
    );
    if std::env::var("BENCH_HOSTILE").is_ok_and(|v| v == "0") {
        return;
    }
    let limits = sandbox.limits().clone();
    let hostile: &[(&str, &str)] = &[
        ("endless loop", "while True:\n    pass"),
        ("sleep forever", "import time\ntime.sleep(3600)"),
        ("memory hog (2 GiB)", "b = bytearray(2 * 1024 ** 3)"),
        (
            "8 processes of 800 MB",
            "import os, time\nfor _ in range(8):\n    if os.fork() == 0:\n        b = b'\\x01' * (800 * 1000 * 1000)\n        time.sleep(60)\n        os._exit(0)\nfor _ in range(8):\n    os.wait()",
        ),
        (
            "4 processes spinning",
            "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass",
        ),
        (
            "fork bomb",
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        ),
        ("100 MB of output", "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1000000)"),
        (
            "a 32 MiB file",
            "f = open('big', 'wb')\nfor _ in range(32):\n    f.write(b'0' * (1 << 20))",
        ),
        (
            "connect to 127.0.0.1:22",
            "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)",
        ),
        ("read /etc/shadow", "print(open('/etc/shadow').read())"),
    ];
    for (name, code) in hostile {
        let ran = runtime
            .block_on(sandbox.run(
                &Program::Python {
                    code: code.to_string(),
                },
                Vec::new(),
                &workspace,
            ))
            .unwrap();
        let how = ran.limit_hit(&limits).unwrap_or_else(|| {
            let last_error = ran.stderr.trim().lines().last().unwrap_or("").to_string();
            format!("exit {:?}: {last_error}", ran.code)
        });
        // What the run's cgroup measured, where it had one.
        let measured = ran.usage.map_or(String::new(), |u| {
            format!(
                " [cgroup: {:.2} s CPU, peak {} MiB, {} OOM kill(s), {} fork(s) refused]",
                u.cpu.as_secs_f64(),
                u.memory_peak.unwrap_or(0) >> 20,
                u.oom_kills,
                u.forks_refused
            )
        });
        println!(
            "  {name}: ended after {:.2} s; {how}{measured}",
            ran.elapsed.as_secs_f64()
        );
    }
}
