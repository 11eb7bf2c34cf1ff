//! Workspace files as the store keeps them (compressed, see `packed`): read back as written, and
//! listed with the sizes they were written with.

use super::{agent_prefix, file_key, packed, Store, StoreError};

impl Store {
    /// An agent's file as it was written, if it exists.
    pub fn read_file(&self, agent: &str, path: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.workspace
            .get(file_key(agent, path))?
            .map(|stored| self.file_contents(&stored))
            .transpose()
    }

    /// A workspace file (or undo record) as stored, as it was written.
    pub(super) fn file_contents(&self, stored: &[u8]) -> Result<Vec<u8>, StoreError> {
        packed::unpack(stored)
            .map(std::borrow::Cow::into_owned)
            .map_err(|e| StoreError::Corrupt(e.to_string()))
    }

    /// The size of a workspace file as written, whichever way it is stored.
    pub(super) fn file_len(&self, stored: &[u8]) -> u64 {
        packed::unpacked_len(stored)
    }

    /// All files of an agent with their sizes, sorted by path.
    pub fn list_files(&self, agent: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let prefix = agent_prefix(agent);
        let mut files = Vec::new();
        for item in self.workspace.scan_prefix(&prefix) {
            let (key, value) = item?;
            let path = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            files.push((path, self.file_len(&value)));
        }
        Ok(files)
    }
}
