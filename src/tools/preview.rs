//! What a file command would change, for the person deciding on it: a unified diff against the file
//! as it is, and a fingerprint of that file, so that a run can tell whether the file changed after
//! the card was shown.
//!
//! `preview` diffs what a `write_file` or `append_to_file` would change with `similar`, under a
//! timeout so a card never waits on a large diff; `FileBase` is the file's fingerprint when the
//! card was shown, held in memory by the actor and checked by `runtime::execute` before the command
//! runs.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use similar::TextDiff;

use super::workspace::normalize_path;
use super::AgentFiles;
use crate::core::reply::CommandCall;
use crate::store::StoreError;

/// The file a proposal was shown against: its fingerprint then, or `None` when it did not exist.
/// Fingerprints live only in memory (a restart shows the card again, and takes a new one), so the
/// process's own hasher is enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileBase(Option<u64>);

/// A file command's change, as shown on its card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The workspace path the command writes.
    pub path: String,
    /// The whole unified diff (empty when the command changes nothing).
    pub diff: String,
    /// The file as it was when the diff was made.
    pub base: FileBase,
}

/// How long a diff may take before `similar` settles for a coarser one: a card must not wait.
const DIFF_TIMEOUT: Duration = Duration::from_millis(200);

/// The fingerprint of a file's contents (`None`: no such file).
pub fn file_base_of(contents: Option<&[u8]>) -> FileBase {
    FileBase(contents.map(|bytes| {
        let mut hasher = DefaultHasher::new();
        bytes.hash(&mut hasher);
        hasher.finish()
    }))
}

/// The fingerprint of `path` as the workspace holds it now.
pub fn file_base(files: &AgentFiles<'_>, path: &str) -> Result<FileBase, StoreError> {
    let contents = files.read(path)?;
    Ok(file_base_of(contents.as_deref()))
}

/// The change `call` would make, for the commands that write a file (`write_file`,
/// `append_to_file`); `None` for any other command or an argument the command would refuse.
pub fn preview(call: &CommandCall, files: &AgentFiles<'_>) -> Option<Preview> {
    let text_arg = match call.name.as_str() {
        "write_file" => "contents",
        "append_to_file" => "text",
        _ => return None,
    };
    let path = normalize_path(call.args.get("filename")?.as_str()?).ok()?;
    let typed = call.args.get(text_arg)?.as_str()?;
    let before = files.read(&path).ok()?;
    let base = file_base_of(before.as_deref());
    let old = before
        .as_deref()
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    let new = if call.name == "append_to_file" {
        format!("{old}{typed}")
    } else {
        typed.to_string()
    };
    let old_name = if before.is_some() {
        format!("a/{path}")
    } else {
        "/dev/null".to_string()
    };
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(old.as_ref(), new.as_str())
        .unified_diff()
        .context_radius(3)
        .header(&old_name, &format!("b/{path}"))
        .to_string();
    Some(Preview { path, diff, base })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::{Commit, Store, WorkspaceOp};

    fn call(name: &str, args: serde_json::Value) -> CommandCall {
        CommandCall {
            name: name.into(),
            args: args.as_object().unwrap().clone(),
        }
    }

    fn put(store: &Store, path: &str, text: &str) {
        let agent = crate::core::state::AgentState::for_test("a1");
        store
            .commit(&Commit {
                state: Some(&agent),
                workspace: vec![WorkspaceOp::Put {
                    path: path.into(),
                    contents: text.as_bytes().to_vec(),
                }],
                ..Default::default()
            })
            .unwrap();
    }

    #[test]
    fn previews_show_a_unified_diff_and_fingerprint_the_file_they_were_made_against() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let files = AgentFiles::new(&store, "a1");
        let write = call(
            "write_file",
            json!({"filename": "./notes/haiku.txt", "contents": "one\ntwo\n"}),
        );

        let new_file = preview(&write, &files).unwrap();
        assert_eq!(new_file.path, "notes/haiku.txt");
        assert_eq!(
            new_file.diff,
            "--- /dev/null\n+++ b/notes/haiku.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"
        );

        put(&store, "notes/haiku.txt", "one\n2\n");
        let changed = preview(&write, &files).unwrap();
        assert!(changed.diff.contains("-2\n+two\n"), "{}", changed.diff);
        assert_ne!(changed.base, new_file.base, "the file now exists");
        assert_eq!(changed.base, file_base(&files, "notes/haiku.txt").unwrap());

        let append = call(
            "append_to_file",
            json!({"filename": "notes/haiku.txt", "text": "three\n"}),
        );
        let appended = preview(&append, &files).unwrap();
        assert!(appended.diff.contains(" 2\n+three\n"), "{}", appended.diff);

        put(&store, "notes/haiku.txt", "one\ntwo\n");
        assert!(preview(&write, &files).unwrap().diff.is_empty());
        assert_ne!(file_base(&files, "notes/haiku.txt").unwrap(), changed.base);

        for other in [
            call("read_file", json!({"filename": "notes/haiku.txt"})),
            call(
                "write_file",
                json!({"filename": "../escape", "contents": "x"}),
            ),
        ] {
            assert_eq!(preview(&other, &files), None);
        }
    }
}
