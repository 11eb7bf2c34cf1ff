//! Workspace file commands (AutoGPT 0.5 names, 0.2 aliases). Files live in the store, confined to
//! the agent's own workspace and bounded per file and per agent.

use std::sync::Arc;

use async_trait::async_trait;

use super::workspace::{normalize_folder, normalize_path};
use super::{str_arg, Command, ToolCtx, ToolOutput};
use crate::core::commands::{ArgType, CommandSpec, Risk};
use crate::core::reply::CommandCall;
use crate::store::WorkspaceOp;

pub fn commands() -> Vec<Arc<dyn Command>> {
    vec![
        Arc::new(ReadFile),
        Arc::new(WriteFile),
        Arc::new(AppendToFile),
        Arc::new(DeleteFile),
        Arc::new(ListFolder),
    ]
}

fn existing(ctx: &ToolCtx<'_>, path: &str) -> Result<Option<Vec<u8>>, ToolOutput> {
    ctx.store
        .read_file(&ctx.agent.id, path)
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
    let files = ctx
        .store
        .list_files(&ctx.agent.id)
        .map_err(|e| ToolOutput::error(format!("The workspace could not be read: {e}")))?;
    let others: u64 = files
        .iter()
        .filter(|(p, _)| p != path)
        .map(|(_, size)| size)
        .sum();
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

struct ReadFile;

#[async_trait]
impl Command for ReadFile {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new("read_file", "Read an existing file", Risk::Read).arg(
            "filename",
            ArgType::String,
            "The path of the file to read",
        )
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let path = match path_arg(call, "filename") {
            Ok(p) => p,
            Err(out) => return out,
        };
        match existing(ctx, &path) {
            Err(out) => out,
            Ok(None) => ToolOutput::error(format!("File '{path}' does not exist.")),
            Ok(Some(bytes)) => match String::from_utf8(bytes) {
                Ok(text) => ToolOutput::success(text),
                Err(e) => ToolOutput::error(format!(
                    "File '{path}' is binary ({} bytes) and cannot be shown as text.",
                    e.as_bytes().len()
                )),
            },
        }
    }
}

struct WriteFile;

#[async_trait]
impl Command for WriteFile {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            "write_file",
            "Write a file, creating it if necessary. If the file exists, it is overwritten",
            Risk::Write,
        )
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
            "Append text to the end of a file, creating it if necessary",
            Risk::Write,
        )
        .arg(
            "filename",
            ArgType::String,
            "The name of the file to append to",
        )
        .arg("text", ArgType::String, "The text to append")
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
        CommandSpec::new("delete_file", "Delete a file", Risk::Write).arg(
            "filename",
            ArgType::String,
            "The name of the file to delete",
        )
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let path = match path_arg(call, "filename") {
            Ok(p) => p,
            Err(out) => return out,
        };
        match existing(ctx, &path) {
            Err(out) => out,
            Ok(None) => ToolOutput::error(format!("File '{path}' does not exist.")),
            Ok(Some(_)) => ToolOutput {
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
            "List the files in a folder of your workspace, recursively",
            Risk::Read,
        )
        .optional_arg(
            "folder",
            ArgType::String,
            "The folder to list; the workspace root when omitted",
        )
        .alias("list_files", &[("directory", "folder")])
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let folder = match normalize_folder(str_arg(call, "folder")) {
            Ok(f) => f,
            Err(why) => return ToolOutput::error(format!("Invalid path: {why}")),
        };
        let files = match ctx.store.list_files(&ctx.agent.id) {
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
