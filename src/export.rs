//! Exports of an agent for people: the Markdown transcript (with its sub-agents' chats), its audit
//! trail (whole, or a page at a time) and its workspace as a zip archive.
//!
//! The transcript shows each step's cost and the agent's total from the ledger. `audit_markdown` is
//! the whole trail with each shown command's digest; `audit_page_text` is a page of
//! `AUDIT_PER_PAGE` entries, each cut to fit one Discord message. In the zip, a file named like a
//! folder is exported as `name (file)` and both are kept (`unclash`).

use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use crate::budget::ledger::Ledger;
use crate::budget::Budgets;
use crate::core::audit::AUDIT_ARGUMENTS_MAX;
use crate::core::budget::format_usd;
use crate::core::message::Role;
use crate::core::state::AgentState;
use crate::core::text::truncate_chars;
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

/// The longest name a file is exported under, in bytes: a workspace path's limit, which keeps
/// every part of it within what a disk takes for one name (255 bytes on most file systems).
const MAX_EXPORTED_PATH_BYTES: usize = 255;

/// Why a workspace file is exported under another name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renamed {
    /// A folder has the same name (see `unclash`).
    FolderClash,
    /// Its name, once it had to change, grew past what a disk takes.
    TooLong,
}

/// One workspace file as an export writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportName {
    /// Its path in the workspace.
    pub path: String,
    /// The name it is exported under, relative to the workspace's folder in the export.
    pub written_as: String,
    pub renamed: Option<Renamed>,
}

impl ExportName {
    /// What an export says of a renamed file, with `folder` the workspace's place in it
    /// (`workspace/`, or nothing in the zip).
    pub fn note(&self, folder: &str) -> Option<String> {
        let why = match self.renamed? {
            Renamed::FolderClash => "a folder has the same name",
            Renamed::TooLong => "its name had to change and would have been too long",
        };
        Some(format!(
            "{folder}{} is written as {folder}{}: {why}.",
            self.path, self.written_as
        ))
    }
}

/// The names the files at `paths` are exported under: their own, unless a folder has the same
/// name (see `unclash`); a name that grows past `MAX_EXPORTED_PATH_BYTES` that way is cut short
/// and numbered, keeping its extension.
pub fn export_names(paths: &[String]) -> Vec<ExportName> {
    use std::collections::HashSet;
    let unclashed = unclash(paths);
    let folders: HashSet<&str> = paths
        .iter()
        .flat_map(|p| p.match_indices('/').map(move |(i, _)| &p[..i]))
        .collect();
    let mut taken: HashSet<String> = unclashed.iter().cloned().collect();
    paths
        .iter()
        .zip(unclashed.iter())
        .map(|(path, written_as)| {
            if written_as == path {
                return ExportName {
                    path: path.clone(),
                    written_as: path.clone(),
                    renamed: None,
                };
            }
            if written_as.len() <= MAX_EXPORTED_PATH_BYTES {
                return ExportName {
                    path: path.clone(),
                    written_as: written_as.clone(),
                    renamed: Some(Renamed::FolderClash),
                };
            }
            let shortened = (1..)
                .map(|n| shortened(path, n))
                .find(|candidate| {
                    !taken.contains(candidate) && !folders.contains(candidate.as_str())
                })
                .unwrap_or_else(|| path.clone());
            taken.insert(shortened.clone());
            ExportName {
                path: path.clone(),
                written_as: shortened,
                renamed: Some(Renamed::TooLong),
            }
        })
        .collect()
}

/// `path` cut to fit `MAX_EXPORTED_PATH_BYTES` with `~n` before its extension (a short one is
/// kept, so the file still opens with the same program), cut on a character's boundary.
fn shortened(path: &str, n: usize) -> String {
    let (folder, name) = match path.rsplit_once('/') {
        Some((folder, name)) => (format!("{folder}/"), name),
        None => (String::new(), path),
    };
    let extension = name
        .rsplit_once('.')
        .map(|(_, ext)| ext)
        .filter(|ext| !ext.is_empty() && ext.len() <= 16)
        .map_or(String::new(), |ext| format!(".{ext}"));
    let stem = &name[..name.len() - extension.len()];
    let suffix = format!("~{n}{extension}");
    let room = MAX_EXPORTED_PATH_BYTES.saturating_sub(folder.len() + suffix.len());
    let mut cut = room.min(stem.len());
    while !stem.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{folder}{}{suffix}", &stem[..cut])
}

/// The name of the file in the zip that says what was renamed or left out.
pub const NOTES_NAME: &str = "EXPORT-NOTES.txt";

/// The agent's workspace as a zip archive, and what the archive's notes say.
pub struct WorkspaceArchive {
    pub bytes: Vec<u8>,
    /// A line for each file renamed or left out; the archive holds them as `NOTES_NAME` too.
    pub notes: Vec<String>,
}

/// The agent's files as a zip archive, paths as stored (already confined to the workspace), a
/// file renamed where it must be (see `export_names`). A file that cannot be read or added is
/// left out and named in the notes; every other file is in the archive.
pub fn workspace_zip(store: &Store, agent: &str) -> Result<WorkspaceArchive, ExportError> {
    let mut archive = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    let paths: Vec<String> = store
        .list_files(agent)?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let names = export_names(&paths);
    let mut notes: Vec<String> = names.iter().filter_map(|name| name.note("")).collect();
    for name in &names {
        let contents = match store.read_file(agent, &name.path) {
            Ok(Some(contents)) => contents,
            // Deleted since it was listed: nothing to keep.
            Ok(None) => continue,
            Err(e) => {
                notes.push(format!(
                    "{} is left out: it could not be read ({e}).",
                    name.path
                ));
                continue;
            }
        };
        if let Err(e) = archive.start_file(name.written_as.as_str(), options) {
            notes.push(format!("{} is left out: {e}.", name.path));
            continue;
        }
        if let Err(e) = archive.write_all(&contents) {
            // The entry begun for it is taken out again, so the archive stays whole.
            archive.abort_file()?;
            notes.push(format!("{} is left out: {e}.", name.path));
        }
    }
    if !notes.is_empty() {
        let taken: std::collections::HashSet<&str> =
            names.iter().map(|n| n.written_as.as_str()).collect();
        let notes_name = (1..)
            .map(|n| match n {
                1 => NOTES_NAME.to_string(),
                n => format!("EXPORT-NOTES ({n}).txt"),
            })
            .find(|candidate| !taken.contains(candidate.as_str()))
            .unwrap_or_else(|| NOTES_NAME.to_string());
        archive.start_file(notes_name, options)?;
        archive.write_all(format!("{}\n", notes.join("\n")).as_bytes())?;
    }
    Ok(WorkspaceArchive {
        bytes: archive.finish()?.into_inner(),
        notes,
    })
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

    /// A store holding agent `agent`'s files `files`, with `broken` stored damaged (a compressed
    /// value cut short, which cannot be read back).
    fn store_with(agent: &str, files: &[(&str, &str)], broken: &str) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let state = AgentState::for_test(agent);
        let workspace = files
            .iter()
            .map(|(path, text)| WorkspaceOp::Put {
                path: path.to_string(),
                contents: text.as_bytes().to_vec(),
            })
            .collect();
        store
            .commit(&Commit {
                state: Some(&state),
                workspace,
                ..Default::default()
            })
            .unwrap();
        let packed = crate::store::packed::pack("word ".repeat(2000).into_bytes());
        store
            .db()
            .open_tree("workspace")
            .unwrap()
            .insert(format!("{agent}/{broken}"), &packed[..packed.len() / 2])
            .unwrap();
        (dir, store)
    }

    fn entries(bytes: &[u8]) -> Vec<(String, String)> {
        let mut archive = zip::ZipArchive::new(Cursor::new(bytes.to_vec())).unwrap();
        (0..archive.len())
            .map(|i| {
                let mut file = archive.by_index(i).unwrap();
                let mut text = String::new();
                file.read_to_string(&mut text).unwrap();
                (file.name().unwrap().to_string(), text)
            })
            .collect()
    }

    #[test]
    fn a_255_byte_name_keeps_its_name_and_a_file_that_cannot_be_read_is_left_out_and_named() {
        let long = format!("{}.txt", "n".repeat(251));
        assert_eq!(long.len(), 255);
        let (_dir, store) = store_with(
            "zip2",
            &[(&long, "long"), ("notes/a.md", "alpha")],
            "broken.bin",
        );
        let archive = workspace_zip(&store, "zip2").unwrap();
        assert_eq!(archive.notes.len(), 1, "{:?}", archive.notes);
        assert!(
            archive.notes[0].starts_with("broken.bin is left out: it could not be read"),
            "{:?}",
            archive.notes
        );
        let entries = entries(&archive.bytes);
        let names: Vec<&str> = entries.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, [long.as_str(), "notes/a.md", NOTES_NAME]);
        assert_eq!(entries[0].1, "long");
        assert_eq!(entries[1].1, "alpha");
        assert_eq!(entries[2].1, format!("{}\n", archive.notes[0]));
    }

    #[test]
    fn a_name_that_must_change_and_would_grow_too_long_is_cut_and_said_so() {
        let stem = "s".repeat(246);
        let file = format!("{stem}.md");
        // The longest a file beside a folder of its name can be: the folder's file ("…/x") is
        // at the workspace's limit of 255 bytes, and " (file)" would take the name past it.
        let paths = vec![file.clone(), format!("{file}/x")];
        let names = export_names(&paths);
        let renamed = &names[0];
        assert_eq!(renamed.renamed, Some(Renamed::TooLong));
        assert_eq!(renamed.written_as, format!("{stem}~1.md"));
        assert_eq!(names[1].written_as, paths[1]);
        assert_eq!(names[1].renamed, None);
        let note = renamed.note("workspace/").unwrap();
        assert!(
            note.contains(&format!("is written as workspace/{}", renamed.written_as)),
            "{note}"
        );
        // In the zip too: both files, the renamed one named in the notes.
        let (_dir, store) = store_with(
            "zip3",
            &[(&paths[0], "file"), (&paths[1], "inner")],
            "other/broken.bin",
        );
        let archive = workspace_zip(&store, "zip3").unwrap();
        let entries = entries(&archive.bytes);
        let names: Vec<&str> = entries.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [renamed.written_as.as_str(), paths[1].as_str(), NOTES_NAME]
        );
        assert_eq!(entries[0].1, "file");
        assert!(
            archive.notes[0].contains("its name had to change"),
            "{:?}",
            archive.notes
        );
    }

    #[test]
    fn a_cut_name_ends_on_a_character_s_boundary() {
        // After the "a", each "é" (two bytes) ends on an odd byte: the room left is even.
        let path = format!("a{}.txt", "é".repeat(130));
        let cut = shortened(&path, 12);
        assert!(cut.len() <= MAX_EXPORTED_PATH_BYTES, "{}", cut.len());
        assert!(cut.ends_with("é~12.txt"), "{cut}");
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
        let bytes = workspace_zip(&store, "zip1").unwrap().bytes;
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
