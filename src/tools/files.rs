//! Workspace file commands (AutoGPT 0.5 names, 0.2 aliases). Files live in the store, confined to
//! the agent's own workspace and bounded per file and per agent.
//!
//! The commands are `read_file`, `write_file`, `append_to_file`, `delete_file`, `list_folder` and
//! `search_files` (a `globset` pattern over paths, optionally with a text, showing its first
//! matching lines). A write is checked against `workspace.max_file_bytes` and, with the agent's
//! total kept by the store (`Store::workspace_bytes`) rather than a listing, against
//! `workspace.max_agent_bytes`; it is returned as a `WorkspaceOp` and committed with the step. All
//! of them are `lands_with_result`: their only effect is what they return.

use std::sync::Arc;

use async_trait::async_trait;

use super::workspace::{normalize_folder, normalize_path};
use super::{str_arg, Command, ToolCtx, ToolOutput};
use crate::core::commands::RuleArgument;
use crate::core::commands::{ArgType, CommandSpec, Risk};
use crate::core::reply::CommandCall;
use crate::store::{StoreError, WorkspaceOp};

pub fn commands() -> Vec<Arc<dyn Command>> {
    vec![
        Arc::new(ReadFile),
        Arc::new(WriteFile),
        Arc::new(AppendToFile),
        Arc::new(DeleteFile),
        Arc::new(ListFolder),
        Arc::new(SearchFiles),
    ]
}

fn existing(ctx: &ToolCtx<'_>, path: &str) -> Result<Option<Vec<u8>>, ToolOutput> {
    ctx.workspace
        .read(path)
        .map_err(|e| ToolOutput::error(format!("The workspace could not be read: {e}")))
}

/// Checks the size caps for replacing `path` with `new_len` bytes.
fn check_sizes(ctx: &ToolCtx<'_>, path: &str, new_len: u64) -> Result<(), ToolOutput> {
    if new_len > ctx.limits.max_file_bytes {
        return Err(ToolOutput::error(format!(
            "'{path}' would be {new_len} bytes; files are limited to {} bytes",
            ctx.limits.max_file_bytes
        )));
    }
    let unreadable =
        |e: StoreError| ToolOutput::error(format!("The workspace could not be read: {e}"));
    let total = ctx.workspace.total_bytes().map_err(unreadable)?;
    let replaced = ctx.workspace.size(path).map_err(unreadable)?.unwrap_or(0);
    let others = total.saturating_sub(replaced);
    if others + new_len > ctx.limits.max_agent_bytes {
        return Err(ToolOutput::error(format!(
            "the workspace would hold {} bytes; it is limited to {} bytes. Delete files you no longer need",
            others + new_len,
            ctx.limits.max_agent_bytes
        )));
    }
    Ok(())
}

fn put(path: String, contents: Vec<u8>, message: String) -> ToolOutput {
    ToolOutput {
        ops: vec![WorkspaceOp::Put { path, contents }],
        ..ToolOutput::success(message)
    }
}

/// Resolves the `filename` argument or returns the refusal as the command's result.
fn path_arg(call: &CommandCall, name: &str) -> Result<String, ToolOutput> {
    normalize_path(str_arg(call, name))
        .map_err(|why| ToolOutput::error(format!("Invalid path: {why}")))
}

/// The normalised `filename` argument and the file's contents, or the result to report instead.
fn existing_file(call: &CommandCall, ctx: &ToolCtx<'_>) -> Result<(String, Vec<u8>), ToolOutput> {
    let path = path_arg(call, "filename")?;
    match existing(ctx, &path)? {
        Some(bytes) => Ok((path, bytes)),
        None => Err(ToolOutput::error(format!("File '{path}' does not exist."))),
    }
}

struct ReadFile;

#[async_trait]
impl Command for ReadFile {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new("read_file", "Read an existing file", Risk::Read)
            .lands_with_result()
            .arg("filename", ArgType::String, "The path of the file to read")
            .rule_argument(RuleArgument::Path("filename".into()))
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let (path, bytes) = match existing_file(call, ctx) {
            Ok(found) => found,
            Err(out) => return out,
        };
        match String::from_utf8(bytes) {
            Ok(text) => ToolOutput::success(text),
            Err(e) => ToolOutput::error(format!(
                "File '{path}' is binary ({} bytes) and cannot be shown as text.",
                e.as_bytes().len()
            )),
        }
    }
}

struct WriteFile;

#[async_trait]
impl Command for WriteFile {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            "write_file",
            "Write a file, creating or overwriting it",
            Risk::Write,
        )
        .lands_with_result()
        .arg(
            "filename",
            ArgType::String,
            "The name of the file to write to",
        )
        .arg(
            "contents",
            ArgType::String,
            "The contents to write to the file",
        )
        .alias(
            "write_to_file",
            &[("file", "filename"), ("text", "contents")],
        )
        .rule_argument(RuleArgument::Path("filename".into()))
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let path = match path_arg(call, "filename") {
            Ok(p) => p,
            Err(out) => return out,
        };
        let contents = str_arg(call, "contents").as_bytes().to_vec();
        if let Err(out) = check_sizes(ctx, &path, contents.len() as u64) {
            return out;
        }
        let message = format!("File {path} has been written successfully.");
        put(path, contents, message)
    }
}

struct AppendToFile;

#[async_trait]
impl Command for AppendToFile {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            "append_to_file",
            "Append text to a file, creating it if needed",
            Risk::Write,
        )
        .lands_with_result()
        .arg(
            "filename",
            ArgType::String,
            "The name of the file to append to",
        )
        .arg("text", ArgType::String, "The text to append")
        .rule_argument(RuleArgument::Path("filename".into()))
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let path = match path_arg(call, "filename") {
            Ok(p) => p,
            Err(out) => return out,
        };
        let mut contents = match existing(ctx, &path) {
            Ok(old) => old.unwrap_or_default(),
            Err(out) => return out,
        };
        contents.extend_from_slice(str_arg(call, "text").as_bytes());
        if let Err(out) = check_sizes(ctx, &path, contents.len() as u64) {
            return out;
        }
        let message = format!("Text appended to {path} successfully.");
        put(path, contents, message)
    }
}

struct DeleteFile;

#[async_trait]
impl Command for DeleteFile {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new("delete_file", "Delete a file", Risk::Write)
            .lands_with_result()
            .arg(
                "filename",
                ArgType::String,
                "The name of the file to delete",
            )
            .rule_argument(RuleArgument::Path("filename".into()))
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        match existing_file(call, ctx) {
            Err(out) => out,
            Ok((path, _)) => ToolOutput {
                ops: vec![WorkspaceOp::Delete { path: path.clone() }],
                ..ToolOutput::success(format!("File {path} has been deleted."))
            },
        }
    }
}

struct ListFolder;

#[async_trait]
impl Command for ListFolder {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            "list_folder",
            "List a folder's files, recursively",
            Risk::Read,
        )
        .lands_with_result()
        .optional_arg(
            "folder",
            ArgType::String,
            "The folder to list; the workspace root when omitted",
        )
        .alias("list_files", &[("directory", "folder")])
        .rule_argument(RuleArgument::Path("folder".into()))
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let folder = match normalize_folder(str_arg(call, "folder")) {
            Ok(f) => f,
            Err(why) => return ToolOutput::error(format!("Invalid path: {why}")),
        };
        let files = match ctx.workspace.list() {
            Ok(files) => files,
            Err(e) => return ToolOutput::error(format!("The workspace could not be read: {e}")),
        };
        let prefix = if folder.is_empty() {
            String::new()
        } else {
            format!("{folder}/")
        };
        let listed: Vec<String> = files
            .iter()
            .filter(|(path, _)| path.starts_with(&prefix))
            .map(|(path, size)| format!("{path} ({size} bytes)"))
            .collect();
        if listed.is_empty() {
            let place = if folder.is_empty() {
                "The workspace".to_string()
            } else {
                format!("Folder '{folder}'")
            };
            ToolOutput::success(format!("{place} contains no files."))
        } else {
            ToolOutput::success(listed.join("\n"))
        }
    }
}

struct SearchFiles;

/// Files a search lists, and matching lines it shows of each: enough to choose what to read.
const SEARCH_FILES_SHOWN: usize = 50;
const SEARCH_LINES_SHOWN: usize = 5;
const SEARCH_LINE_CHARS: usize = 200;

#[async_trait]
impl Command for SearchFiles {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            "search_files",
            "Find files by glob pattern, optionally containing a text (its lines are shown)",
            Risk::Read,
        )
        .lands_with_result()
        .arg(
            "pattern",
            ArgType::String,
            "A glob over paths: * and ? within a folder, ** across folders (**/*.py)",
        )
        .optional_arg(
            "text",
            ArgType::String,
            "Only files containing this text, ignoring case",
        )
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let pattern = match str_arg(call, "pattern").trim() {
            "" => "**",
            given => given,
        };
        let matcher = match globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
        {
            Ok(glob) => glob.compile_matcher(),
            Err(e) => return ToolOutput::error(format!("Invalid pattern '{pattern}': {e}")),
        };
        let text = str_arg(call, "text").trim().to_lowercase();
        let files = match ctx.workspace.list() {
            Ok(files) => files,
            Err(e) => return ToolOutput::error(format!("The workspace could not be read: {e}")),
        };
        let mut found: Vec<String> = Vec::new();
        for (path, size) in files.iter().filter(|(path, _)| matcher.is_match(path)) {
            if text.is_empty() {
                found.push(format!("{path} ({size} bytes)"));
                continue;
            }
            let contents = match existing(ctx, path) {
                Ok(Some(bytes)) => bytes,
                Ok(None) => continue,
                Err(out) => return out,
            };
            // Binary files are searched as text too, and shown by their lines that decode.
            let contents = String::from_utf8_lossy(&contents);
            let lines: Vec<String> = contents
                .lines()
                .enumerate()
                .filter(|(_, line)| line.to_lowercase().contains(&text))
                .map(|(n, line)| {
                    format!(
                        "  {}: {}",
                        n + 1,
                        crate::core::text::truncate_chars(line.trim(), SEARCH_LINE_CHARS)
                    )
                })
                .collect();
            if lines.is_empty() {
                continue;
            }
            let mut entry = format!("{path} ({} matching lines)", lines.len());
            for line in lines.iter().take(SEARCH_LINES_SHOWN) {
                entry.push('\n');
                entry.push_str(line);
            }
            found.push(entry);
        }
        let containing = if text.is_empty() {
            String::new()
        } else {
            format!(" containing '{}'", str_arg(call, "text").trim())
        };
        if found.is_empty() {
            return ToolOutput::success(format!("No file matches '{pattern}'{containing}."));
        }
        let mut out = format!("{} files match '{pattern}'{containing}:", found.len());
        for entry in found.iter().take(SEARCH_FILES_SHOWN) {
            out.push_str("\n- ");
            out.push_str(entry);
        }
        if found.len() > SEARCH_FILES_SHOWN {
            out.push_str(&format!(
                "\n… and {} more; narrow the pattern",
                found.len() - SEARCH_FILES_SHOWN
            ));
        }
        ToolOutput::success(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Payer;
    use crate::config::SubagentConfig;
    use crate::config::WorkspaceConfig;
    use crate::core::budget::Micros;
    use crate::core::history::Outcome;
    use crate::core::state::{AgentState, AgentView};
    use crate::store::{Commit, Store};
    use crate::tools::{AgentFiles, AskUser, SubAgents};
    use serde_json::json;

    /// File commands never talk to the humans; any question here is a bug.
    struct NoHumans;

    #[async_trait]
    impl AskUser for NoHumans {
        async fn ask(&self, _: &str) -> Result<String, crate::tools::NoAnswer> {
            unreachable!("file commands do not ask the user")
        }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Store,
        agent: AgentState,
        limits: WorkspaceConfig,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(dir.path()).unwrap();
            let agent = AgentState::for_test("files1");
            Fixture {
                _dir: dir,
                store,
                agent,
                limits: WorkspaceConfig {
                    max_file_bytes: 100,
                    max_agent_bytes: 150,
                    max_output_chars: 1000,
                },
            }
        }

        /// Runs a command and commits its staged changes, as the runtime does.
        async fn run(&self, name: &str, args: serde_json::Value) -> Outcome {
            let call = CommandCall {
                name: name.into(),
                args: args.as_object().cloned().unwrap(),
            };
            let agent: AgentView = self.agent.view();
            let payer = Payer {
                agent: agent.id.clone(),
                spender: Default::default(),
                agent_limit: Micros(0),
            };
            let ctx = ToolCtx {
                agent: &agent,
                now: self.agent.created_at,
                payer: &payer,
                workspace: AgentFiles::new(&self.store, &agent.id),
                subagents: SubAgents::new(&self.store, &agent.id),
                ask_user: &NoHumans,
                limits: &self.limits,
                subagent_limits: &SubagentConfig::default(),
                memory: None,
                model: None,
                web: None,
            };
            let command = commands()
                .into_iter()
                .find(|c| c.spec().name == name)
                .unwrap();
            let output = command.run(&call, &ctx).await;
            self.store
                .commit(&Commit {
                    state: Some(&self.agent),
                    workspace: output.ops,
                    ..Default::default()
                })
                .unwrap();
            output.outcome
        }
    }

    fn ok(text: &str) -> Outcome {
        Outcome::Success(text.into())
    }

    #[tokio::test]
    async fn write_read_append_list_delete() {
        let f = Fixture::new();
        assert_eq!(
            f.run(
                "write_file",
                json!({"filename": "./docs/a.txt", "contents": "one"})
            )
            .await,
            ok("File docs/a.txt has been written successfully.")
        );
        assert_eq!(
            f.run(
                "append_to_file",
                json!({"filename": "docs/a.txt", "text": " two"})
            )
            .await,
            ok("Text appended to docs/a.txt successfully.")
        );
        assert_eq!(
            f.run("read_file", json!({"filename": "docs/a.txt"})).await,
            ok("one two")
        );
        f.run("write_file", json!({"filename": "b.txt", "contents": "b"}))
            .await;
        assert_eq!(
            f.run("list_folder", json!({})).await,
            ok("b.txt (1 bytes)\ndocs/a.txt (7 bytes)")
        );
        assert_eq!(
            f.run("list_folder", json!({"folder": "docs"})).await,
            ok("docs/a.txt (7 bytes)")
        );
        assert_eq!(
            f.run("delete_file", json!({"filename": "docs/a.txt"}))
                .await,
            ok("File docs/a.txt has been deleted.")
        );
        assert_eq!(
            f.run("read_file", json!({"filename": "docs/a.txt"})).await,
            Outcome::Error("File 'docs/a.txt' does not exist.".into())
        );
        assert_eq!(
            f.run("delete_file", json!({"filename": "nope"})).await,
            Outcome::Error("File 'nope' does not exist.".into())
        );
        assert_eq!(
            f.run("list_folder", json!({"folder": "docs"})).await,
            ok("Folder 'docs' contains no files.")
        );
    }

    #[tokio::test]
    async fn size_caps_and_confinement_are_enforced_without_writing() {
        let f = Fixture::new();
        let too_big = "x".repeat(101);
        let out = f
            .run(
                "write_file",
                json!({"filename": "big", "contents": too_big}),
            )
            .await;
        assert!(
            matches!(&out, Outcome::Error(t) if t.contains("limited to 100 bytes")),
            "{out:?}"
        );
        f.run(
            "write_file",
            json!({"filename": "a", "contents": "x".repeat(100)}),
        )
        .await;
        let out = f
            .run(
                "write_file",
                json!({"filename": "b", "contents": "x".repeat(60)}),
            )
            .await;
        assert!(
            matches!(&out, Outcome::Error(t) if t.contains("limited to 150 bytes")),
            "{out:?}"
        );
        // Replacing a file counts its new size, not both.
        let out = f
            .run(
                "write_file",
                json!({"filename": "a", "contents": "x".repeat(90)}),
            )
            .await;
        assert!(matches!(out, Outcome::Success(_)));
        let out = f
            .run(
                "append_to_file",
                json!({"filename": "a", "text": "y".repeat(20)}),
            )
            .await;
        assert!(
            matches!(&out, Outcome::Error(t) if t.contains("limited to 100 bytes")),
            "{out:?}"
        );
        for path in ["../x", "/etc/passwd", "a/../../x"] {
            let out = f
                .run("write_file", json!({"filename": path, "contents": "x"}))
                .await;
            assert!(
                matches!(&out, Outcome::Error(t) if t.starts_with("Invalid path")),
                "{path}: {out:?}"
            );
        }
        assert_eq!(
            f.store.list_files("files1").unwrap(),
            vec![("a".to_string(), 90)]
        );
    }

    #[tokio::test]
    async fn binary_files_are_reported_not_dumped() {
        let f = Fixture::new();
        f.store
            .commit(&Commit {
                state: Some(&f.agent),
                workspace: vec![WorkspaceOp::Put {
                    path: "img.bin".into(),
                    contents: vec![0xff, 0xfe, 0x00],
                }],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            f.run("read_file", json!({"filename": "img.bin"})).await,
            Outcome::Error(
                "File 'img.bin' is binary (3 bytes) and cannot be shown as text.".into()
            )
        );
    }

    #[tokio::test]
    async fn search_files_matches_paths_by_glob_and_contents_by_text() {
        let f = Fixture::new();
        f.store
            .commit(&Commit {
                state: Some(&f.agent),
                workspace: vec![
                    WorkspaceOp::Put {
                        path: "src/main.py".into(),
                        contents: b"import os\nprint('Hello')\n".to_vec(),
                    },
                    WorkspaceOp::Put {
                        path: "src/util/io.py".into(),
                        contents: b"def hello():\n    pass\n".to_vec(),
                    },
                    WorkspaceOp::Put {
                        path: "notes.md".into(),
                        contents: b"hello notes".to_vec(),
                    },
                ],
                ..Default::default()
            })
            .unwrap();
        let text = |o: Outcome| o.text().to_string();
        let all_python = text(f.run("search_files", json!({"pattern": "**/*.py"})).await);
        assert!(
            all_python.starts_with("2 files match '**/*.py':"),
            "{all_python}"
        );
        let top = text(f.run("search_files", json!({"pattern": "src/*.py"})).await);
        assert!(
            top.starts_with("1 files match") && top.contains("src/main.py"),
            "{top}"
        );
        let hello = text(
            f.run("search_files", json!({"pattern": "**", "text": "HELLO"}))
                .await,
        );
        assert!(
            hello.contains("- notes.md (1 matching lines)\n  1: hello notes"),
            "{hello}"
        );
        assert!(hello.contains("  2: print('Hello')"), "{hello}");
        assert!(hello.contains("  1: def hello():"), "{hello}");
        let none = text(f.run("search_files", json!({"pattern": "*.rs"})).await);
        assert_eq!(none, "No file matches '*.rs'.");
        assert!(matches!(
            f.run("search_files", json!({"pattern": "src/[.py"})).await,
            Outcome::Error(e) if e.starts_with("Invalid pattern")
        ));
    }
}
