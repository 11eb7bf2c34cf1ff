//! Checks the architecture's first invariant mechanically: the core does no I/O. It may not name
//! the crates or std modules that reach outside the process, nor read the clock or randomness.

use std::path::Path;

const FORBIDDEN: &[&str] = &[
    "tokio",
    "sled",
    "reqwest",
    "async_openai",
    "serenity",
    "poise",
    "hnsw_rs",
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

#[test]
fn the_core_names_no_io_crate_clock_or_randomness() {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut checked = 0;
    let mut violations = Vec::new();
    for entry in std::fs::read_dir(&core).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.ends_with(".rs") || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Test modules may use whatever they like; only the code above them is the core.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (number, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap_or("");
            for needle in FORBIDDEN {
                if line.contains(needle) {
                    violations.push(format!(
                        "{}:{}: {}",
                        path.display(),
                        number + 1,
                        line.trim()
                    ));
                }
            }
        }
        checked += 1;
    }
    assert!(checked >= 8, "expected the core's files, found {checked}");
    assert!(
        violations.is_empty(),
        "I/O in the core:\n{}",
        violations.join("\n")
    );
}
