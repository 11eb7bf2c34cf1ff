//! A run's directory (`RunDir`): the agent's workspace copied into a fresh directory before a
//! sandboxed run, handed to the run's user and measured while it runs, and what the run changed
//! read back as workspace operations (`Changes`: puts and deletes), within the workspace's limits.
//!
//! A file shadowed by a folder of the same name is left out of the copy and never counted as
//! deleted. The read-back walk is bounded by the workspace's size plus `MAX_NEW_ENTRIES`; a walk
//! that stops early or meets an unreadable folder counts nothing as deleted. Links, special files,
//! refused names and files over the limits are not kept, with a note, and nothing is kept if the
//! whole would pass the workspace's limit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::config::WorkspaceConfig;
use crate::core::paths::normalize_path;
use crate::store::WorkspaceOp;

/// Entries a run may add to what it was given, at most: a program that makes millions of files
/// gets the first ones considered and a note, not a walk without end.
const MAX_NEW_ENTRIES: usize = 10_000;

/// The fresh directory of one run, removed when dropped: the run's folder (`work`) and an empty
/// folder its own file tree is built on (`staging`), both in a folder of the bot's.
pub struct RunDir {
    dir: tempfile::TempDir,
    work: PathBuf,
    /// The files as copied in, by workspace path.
    before: BTreeMap<String, Vec<u8>>,
    /// Workspace files the run could not be given (a folder of the same name came first), with
    /// their sizes: they are left as they are, never counted as deleted.
    not_copied: Vec<(String, u64)>,
}

/// What a run changed in the workspace, and what it changed that is not kept.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    pub ops: Vec<WorkspaceOp>,
    /// One line per file not kept, or left out of the run, and why.
    pub notes: Vec<String>,
}

impl RunDir {
    /// A new directory under the system's temporary directory holding `files`.
    pub fn create(files: Vec<(String, Vec<u8>)>) -> std::io::Result<RunDir> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let dir = tempfile::Builder::new()
            .prefix("autothread-run-")
            .tempdir()?;
        // The run's user (the bot's is root) passes through to its folder; no other user may.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
        let work = dir.path().join("work");
        let mut folders = std::fs::DirBuilder::new();
        folders.mode(0o700);
        folders.create(&work)?;
        folders.create(dir.path().join("root"))?;
        let mut run = RunDir {
            dir,
            work,
            before: BTreeMap::new(),
            not_copied: Vec::new(),
        };
        for (path, contents) in files {
            let target = run.work.join(&path);
            let written = match target.parent() {
                Some(parent) => std::fs::create_dir_all(parent)
                    .and_then(|()| std::fs::write(&target, &contents)),
                None => std::fs::write(&target, &contents),
            };
            match written {
                Ok(()) => {
                    run.before.insert(path, contents);
                }
                // A file and a folder of the same name can both be in the store.
                Err(_) => run.not_copied.push((path, contents.len() as u64)),
            }
        }
        Ok(run)
    }

    /// The run's folder.
    pub fn path(&self) -> &Path {
        &self.work
    }

    /// An empty folder of the bot's, where the run's own file tree is mounted.
    pub fn staging(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// The most entries a walk of the directory reads: the workspace's own files and their
    /// folders (at most two entries per file), and what a run may add.
    pub(crate) fn max_entries(&self) -> usize {
        2 * self.before.len() + MAX_NEW_ENTRIES
    }

    /// The folders and files of the bot's copy, each folder before what it holds, relative to it.
    pub(crate) fn entries(&self) -> Vec<(PathBuf, super::namespaces::EntryKind)> {
        use super::namespaces::EntryKind;
        walk(self.path(), self.max_entries())
            .0
            .into_iter()
            .filter_map(|entry| {
                let meta = std::fs::symlink_metadata(&entry).ok()?;
                let kind = if meta.is_dir() {
                    EntryKind::Folder
                } else {
                    EntryKind::File
                };
                let relative = entry.strip_prefix(self.path()).ok()?.to_path_buf();
                Some((relative, kind))
            })
            .collect()
    }

    /// Gives the directory and everything in it to `uid`, the user the run becomes.
    pub fn give_to(&self, uid: u32, gid: u32) -> std::io::Result<()> {
        for entry in walk(self.path(), self.max_entries()).0 {
            std::os::unix::fs::lchown(&entry, Some(uid), Some(gid))?;
        }
        std::os::unix::fs::lchown(self.path(), Some(uid), Some(gid))
    }

    /// The bytes under the directory now, to stop a run filling the disk; and whether the walk
    /// stopped at its bound (a run making that many entries is filling the disk too).
    pub fn bytes_used(&self) -> (u64, bool) {
        let (entries, cut) = walk(self.path(), self.max_entries());
        let used = entries
            .iter()
            .filter_map(|p| std::fs::symlink_metadata(p).ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum();
        (used, cut)
    }

    /// What the run changed: files written, made or removed, as workspace operations. A file over
    /// the workspace's limits, with a name the workspace refuses, or that is not a regular file
    /// (a link, a pipe) is not kept, and a note says so; if the whole would pass the workspace's
    /// limit, no change is kept.
    pub fn changes(&self, limits: &WorkspaceConfig) -> Changes {
        self.changes_at(self.path(), limits)
    }

    /// `changes`, read from `root`: the run's own folder, where it is not the bot's copy.
    pub fn changes_at(&self, root: &Path, limits: &WorkspaceConfig) -> Changes {
        let mut changes = Changes::default();
        let (entries, cut) = walk(root, self.max_entries());
        if cut {
            changes.notes.push(
                "the run left more files and folders than can be read back (or a folder it made unreadable); only the first were read back, and no file was counted as deleted"
                    .to_string(),
            );
        }
        // Every workspace name the run left, kept or not: only a name it did not leave was
        // deleted by it.
        let mut present: BTreeSet<String> = BTreeSet::new();
        let mut to_read: Vec<(String, PathBuf)> = Vec::new();
        let mut total: u64 = self.not_copied.iter().map(|(_, size)| size).sum();
        for entry in entries {
            let Ok(meta) = std::fs::symlink_metadata(&entry) else {
                continue;
            };
            if meta.is_dir() {
                continue;
            }
            let Some(name) = workspace_name(root, &entry) else {
                changes.notes.push(format!(
                    "'{}' was not kept: the workspace refuses its name",
                    entry.strip_prefix(root).unwrap_or(&entry).to_string_lossy()
                ));
                continue;
            };
            present.insert(name.clone());
            if !meta.is_file() {
                changes
                    .notes
                    .push(format!("'{name}' was not kept: it is not a regular file"));
                continue;
            }
            if meta.len() > limits.max_file_bytes {
                changes.notes.push(format!(
                    "'{name}' was not kept: {} bytes, and files are limited to {} bytes",
                    meta.len(),
                    limits.max_file_bytes
                ));
                continue;
            }
            total += meta.len();
            to_read.push((name, entry));
        }
        // Measured before anything is read, so that a run cannot make the bot read more than
        // the workspace may hold.
        if total > limits.max_agent_bytes {
            changes.notes.push(format!(
                "no change was kept: the workspace would hold {total} bytes, and it is limited to {} bytes",
                limits.max_agent_bytes
            ));
            return changes;
        }
        for (name, entry) in to_read {
            match std::fs::read(&entry) {
                Ok(contents) => {
                    if self.before.get(&name) != Some(&contents) {
                        changes.ops.push(WorkspaceOp::Put {
                            path: name,
                            contents,
                        });
                    }
                }
                Err(e) => changes
                    .notes
                    .push(format!("'{name}' was not kept: it could not be read ({e})")),
            }
        }
        if !cut {
            for path in self.before.keys() {
                if !present.contains(path) {
                    changes.ops.push(WorkspaceOp::Delete { path: path.clone() });
                }
            }
        }
        for (path, _) in &self.not_copied {
            changes.notes.push(format!(
                "'{path}' was not in the run: a folder of the same name was; it is unchanged"
            ));
        }
        changes
    }
}

impl Drop for RunDir {
    /// Makes every folder the run left removable again (a run can take its own rights away from
    /// one), so that the temporary directory's own removal, which follows, leaves nothing behind.
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let mut folders = vec![self.path().to_path_buf()];
        let mut seen = 0usize;
        while let Some(folder) = folders.pop() {
            let _ = std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700));
            let Ok(entries) = std::fs::read_dir(&folder) else {
                continue;
            };
            for entry in entries.flatten() {
                seen += 1;
                if seen > self.max_entries() {
                    return;
                }
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    folders.push(entry.path());
                }
            }
        }
    }
}

/// A path under `root` as the workspace names it, if the workspace accepts the name as it is.
fn workspace_name(root: &Path, entry: &Path) -> Option<String> {
    let relative = entry.strip_prefix(root).ok()?.to_str()?;
    let normalized = normalize_path(relative).ok()?;
    (normalized == relative).then_some(normalized)
}

/// Every entry under `root` (not following links), at most `max`; and whether the walk is
/// incomplete: it stopped there, or a folder could not be read (a run can make one unreadable,
/// and what is in it must not be taken for deleted).
fn walk(root: &Path, max: usize) -> (Vec<PathBuf>, bool) {
    let mut found = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            return (found, true);
        };
        for entry in entries.flatten() {
            if found.len() >= max {
                return (found, true);
            }
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                folders.push(path.clone());
            }
            found.push(path);
        }
    }
    (found, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> WorkspaceConfig {
        WorkspaceConfig {
            max_file_bytes: 100,
            max_agent_bytes: 150,
            ..WorkspaceConfig::default()
        }
    }

    #[test]
    fn a_run_brings_back_what_it_wrote_changed_and_removed_and_nothing_else() {
        let run = RunDir::create(vec![
            ("keep.txt".into(), b"same".to_vec()),
            ("edit.txt".into(), b"old".to_vec()),
            ("gone.txt".into(), b"bye".to_vec()),
            ("clash".into(), b"a file".to_vec()),
            (
                "clash/inner.txt".into(),
                b"in a folder of the same name".to_vec(),
            ),
        ])
        .unwrap();
        let root = run.path().to_path_buf();
        std::fs::write(root.join("edit.txt"), b"new").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::create_dir_all(root.join("out")).unwrap();
        std::fs::write(root.join("out/result.csv"), b"a,b\n").unwrap();
        std::fs::write(root.join("big.bin"), vec![0u8; 101]).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
        // A file the run replaced with a link is not kept, and not deleted either.
        std::fs::remove_file(root.join("keep.txt")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("keep.txt")).unwrap();
        std::fs::write(root.join("bad\u{202e}name"), b"x").unwrap();
        let changes = run.changes(&limits());
        let mut ops = changes.ops.clone();
        ops.sort_by_key(|op| format!("{op:?}"));
        assert_eq!(
            ops,
            vec![
                WorkspaceOp::Delete {
                    path: "gone.txt".into()
                },
                WorkspaceOp::Put {
                    path: "edit.txt".into(),
                    contents: b"new".to_vec()
                },
                WorkspaceOp::Put {
                    path: "out/result.csv".into(),
                    contents: b"a,b\n".to_vec()
                },
            ]
        );
        let notes = changes.notes.join("\n");
        assert!(
            notes.contains("'big.bin' was not kept: 101 bytes"),
            "{notes}"
        );
        assert!(
            notes.contains("'link' was not kept: it is not a regular file"),
            "{notes}"
        );
        assert!(notes.contains("'keep.txt' was not kept"), "{notes}");
        assert!(notes.contains("refuses its name"), "{notes}");
        assert!(
            notes.contains("'clash/inner.txt' was not in the run"),
            "{notes}"
        );
    }

    #[test]
    fn a_run_that_would_overfill_the_workspace_keeps_nothing() {
        let run = RunDir::create(vec![("a.txt".into(), vec![b'a'; 90])]).unwrap();
        std::fs::write(run.path().join("b.txt"), vec![b'b'; 90]).unwrap();
        let changes = run.changes(&limits());
        assert!(changes.ops.is_empty());
        assert!(
            changes.notes[0].contains("no change was kept"),
            "{:?}",
            changes.notes
        );
        let path = run.path().to_path_buf();
        drop(run);
        assert!(!path.exists(), "the run's directory is removed");
        assert!(
            !path.parent().unwrap().exists(),
            "with the folder it was in"
        );
    }
}
