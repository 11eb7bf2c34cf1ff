//! Code execution commands (`execute_python`, `execute_python_file`, `execute_shell`): the agent's
//! code runs in the kernel sandbox on a copy of its workspace, and what it changed comes back as
//! workspace operations, committed with the step like any command's.
//!
//! All three are `Risk::External`; `execute_shell` is offered only with `sandbox.shell`, and
//! `execute_python_code` is an alias of `execute_python`. The workspace is handed to
//! `Sandbox::run`, and the run's `Changes` come back as the command's `WorkspaceOp`s. The result
//! says how the run ended, which limit stopped it, its output, and the files changed or not kept.

use std::sync::Arc;

use async_trait::async_trait;

use super::workspace::normalize_path;
use super::{str_arg, Command, ToolCtx, ToolOutput};
use crate::core::commands::{ArgType, CommandSpec, Risk};
use crate::core::history::Outcome;
use crate::core::reply::CommandCall;
use crate::sandbox::{Program, Ran, Sandbox};
use crate::store::WorkspaceOp;

/// The command names, for the registry and the config's switches.
pub const PYTHON: &str = "execute_python";
pub const PYTHON_FILE: &str = "execute_python_file";
pub const SHELL: &str = "execute_shell";

/// The commands a working sandbox offers: the shell only when the config allows it.
pub fn commands(sandbox: Arc<Sandbox>, shell: bool) -> Vec<Arc<dyn Command>> {
    let mut commands: Vec<Arc<dyn Command>> = vec![
        Arc::new(ExecutePython(sandbox.clone())),
        Arc::new(ExecutePythonFile(sandbox.clone())),
    ];
    if shell {
        commands.push(Arc::new(ExecuteShell(sandbox)));
    }
    commands
}

struct ExecutePython(Arc<Sandbox>);
struct ExecutePythonFile(Arc<Sandbox>);
struct ExecuteShell(Arc<Sandbox>);

#[async_trait]
impl Command for ExecutePython {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(PYTHON, "Run Python code in the sandbox", Risk::External)
            .arg("code", ArgType::String, "The Python code to run")
            .alias("execute_python_code", &[])
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let code = str_arg(call, "code").to_string();
        run_in_sandbox(&self.0, Program::Python { code }, ctx).await
    }
}

#[async_trait]
impl Command for ExecutePythonFile {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            PYTHON_FILE,
            "Run a Python file of the workspace in the sandbox",
            Risk::External,
        )
        .arg("filename", ArgType::String, "The .py file to run")
        .optional_arg("args", ArgType::StringList, "Command-line arguments")
        .runs_file("filename")
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let path = match normalize_path(str_arg(call, "filename")) {
            Ok(path) => path,
            Err(why) => return ToolOutput::error(format!("Invalid path: {why}")),
        };
        if !path.ends_with(".py") {
            return ToolOutput::error(format!(
                "'{path}' is not a Python file: only .py files can be run"
            ));
        }
        match ctx.workspace.read(&path) {
            Ok(Some(_)) => {}
            Ok(None) => return ToolOutput::error(format!("File '{path}' does not exist.")),
            Err(e) => return ToolOutput::error(format!("The workspace could not be read: {e}")),
        }
        let args = call
            .args
            .get("args")
            .and_then(|v| v.as_array())
            .map(|items| {
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        run_in_sandbox(&self.0, Program::PythonFile { path, args }, ctx).await
    }
}

#[async_trait]
impl Command for ExecuteShell {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            SHELL,
            "Run a shell command line in the sandbox",
            Risk::External,
        )
        .arg("command", ArgType::String, "The command line to run")
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let command = str_arg(call, "command").to_string();
        run_in_sandbox(&self.0, Program::Shell { command }, ctx).await
    }
}

async fn run_in_sandbox(sandbox: &Sandbox, program: Program, ctx: &ToolCtx<'_>) -> ToolOutput {
    let files = match workspace_files(ctx) {
        Ok(files) => files,
        Err(out) => return out,
    };
    match sandbox.run(&program, files, ctx.limits).await {
        Ok(ran) => report(sandbox, &ran),
        Err(why) => ToolOutput::error(format!("The code could not be run: {why}")),
    }
}

fn workspace_files(ctx: &ToolCtx<'_>) -> Result<Vec<(String, Vec<u8>)>, ToolOutput> {
    let unreadable = |e: crate::store::StoreError| {
        ToolOutput::error(format!("The workspace could not be read: {e}"))
    };
    let mut files = Vec::new();
    for (path, _) in ctx.workspace.list().map_err(unreadable)? {
        if let Some(contents) = ctx.workspace.read(&path).map_err(unreadable)? {
            files.push((path, contents));
        }
    }
    Ok(files)
}

/// The run as the agent reads it: how it ended, its output, and what it changed.
fn report(sandbox: &Sandbox, ran: &Ran) -> ToolOutput {
    let mut text = match (ran.code, ran.limit_hit(sandbox.limits())) {
        (_, Some(limit)) => format!("The run was stopped: {limit}."),
        (Some(code), None) => format!("Exit code {code}."),
        (None, None) => format!(
            "The run ended by signal {}.",
            ran.signal
                .map_or_else(|| "?".to_string(), |s| s.to_string())
        ),
    };
    text.push_str(&format!(" ({:.2} s)", ran.elapsed.as_secs_f64()));
    for (name, stream) in [("STDOUT", &ran.stdout), ("STDERR", &ran.stderr)] {
        if !stream.is_empty() {
            text.push_str(&format!("\n{name}:\n{}", stream.trim_end()));
        }
    }
    if ran.output_dropped > 0 {
        text.push_str(&format!(
            "\n({} more bytes of output were not kept)",
            ran.output_dropped
        ));
    }
    let changed: Vec<String> = ran
        .changes
        .ops
        .iter()
        .map(|op| match op {
            WorkspaceOp::Put { path, contents } => format!("{path} ({} bytes)", contents.len()),
            WorkspaceOp::Delete { path } => format!("{path} (deleted)"),
        })
        .collect();
    if !changed.is_empty() {
        text.push_str(&format!("\nFiles changed: {}", changed.join(", ")));
    }
    for note in &ran.changes.notes {
        text.push_str(&format!("\nNote: {note}"));
    }
    ToolOutput {
        outcome: if ran.succeeded() {
            Outcome::Success(text)
        } else {
            Outcome::Error(text)
        },
        // A failed run's files are kept too: what it wrote before failing is often the point.
        ops: ran.changes.ops.clone(),
    }
}
