//! Exports of an agent for people: the Markdown transcript (with its sub-agents' chats), its audit
//! trail (whole, or a page at a time) and its workspace as a zip archive.

use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use crate::budget::ledger::Ledger;
use crate::budget::Budgets;
use crate::core::audit::AUDIT_ARGUMENTS_MAX;
use crate::core::budget::format_usd;
use crate::core::history::truncate_chars;
use crate::core::prompt::Role;
use crate::core::state::AgentState;
use crate::core::transcript::render_transcript;
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot build the archive: {0}")]
    Zip(#[from] zip::result::ZipError),
    #[error("cannot build the archive: {0}")]
    Io(#[from] std::io::Error),
}

/// The Markdown transcript: the agent's own cycles, then each of its sub-agents' chats, with what
/// each step and the whole agent cost.
pub fn transcript(store: &Store, state: &AgentState) -> Result<String, ExportError> {
    let spent = Ledger::new(store)?
        .account(&Budgets::agent_account(&state.id))?
        .spent;
    let episodes = store.all_episodes(&state.id)?;
    let mut out = render_transcript(state, &episodes, spent);
    let subagents = store.subagents(&state.id)?;
    if !subagents.is_empty() {
        out.push_str("\n## Sub-agents\n");
        for agent in subagents {
            out.push_str(&format!(
                "\n### {} (key {}): {}\n\nStarted {}, cost {}.\n\n",
                agent.name,
                agent.key,
                agent.task,
                agent.created_at.format("%Y-%m-%d %H:%M UTC"),
                format_usd(agent.spent)
            ));
            // The charter (first message) is ours; the conversation follows.
            for message in agent.messages.iter().skip(1) {
                let who = match message.role {
                    Role::User => "**Agent:**",
                    Role::Assistant => "**Sub-agent:**",
                    Role::System => "**System:**",
                };
                out.push_str(&format!("{who} {}\n\n", message.content.trim()));
            }
        }
    }
    Ok(out)
}

/// Entries on one page of `/agent audit` and `autothread audit`.
pub const AUDIT_PER_PAGE: usize = 8;
/// A paged entry is cut to this many characters, so that a page fits one Discord message.
const AUDIT_LINE_MAX: usize = 220;

/// The agent's audit trail as Markdown, oldest first, arguments as the trail keeps them; with
/// `max_bytes`, only the newest entries that fit (an attachment has a size limit), saying how many
/// were left out.
pub fn audit_markdown(
    store: &Store,
    state: &AgentState,
    max_bytes: Option<usize>,
) -> Result<String, ExportError> {
    let mut entries = store.audit_trail(&state.id)?;
    let mut left_out = 0;
    if let Some(max) = max_bytes {
        let mut size = 0;
        let fitting = entries
            .iter()
            .rev()
            .take_while(|entry| {
                size += entry.line(AUDIT_ARGUMENTS_MAX).len() + 32;
                size <= max
            })
            .count();
        left_out = entries.len() - fitting;
        entries.drain(..left_out);
    }
    let mut out = format!(
        "# Audit trail of {} ({})\n\n{} entries, oldest first. Times are UTC. An argument digest \
         identifies the arguments in full, which the transcript's step shows.\n\n",
        state.name(),
        state.id,
        entries.len()
    );
    if left_out > 0 {
        out.push_str(&format!(
            "The {left_out} oldest entries are left out here; `autothread export` writes them all.\n\n"
        ));
    }
    for entry in &entries {
        out.push_str(&format!("- {}", entry.line(AUDIT_ARGUMENTS_MAX)));
        if let Some(digest) = entry.event.shown().map(|s| &s.arguments_digest) {
            out.push_str(&format!(" (digest {digest})"));
        }
        out.push('\n');
    }
    Ok(out)
}

/// Page `page` (0 is the newest) of the agent's trail, as one short text, and how many pages the
/// trail has.
pub fn audit_page_text(
    store: &Store,
    state: &AgentState,
    page: usize,
) -> Result<(String, usize), ExportError> {
    let shown = store.audit_page(&state.id, page, AUDIT_PER_PAGE)?;
    let pages = audit_pages(shown.total);
    if shown.total == 0 {
        let text = format!("Nothing in {}'s audit trail yet.", state.name());
        return Ok((text, pages));
    }
    if shown.entries.is_empty() {
        let text = format!(
            "There is no page {}: {}'s audit trail has {pages}.",
            page + 1,
            state.name()
        );
        return Ok((text, pages));
    }
    let mut out = format!(
        "**Audit trail of {}**: page {} of {pages}, {} entries, newest first (UTC)\n",
        state.name(),
        page + 1,
        shown.total
    );
    for entry in &shown.entries {
        out.push_str(&format!(
            "- {}\n",
            truncate_chars(&entry.line(120), AUDIT_LINE_MAX)
        ));
    }
    Ok((out, pages))
}

/// How many pages a trail of `total` entries takes (at least one).
pub fn audit_pages(total: usize) -> usize {
    total.div_ceil(AUDIT_PER_PAGE).max(1)
}

/// The agent's files as a zip archive, paths as stored (already confined to the workspace), a
/// file that has a folder's name renamed (see `unclash`).
pub fn workspace_zip(store: &Store, agent: &str) -> Result<Vec<u8>, ExportError> {
    let mut archive = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    let paths: Vec<String> = store
        .list_files(agent)?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    for (path, written_as) in paths.iter().zip(unclash(&paths)) {
        let contents = store.read_file(agent, path)?.unwrap_or_default();
        archive.start_file(written_as, options)?;
        archive.write_all(&contents)?;
    }
    Ok(archive.finish()?.into_inner())
}

/// The names files are exported under. A workspace may hold both `notes` and `notes/a.txt`
/// (keys, not a file system), which no disk or archive tool can: the file `notes` is written as
/// `notes (file)` (or `notes (file 2)`…), and both are kept.
pub fn unclash(paths: &[String]) -> Vec<String> {
    use std::collections::HashSet;
    let folders: HashSet<&str> = paths
        .iter()
        .flat_map(|p| p.match_indices('/').map(move |(i, _)| &p[..i]))
        .collect();
    let mut taken: HashSet<String> = paths.iter().cloned().collect();
    paths
        .iter()
        .map(|path| {
            if !folders.contains(path.as_str()) {
                return path.clone();
            }
            let renamed = (1..)
                .map(|n| match n {
                    1 => format!("{path} (file)"),
                    n => format!("{path} (file {n})"),
                })
                .find(|candidate| {
                    !taken.contains(candidate) && !folders.contains(candidate.as_str())
                })
                .unwrap_or_else(|| path.clone());
            taken.insert(renamed.clone());
            renamed
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Commit, WorkspaceOp};
    use std::io::Read;

    #[test]
    fn a_file_with_a_folder_s_name_is_renamed_and_both_are_kept() {
        let paths: Vec<String> = ["clash", "clash/inner.txt", "clash (file)", "plain.txt"]
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(
            unclash(&paths),
            [
                "clash (file 2)",
                "clash/inner.txt",
                "clash (file)",
                "plain.txt"
            ]
        );
    }

    #[test]
    fn the_archive_holds_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let agent = AgentState::for_test("zip1");
        let put = |path: &str, text: &str| WorkspaceOp::Put {
            path: path.into(),
            contents: text.as_bytes().to_vec(),
        };
        store
            .commit(&Commit {
                state: Some(&agent),
                workspace: vec![put("a.txt", "alpha"), put("docs/b.md", "# beta")],
                ..Default::default()
            })
            .unwrap();
        let bytes = workspace_zip(&store, "zip1").unwrap();
        let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
        assert_eq!(archive.len(), 2);
        let mut text = String::new();
        archive
            .by_name("docs/b.md")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "# beta");
    }
}
