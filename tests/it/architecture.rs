//! Checks the architecture mechanically: the core is a crate of its own that depends on no I/O
//! crate and names no I/O, time is read only through the clock seam, no modules import each other
//! in a circle at any level, and ARCHITECTURE.md's dependency list is the code's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What the core may not name though the compiler would let it: the parts of std that reach
/// outside the process, and printing.
const FORBIDDEN_IN_CORE: &[&str] = &[
    "std::fs",
    "std::net",
    "std::process",
    "std::env",
    "std::io",
    "std::thread",
    "std::time::SystemTime",
    "std::time::Instant",
    "Utc::now",
    "Local::now",
    "print!",
    "dbg!",
];

/// The only crates the core may depend on: data, serialisation and a digest.
const CORE_DEPENDENCIES: &[&str] = &["chrono", "serde", "serde_json", "sha2", "thiserror"];

/// Reading the wall clock; only `src/clock.rs` may.
const CLOCK_READS: &[&str] = &["Utc::now", "Local::now", "SystemTime::now"];

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn src() -> PathBuf {
    manifest_dir().join("src")
}

fn core_src() -> PathBuf {
    manifest_dir().join("crates/core/src")
}

/// The code of a Rust source without comments, string and character literals (each kept as an
/// empty literal, so that line numbers and the code around them stay), and without the items
/// marked `#[cfg(test)]`: tests may use whatever they like, and prose is not code.
fn code_of(text: &str) -> String {
    let without_literals = strip_comments_and_literals(text);
    strip_test_items(&without_literals)
}

fn strip_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < chars.len() {
        let here = chars[at];
        let next = chars.get(at + 1).copied();
        if here == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if here == '/' && next == Some('*') {
            at += 2;
            while at + 1 < chars.len() && !(chars[at] == '*' && chars[at + 1] == '/') {
                if chars[at] == '\n' {
                    out.push('\n');
                }
                at += 1;
            }
            at += 2;
        } else if here == 'r' && matches!(next, Some('"') | Some('#')) && raw_string_at(&chars, at)
        {
            // A raw string: r"…" or r#"…"#, with as many hashes at its end as at its start.
            let mut hashes = 0;
            at += 1;
            while chars.get(at) == Some(&'#') {
                hashes += 1;
                at += 1;
            }
            at += 1;
            loop {
                match chars.get(at) {
                    None => break,
                    Some('"') if (1..=hashes).all(|k| chars.get(at + k) == Some(&'#')) => {
                        at += 1 + hashes;
                        break;
                    }
                    Some('\n') => out.push('\n'),
                    Some(_) => {}
                }
                at += 1;
            }
            out.push_str("\"\"");
        } else if here == '"' {
            at += 1;
            while at < chars.len() && chars[at] != '"' {
                if chars[at] == '\\' {
                    at += 1;
                }
                if chars.get(at) == Some(&'\n') {
                    out.push('\n');
                }
                at += 1;
            }
            at += 1;
            out.push_str("\"\"");
        } else if here == '\'' && char_literal_len(&chars, at).is_some() {
            at += char_literal_len(&chars, at).unwrap_or(1);
            out.push_str("''");
        } else {
            out.push(here);
            at += 1;
        }
    }
    out
}

/// Whether an `r` starts a raw string rather than ending a name (`for"` cannot occur).
fn raw_string_at(chars: &[char], at: usize) -> bool {
    // A byte string's `b` may come first: `br#"…"#`.
    let token_start = if at > 0 && chars[at - 1] == 'b' {
        at - 1
    } else {
        at
    };
    let starts_a_token = token_start == 0
        || !(chars[token_start - 1].is_alphanumeric() || chars[token_start - 1] == '_');
    let mut after = at + 1;
    while chars.get(after) == Some(&'#') {
        after += 1;
    }
    starts_a_token && chars.get(after) == Some(&'"')
}

/// The length of a character literal starting at `at`, or `None` for a lifetime.
fn char_literal_len(chars: &[char], at: usize) -> Option<usize> {
    match (chars.get(at + 1), chars.get(at + 2)) {
        (Some('\\'), _) => {
            // The character after the backslash is escaped, a quote included (`'\''`).
            let mut end = at + 3;
            while end < chars.len() && chars[end] != '\'' && end < at + 12 {
                end += 1;
            }
            (chars.get(end) == Some(&'\'')).then_some(end - at + 1)
        }
        (Some(_), Some('\'')) => Some(3),
        _ => None,
    }
}

/// Drops each item that follows a `#[cfg(test)]`: up to its matching closing brace, or to its
/// semicolon for an item without a body (`mod tests;`); a test-only field or variant up to its
/// comma, or to the closing brace of what holds it.
fn strip_test_items(code: &str) -> String {
    const ITEM_KEYWORDS: &[&str] = &[
        "mod",
        "fn",
        "impl",
        "struct",
        "enum",
        "trait",
        "const",
        "static",
        "use",
        "type",
        "pub",
        "async",
        "unsafe",
        "extern",
        "macro_rules",
    ];
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(found) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..found]);
        let item = &rest[found..];
        // The first word after the attributes says whether this is an item or a field.
        let mut after = &item["#[cfg(test)]".len()..];
        loop {
            after = after.trim_start();
            match after
                .strip_prefix("#[")
                .and_then(|inner| inner.find(']').map(|end| &inner[end + 1..]))
            {
                Some(next) => after = next,
                None => break,
            }
        }
        let first_word: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '!')
            .collect();
        let is_item = ITEM_KEYWORDS.contains(&first_word.trim_end_matches('!'));
        let mut braces = 0_i32;
        let mut brackets = 0_i32;
        let mut end = item.len();
        for (at, c) in item.char_indices() {
            match c {
                '{' => braces += 1,
                '}' if braces == 0 => {
                    end = at;
                    break;
                }
                '}' => {
                    braces -= 1;
                    if braces == 0 && is_item {
                        end = at + 1;
                        break;
                    }
                }
                '(' | '[' | '<' => brackets += 1,
                ')' | ']' | '>' => brackets -= 1,
                ';' if braces == 0 => {
                    end = at + 1;
                    break;
                }
                ',' if !is_item && braces == 0 && brackets == 0 => {
                    end = at + 1;
                    break;
                }
                _ => {}
            }
        }
        // Keep the line count, so that reported line numbers are the file's.
        out.extend(item[..end].chars().filter(|&c| c == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// One source file: where it is, its module path within its crate (`["runtime", "persist"]`), and
/// its code as lines.
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
    lines: Vec<String>,
}

impl SourceFile {
    fn is_directory_module(&self) -> bool {
        matches!(
            self.path.file_name().and_then(|n| n.to_str()),
            Some("mod.rs" | "lib.rs")
        )
    }
}

/// Every source file of a crate's source directory except test-only files.
fn code_files(root: &Path) -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // main.rs is the binary's own crate, which names the library from outside.
            let binary_root = dir == root && name == "main.rs";
            if !name.ends_with(".rs") || name.ends_with("_tests.rs") || binary_root {
                continue;
            }
            let relative = path.strip_prefix(root).unwrap().with_extension("");
            let mut module: Vec<String> = relative
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let lines = code_of(&text).lines().map(str::to_string).collect();
            files.push(SourceFile {
                path,
                module,
                lines,
            });
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

fn violations(files: &[SourceFile], bad: impl Fn(&str) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        for (number, line) in file.lines.iter().enumerate() {
            if bad(line) {
                found.push(format!(
                    "{}:{}: {}",
                    file.path.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

/// The names in a TOML table of a manifest (`[dependencies]`), read line by line: enough for a
/// manifest whose entries are one line each, as the core's are.
fn manifest_table(manifest: &str, table: &str) -> Vec<(String, String)> {
    let header = format!("[{table}]");
    let mut entries = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == header;
            continue;
        }
        if inside && !line.is_empty() && !line.starts_with('#') {
            if let Some((name, spec)) = line.split_once('=') {
                entries.push((name.trim().to_string(), spec.trim().to_string()));
            }
        }
    }
    entries
}

#[test]
fn the_core_is_a_crate_that_depends_on_no_io_crate_and_names_no_io() {
    let manifest = std::fs::read_to_string(manifest_dir().join("crates/core/Cargo.toml")).unwrap();
    let dependencies = manifest_table(&manifest, "dependencies");
    assert!(!dependencies.is_empty(), "expected the core's dependencies");
    for (name, spec) in &dependencies {
        assert!(
            CORE_DEPENDENCIES.contains(&name.as_str()),
            "the core depends on {name}, which is not one of {CORE_DEPENDENCIES:?}"
        );
        // chrono's `clock` feature reads the wall clock; only the core's tests may have it.
        assert!(
            !spec.contains("\"clock\""),
            "the core's {name} may read the clock: {spec}"
        );
    }
    let files = code_files(&core_src());
    assert!(files.len() >= 20, "expected the core's files");
    let mut io = violations(&files, |line| {
        FORBIDDEN_IN_CORE.iter().any(|needle| line.contains(needle))
    });
    // A group hides a path from a line's reading: `use std::{env, fs};`.
    for file in &files {
        for path in use_paths(&file.lines.join("\n")) {
            let path = path.join("::");
            if FORBIDDEN_IN_CORE
                .iter()
                .any(|needle| path.starts_with(needle))
            {
                io.push(format!("{}: use {path}", file.path.display()));
            }
        }
    }
    assert!(io.is_empty(), "I/O in the core:\n{}", io.join("\n"));
}

#[test]
fn time_is_read_only_through_the_clock_seam() {
    let clock = src().join("clock.rs");
    let files: Vec<_> = code_files(&src())
        .into_iter()
        .chain(code_files(&core_src()))
        .filter(|file| file.path != clock)
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

/// Which modules each file names, by the longest module path its `crate::…`, `super::…`,
/// `self::…` paths (and, in a directory module, its children's names) resolve to.
fn file_imports(files: &[SourceFile]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let longest_module = |path: &[String]| -> Option<Vec<String>> {
        (0..=path.len())
            .rev()
            .map(|len| path[..len].to_vec())
            .find(|candidate| modules.contains(candidate))
    };
    let mut graph = BTreeMap::new();
    for file in files {
        let mut targets = BTreeSet::new();
        let paths = file
            .lines
            .iter()
            .flat_map(|line| paths_in(line))
            .chain(use_paths(&file.lines.join("\n")));
        for path in paths {
            let (base, rest): (Vec<String>, &[String]) = match path[0].as_str() {
                "crate" => (Vec::new(), &path[1..]),
                // `super` is the parent of the file's own module, `self` the module itself.
                "super" => {
                    let ups = path.iter().take_while(|part| *part == "super").count();
                    let keep = file.module.len().saturating_sub(ups);
                    (file.module[..keep].to_vec(), &path[ups..])
                }
                "self" => (file.module.clone(), &path[1..]),
                first if file.is_directory_module() => {
                    let mut child = file.module.clone();
                    child.push(first.to_string());
                    if !modules.contains(&child) {
                        continue;
                    }
                    (file.module.clone(), &path[..])
                }
                _ => continue,
            };
            let mut full = base.clone();
            full.extend(rest.iter().cloned());
            if let Some(target) = longest_module(&full) {
                if !target.is_empty() && target != file.module && target.len() >= base.len() {
                    targets.insert(target);
                }
            }
        }
        graph.insert(file.module.clone(), targets);
    }
    graph
}

/// The full paths a file's `use` declarations name, each group expanded, so that
/// `use super::{a, b::C};` gives `super::a` and `super::b::C` (a glob gives the path before it).
fn use_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(found) = find_keyword(rest, "use") {
        let after = &rest[found + "use".len()..];
        let Some(end) = after.find(';') else { break };
        expand_use_tree(&after[..end], &[], &mut paths);
        rest = &after[end..];
    }
    paths
}

/// Where `word` first stands as a keyword in `code`: a whole word followed by white space.
fn find_keyword(code: &str, word: &str) -> Option<usize> {
    let is_name = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(word).map(|(at, _)| at).find(|&at| {
        let before = code[..at].chars().next_back();
        let after = code[at + word.len()..].chars().next();
        !before.is_some_and(is_name) && after.is_some_and(char::is_whitespace)
    })
}

fn expand_use_tree(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    let split = |path: &str| -> Vec<String> {
        path.split("::")
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(str::to_string)
            .collect()
    };
    if let Some(open) = tree.find('{') {
        let mut base = prefix.to_vec();
        base.extend(split(&tree[..open]));
        let close = tree.rfind('}').unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let mut depth = 0;
        let mut start = 0;
        for (at, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use_tree(&inner[start..at], &base, out);
                    start = at + 1;
                }
                _ => {}
            }
        }
        expand_use_tree(&inner[start..], &base, out);
        return;
    }
    let path = tree.split(" as ").next().unwrap_or("");
    let mut full = prefix.to_vec();
    for part in split(path) {
        // `self` in a group names the group's own path; `*` names everything in it.
        if part != "self" && part != "*" {
            full.push(part);
        }
    }
    if full.len() > 1 {
        out.push(full);
    }
}

/// The `a::b::c` paths in a line of code, each as its parts (a path's last part may be an item).
fn paths_in(line: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let bytes = line.as_bytes();
    let is_name = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut at = 0;
    while at < bytes.len() {
        let starts = is_name(bytes[at])
            && (at == 0 || (!is_name(bytes[at - 1]) && !line[..at].ends_with("::")));
        if !starts {
            at += 1;
            continue;
        }
        let mut parts = Vec::new();
        let mut end = at;
        loop {
            let start = end;
            while end < bytes.len() && is_name(bytes[end]) {
                end += 1;
            }
            parts.push(line[start..end].to_string());
            if line[end..].starts_with("::")
                && line[end + 2..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            {
                end += 2;
            } else {
                break;
            }
        }
        if parts.len() > 1 {
            paths.push(parts);
        }
        at = end.max(at + 1);
    }
    paths
}

/// For every directory module, the circles among its children, each child standing for its whole
/// subtree: `a -> b -> a`.
fn circles_among_siblings(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    let directories: BTreeSet<Vec<String>> = graph
        .keys()
        .filter(|module| !module.is_empty())
        .map(|module| module[..module.len() - 1].to_vec())
        .collect();
    let mut circles = Vec::new();
    for directory in directories {
        let depth = directory.len();
        let within =
            |module: &Vec<String>| module.len() > depth && module[..depth] == directory[..];
        let mut children: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, targets) in graph.iter().filter(|(from, _)| within(from)) {
            let unit = children.entry(from[depth].clone()).or_default();
            for to in targets.iter().filter(|to| within(to)) {
                if to[depth] != from[depth] {
                    unit.insert(to[depth].clone());
                }
            }
        }
        for (from, targets) in &children {
            for to in targets {
                if let Some(back) = path_back(&children, from, to) {
                    let place = if directory.is_empty() {
                        "the crate".to_string()
                    } else {
                        directory.join("::")
                    };
                    circles.push(format!("in {place}: {from} -> {}", back.join(" -> ")));
                }
            }
        }
    }
    circles
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
fn no_modules_import_each_other_in_a_circle_at_any_level() {
    for root in [src(), core_src()] {
        let graph = file_imports(&code_files(&root));
        assert!(
            graph.len() >= 20,
            "expected the crate's files under {}",
            root.display()
        );
        let circles = circles_among_siblings(&graph);
        assert!(
            circles.is_empty(),
            "modules under {} import each other in a circle:\n{}",
            root.display(),
            circles.join("\n")
        );
    }
}

/// Which top-level modules of `src/` each one imports (the core counts as one, `core`).
fn top_level_imports() -> BTreeMap<String, BTreeSet<String>> {
    let files = code_files(&src());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in file_imports(&files) {
        let Some(first) = from.first() else { continue };
        let entry = graph.entry(first.clone()).or_default();
        for to in targets {
            if let Some(target) = to.first().filter(|target| *target != first) {
                entry.insert(target.clone());
            }
        }
    }
    // `crate::core::…` names the core crate through its re-export in lib.rs.
    for file in &files {
        let Some(first) = file.module.first() else {
            continue;
        };
        if file.lines.iter().any(|line| line.contains("crate::core::")) {
            graph
                .entry(first.clone())
                .or_default()
                .insert("core".into());
        }
    }
    graph.entry("core".into()).or_default();
    graph
}

/// The list in ARCHITECTURE.md's "Module dependencies" section: `module: target target …`.
fn documented_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let map = std::fs::read_to_string(manifest_dir().join("ARCHITECTURE.md")).unwrap();
    let section = map
        .split("## Module dependencies")
        .nth(1)
        .expect("ARCHITECTURE.md has a \"## Module dependencies\" section");
    let block = section
        .split("```text")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the section lists the dependencies in a ```text block");
    block
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(module, targets)| {
            (
                module.trim().to_string(),
                targets.split_whitespace().map(str::to_string).collect(),
            )
        })
        .collect()
}

#[test]
fn the_dependency_list_matches_the_code() {
    let code = top_level_imports();
    assert!(code.len() >= 10, "expected the crate's modules: {code:?}");
    let written = documented_dependencies();
    let show = |graph: &BTreeMap<String, BTreeSet<String>>| {
        graph
            .iter()
            .map(|(module, targets)| {
                let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
                format!("{module}: {}", targets.join(" "))
                    .trim_end()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        show(&written),
        show(&code),
        "ARCHITECTURE.md's module dependencies (left) differ from the code's (right)"
    );
}

#[test]
fn the_code_reader_keeps_code_and_drops_tests_comments_and_literals() {
    let source = "use crate::store::Store; // crate::ops in a comment\n\
                  const NOTE: &str = \"crate::web in a string\";\n\
                  fn lifetime<'a>(x: &'a str) -> char { 'x' }\n\
                  #[cfg(test)]\n\
                  mod tests { fn t() { crate::ops::x(); } }\n\
                  fn after() { crate::runtime::go(); }\n";
    let code = code_of(source);
    assert!(code.contains("crate::store::Store"));
    assert!(
        code.contains("crate::runtime::go"),
        "code after a test module is read: {code}"
    );
    assert!(!code.contains("crate::ops"), "{code}");
    assert!(!code.contains("crate::web"), "{code}");
    assert!(code.contains("<'a>"), "{code}");
    assert_eq!(code.lines().count(), source.lines().count());

    let source = "struct Gate {\n\
                  #[cfg(test)]\n\
                  flushed: u64,\n\
                  }\n\
                  struct After { store: crate::store::Store }\n\
                  const RAW: &[u8] = br#\"crate::ops \" // \"#;\n\
                  const QUOTE: char = '\\'';\n\
                  use super::{alpha, beta::{Gamma, self}, delta as d};\n";
    let code = code_of(source);
    assert!(code.contains("crate::store::Store"), "{code}");
    assert!(!code.contains("crate::ops"), "{code}");
    let paths: Vec<String> = use_paths(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "super::alpha",
            "super::beta::Gamma",
            "super::beta",
            "super::delta"
        ]
    );
}
