//! Checks the architecture mechanically: the core does no I/O and names nothing outside itself,
//! time is read only through the clock seam, and the top-level modules import each other
//! without a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What the core may not name: the crates and std modules that reach outside the process, the
/// clock, randomness, printing and logging.
const FORBIDDEN_IN_CORE: &[&str] = &[
    "tokio",
    "sled",
    "reqwest",
    "async_openai",
    "serenity",
    "poise",
    "hnsw_rs",
    "tracing",
    "std::fs",
    "std::net",
    "std::process",
    "std::env",
    "std::time::SystemTime",
    "std::time::Instant",
    "Utc::now",
    "Local::now",
    "rand::",
    "println!",
    "eprintln!",
];

/// Reading the wall clock; only `src/clock.rs` may.
const CLOCK_READS: &[&str] = &["Utc::now", "Local::now", "SystemTime::now"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every source file under `dir` except test-only files, with its code above its test module
/// and without comments: test modules may use whatever they like, and prose is not code.
fn code_files(dir: &Path) -> Vec<(PathBuf, Vec<String>)> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !name.ends_with(".rs") || name.ends_with("_tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let lines = code
                .lines()
                .map(|line| line.split("//").next().unwrap_or("").to_string())
                .collect();
            files.push((path, lines));
        }
    }
    files.sort();
    files
}

fn violations(files: &[(PathBuf, Vec<String>)], bad: impl Fn(&str) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for (path, lines) in files {
        for (number, line) in lines.iter().enumerate() {
            if bad(line) {
                found.push(format!(
                    "{}:{}: {}",
                    path.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

#[test]
fn the_core_names_no_io_crate_clock_randomness_or_other_module() {
    let files = code_files(&src().join("core"));
    assert!(files.len() >= 8, "expected the core's files");
    let io = violations(&files, |line| {
        FORBIDDEN_IN_CORE.iter().any(|needle| line.contains(needle))
    });
    assert!(io.is_empty(), "I/O in the core:\n{}", io.join("\n"));
    let outside = violations(&files, |line| {
        line.match_indices("crate::")
            .any(|(at, _)| !line[at..].starts_with("crate::core"))
    });
    assert!(
        outside.is_empty(),
        "the core names modules outside it:\n{}",
        outside.join("\n")
    );
}

#[test]
fn time_is_read_only_through_the_clock_seam() {
    let clock = src().join("clock.rs");
    let files: Vec<_> = code_files(&src())
        .into_iter()
        .filter(|(path, _)| *path != clock)
        .collect();
    let reads = violations(&files, |line| {
        CLOCK_READS.iter().any(|needle| line.contains(needle))
    });
    assert!(
        reads.is_empty(),
        "the clock read outside src/clock.rs:\n{}",
        reads.join("\n")
    );
}

/// The top-level module a source file belongs to (`runtime` for `src/runtime/supervisor.rs`).
fn top_module(path: &Path) -> String {
    let relative = path.strip_prefix(src()).unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

/// Which top-level modules each one names through `crate::…`.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, lines) in code_files(&src()) {
        let from = top_module(&path);
        let targets = graph.entry(from.clone()).or_default();
        for line in &lines {
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let to: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !to.is_empty() && to != from {
                    targets.insert(to);
                }
            }
        }
    }
    graph
}

/// A path of imports from `to` back to `from`, if there is one.
fn path_back(
    graph: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    to: &str,
) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![to.to_string()]];
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap().clone();
        if last == from {
            return Some(path);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in graph.get(&last).into_iter().flatten() {
            let mut longer = path.clone();
            longer.push(next.clone());
            stack.push(longer);
        }
    }
    None
}

#[test]
fn the_top_level_modules_import_each_other_without_a_circle() {
    let graph = import_graph();
    let mut circles = Vec::new();
    for (from, targets) in &graph {
        eprintln!(
            "{from} -> {}",
            Vec::from_iter(targets.iter().cloned()).join(" ")
        );
        for to in targets {
            if let Some(back) = path_back(&graph, from, to) {
                circles.push(format!("{from} -> {}", back.join(" -> ")));
            }
        }
    }
    assert!(graph.len() >= 10, "expected the crate's modules: {graph:?}");
    assert!(
        circles.is_empty(),
        "modules import each other in a circle:\n{}",
        circles.join("\n")
    );
}
