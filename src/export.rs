//! Exports of an agent for people: the Markdown transcript and its workspace as a zip archive.

use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

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

/// The agent's files as a zip archive, paths as stored (already confined to the workspace).
pub fn workspace_zip(store: &Store, agent: &str) -> Result<Vec<u8>, ExportError> {
    let mut archive = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    for (path, _) in store.list_files(agent)? {
        let contents = store.read_file(agent, &path)?.unwrap_or_default();
        archive.start_file(path, options)?;
        archive.write_all(&contents)?;
    }
    Ok(archive.finish()?.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::AgentState;
    use crate::store::{Commit, WorkspaceOp};
    use std::io::Read;

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
