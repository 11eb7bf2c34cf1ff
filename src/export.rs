//! Exports of an agent for people: the Markdown transcript (with its sub-agents' chats) and its
//! workspace as a zip archive.

use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use crate::budget::ledger::Ledger;
use crate::budget::Budgets;
use crate::core::budget::format_usd;
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
