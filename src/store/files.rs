//! Workspace files as the store keeps them (compressed, see `packed`): read back as written, and
//! listed with the sizes they were written with. `put_file_from_outside` lands a file a person
//! gave the agent (an Agent Protocol upload) with its undo record, its audit entry and its digest
//! in `uploads` (which tells a person's file from the agent's), all or none, without writing the
//! agent's record, which its actor owns.

use std::collections::HashSet;

use super::ahead::{TreeId, Writes};
use super::{agent_prefix, file_key, packed, Fence, Store, StoreError, WorkspaceOp};
use crate::core::audit::AuditEntry;
use crate::core::digest::sha256_tagged;

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

    /// Puts a file into an agent's workspace from outside its loop, at its cycle `cycle` (so a
    /// rewind past it removes the file), with the trail's entry and the digest that marks it as a
    /// person's, all or none, and fenced by the agent's lease when `fence` is given. Not flushed:
    /// the caller flushes (`runtime::uploads` writes it under a lock no flush should be waited in).
    pub fn put_file_from_outside(
        &self,
        agent: &str,
        cycle: u64,
        path: &str,
        contents: Vec<u8>,
        entry: &AuditEntry,
        fence: Option<Fence>,
    ) -> Result<(), StoreError> {
        let mut writes = Writes::default();
        let audit_held = self.put_audit(&mut writes, agent, &[entry])?;
        writes.put(
            TreeId::Uploads,
            file_key(agent, path),
            sha256_tagged(&contents).into_bytes(),
        );
        let op = WorkspaceOp::Put {
            path: path.to_string(),
            contents,
        };
        self.record_undo(&mut writes, agent, cycle, std::slice::from_ref(&op))?;
        if let WorkspaceOp::Put { path, contents } = op {
            writes.put(TreeId::Workspace, file_key(agent, &path), contents);
        }
        self.write_together_fenced(&writes, agent, fence)?;
        drop(audit_held);
        Ok(())
    }

    /// The agent's files that still hold what a person put there from outside: the agent did not
    /// create them (the Agent Protocol's `agent_created: false`). A file the agent wrote since,
    /// with other bytes, is its own again.
    pub fn files_put_from_outside(&self, agent: &str) -> Result<HashSet<String>, StoreError> {
        let prefix = agent_prefix(agent);
        let mut files = HashSet::new();
        for item in self.uploads.scan_prefix(&prefix) {
            let (key, digest) = item?;
            let path = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            let unchanged = self
                .read_file(agent, &path)?
                .is_some_and(|contents| sha256_tagged(&contents).as_bytes() == &digest[..]);
            if unchanged {
                files.insert(path);
            }
        }
        Ok(files)
    }
}
