//! `clone_repository(url, path)`: the tip of a public git repository's default branch copied into a
//! new folder of the workspace, through the guarded web client, within the workspace's limits; its
//! history is not kept.
//!
//! The folder must be new. The workspace's room and file limit are passed to `web::git::clone_tip`,
//! and the files become `WorkspaceOp::Put`s under the folder, committed with the step.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::web::UNTRUSTED_NOTE;
use super::workspace::normalize_path;
use super::{str_arg, Command, ToolCtx, ToolOutput};
use crate::core::commands::Egress;
use crate::core::commands::RuleArgument;
use crate::core::commands::{ArgType, CommandSpec, Risk};
use crate::core::history::Outcome;
use crate::core::reply::CommandCall;
use crate::store::WorkspaceOp;
use crate::web::git::{clone_tip, Checkout, CloneLimits};

pub const NAME: &str = "clone_repository";

/// Files one clone may bring at most: a repository of more is refused whole.
const MAX_FILES: usize = 10_000;
/// Paths the result lists; the rest are counted.
const LISTED_PATHS: usize = 40;

pub fn commands() -> Vec<Arc<dyn Command>> {
    vec![Arc::new(CloneRepository)]
}

struct CloneRepository;

#[async_trait]
impl Command for CloneRepository {
    fn spec(&self) -> CommandSpec {
        CommandSpec::new(
            NAME,
            "Clone a public git repository (no history) into a new folder",
            Risk::Network,
        )
        .arg("url", ArgType::String, "The repository's URL")
        .reads_untrusted()
        .egress(Egress::Url("url".into()))
        .rule_argument(RuleArgument::Url("url".into()))
        .arg(
            "path",
            ArgType::String,
            "The workspace folder to clone into; it must not exist yet",
        )
    }

    async fn run(&self, call: &CommandCall, ctx: &ToolCtx<'_>) -> ToolOutput {
        let Some(web) = ctx.web else {
            return ToolOutput::error("Web access is switched off for this bot.");
        };
        let folder = match normalize_path(str_arg(call, "path")) {
            Ok(folder) => folder,
            Err(why) => return ToolOutput::error(format!("Invalid path: {why}")),
        };
        let files = match ctx.workspace.list() {
            Ok(files) => files,
            Err(e) => return ToolOutput::error(format!("The workspace could not be read: {e}")),
        };
        if let Some(clash) = clash_with(&files, &folder) {
            return ToolOutput::error(clash);
        }
        let used: u64 = files.iter().map(|(_, size)| size).sum();
        let limits = CloneLimits {
            max_download_bytes: web.config.clone_max_bytes,
            max_file_bytes: ctx.limits.max_file_bytes,
            max_total_bytes: ctx.limits.max_agent_bytes.saturating_sub(used),
            max_files: MAX_FILES,
            timeout: Duration::from_secs(web.config.clone_timeout_secs),
        };
        let url = str_arg(call, "url").trim();
        match clone_tip(&web.fetcher, url, &limits).await {
            Ok(checkout) => cloned(url, &folder, checkout),
            Err(e) => ToolOutput::error(format!("The repository was not cloned: {e}.")),
        }
    }
}

/// Why `folder` cannot receive a clone: it holds files already, or a file has its name or the
/// name of a folder above it.
fn clash_with(files: &[(String, u64)], folder: &str) -> Option<String> {
    let inside = format!("{folder}/");
    for (path, _) in files {
        if path == folder || folder.starts_with(&format!("{path}/")) {
            return Some(format!(
                "'{path}' is a file in the workspace; clone into another folder."
            ));
        }
        if path.starts_with(&inside) {
            return Some(format!(
                "The folder '{folder}' already holds files; clone into a new folder."
            ));
        }
    }
    None
}

/// The result the agent reads, and the files as workspace operations under `folder`.
fn cloned(url: &str, folder: &str, checkout: Checkout) -> ToolOutput {
    let bytes: usize = checkout.files.iter().map(|(_, c)| c.len()).sum();
    let short_commit: String = checkout.commit.chars().take(12).collect();
    let branch = checkout
        .branch
        .as_deref()
        .map_or(String::new(), |b| format!("branch {b}, "));
    let mut text = format!(
        "{UNTRUSTED_NOTE}\nCloned {url} ({branch}commit {short_commit}) into '{folder}/': {} files, {bytes} bytes ({} bytes downloaded). Its history (.git) is not kept.",
        checkout.files.len(),
        checkout.downloaded
    );
    if !checkout.files.is_empty() {
        let listed: Vec<&str> = checkout
            .files
            .iter()
            .take(LISTED_PATHS)
            .map(|(path, _)| path.as_str())
            .collect();
        text.push_str(&format!("\nFiles: {}", listed.join(", ")));
        if checkout.files.len() > LISTED_PATHS {
            text.push_str(&format!(
                " and {} more",
                checkout.files.len() - LISTED_PATHS
            ));
        }
    }
    // A name the repository may hold can still be too long for the workspace once under the
    // folder: such a file is left out, so that every file kept can be read and deleted again.
    let mut left_out = checkout.left_out;
    let mut ops = Vec::new();
    for (path, contents) in checkout.files {
        let joined = format!("{folder}/{path}");
        match normalize_path(&joined) {
            Ok(normal) if normal == joined => ops.push(WorkspaceOp::Put {
                path: joined,
                contents,
            }),
            Err(why) => left_out.push(format!("'{path}': {why}")),
            Ok(_) => left_out.push(format!("'{path}': the workspace refuses its name")),
        }
    }
    if !left_out.is_empty() {
        text.push_str(&format!("\nLeft out: {}", left_out.join("; ")));
        if checkout.also_left_out > 0 {
            text.push_str(&format!(" and {} more", checkout.also_left_out));
        }
    }
    ToolOutput {
        outcome: Outcome::Success(text),
        ops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clone_url_is_a_way_out_for_a_tainted_agent() {
        assert_eq!(CloneRepository.spec().egress, [Egress::Url("url".into())]);
    }

    #[test]
    fn a_clone_goes_only_into_a_new_folder() {
        let files = vec![("notes.txt".to_string(), 3), ("repo/a.txt".to_string(), 1)];
        assert_eq!(clash_with(&files, "fresh"), None);
        assert_eq!(clash_with(&files, "rep"), None, "a prefix is another name");
        assert!(clash_with(&files, "repo")
            .unwrap()
            .contains("already holds files"));
        assert!(clash_with(&files, "notes.txt")
            .unwrap()
            .contains("is a file"));
        assert!(clash_with(&files, "notes.txt/inner")
            .unwrap()
            .contains("is a file"));
    }
}
