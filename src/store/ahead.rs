//! Writes that must land together across trees, made atomic without sled transactions: the whole
//! set (`Writes`, puts and removes on named trees, `TreeId`, framed compactly rather than as JSON)
//! is first stored under one key of the `ahead` tree, then applied key by key, then that key is
//! removed (`Store::write_together`). sled recovers a prefix of its log after a crash, so a set cut
//! short is still written ahead, and the store applies it again when it is opened
//! (`Store::finish_writes_cut_short`).
//!
//! Why not a transaction: sled writes and syncs its log buffer before and after every transaction
//! (about three synced writes each, whatever its size), which was most of a cycle's disk writes and
//! time. A set written ahead costs two more small log records and no sync of its own; its
//! durability comes from the flush that follows, as before.
//!
//! An agent's record, the largest value of most sets, is not copied into its set (its brief, kept
//! apart and written only when it changes, is: see `agent_records`): the set names it by a digest
//! (its `Anchor`: key, length and CRC-32) and the state is written first after the set, then the
//! rest. Since sled recovers a prefix, a set found at open whose anchor is not the stored state was
//! cut short before anything of it was applied, and is dropped; one whose anchor landed is
//! finished.
//!
//! `apply_write` also packs workspace files and undo records (see `packed`) and keeps each agent's workspace size
//! current (see `workspace_sizes`).

use super::{kv, packed, Store, StoreError};

/// The trees a set of writes may touch. The numbers are stored: never reuse one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum TreeId {
    Agents = 1,
    Episodes = 2,
    Journal = 3,
    Workspace = 4,
    Audit = 5,
    Rules = 6,
    WorkspaceUndo = 7,
    AuditChunks = 8,
    EpisodeChunks = 9,
    AgentBriefs = 10,
    Uploads = 11,
    /// Written only in one transaction (a fenced commit), never ahead: older builds know no 12.
    Decisions = 12,
}

impl TreeId {
    fn from_byte(byte: u8) -> Option<TreeId> {
        Some(match byte {
            1 => TreeId::Agents,
            2 => TreeId::Episodes,
            3 => TreeId::Journal,
            4 => TreeId::Workspace,
            5 => TreeId::Audit,
            6 => TreeId::Rules,
            7 => TreeId::WorkspaceUndo,
            8 => TreeId::AuditChunks,
            9 => TreeId::EpisodeChunks,
            10 => TreeId::AgentBriefs,
            11 => TreeId::Uploads,
            12 => TreeId::Decisions,
            _ => return None,
        })
    }
}

/// One key set or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Write {
    pub tree: TreeId,
    pub key: Vec<u8>,
    /// `None` removes the key.
    pub value: Option<Vec<u8>>,
}

/// A set of writes that land together or not at all.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Writes {
    pub writes: Vec<Write>,
    /// In a set stored ahead: the agent state written with it, by key and digest, in place of a
    /// copy of its value.
    pub anchor: Option<Anchor>,
}

/// An agent state a stored set goes with: the set applies only if this is the stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Anchor {
    pub key: Vec<u8>,
    pub digest: u64,
}

impl Anchor {
    /// The anchor of `value` stored at `key` in the agents tree.
    pub(crate) fn of(key: &[u8], value: &[u8]) -> Anchor {
        Anchor {
            key: key.to_vec(),
            digest: digest(value),
        }
    }
}

/// The byte that marks an anchor in a stored set, where a write has its tree's number.
const ANCHOR_MARK: u8 = 0;

/// A stored value's length and CRC-32: two different states of one agent, the only values an
/// anchor is compared with, would have to agree on both.
pub(super) fn digest(value: &[u8]) -> u64 {
    (u64::from(crc32fast::hash(value)) << 32) | (value.len() as u64 & 0xffff_ffff)
}

impl Writes {
    pub fn put(&mut self, tree: TreeId, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.writes.push(Write {
            tree,
            key: key.into(),
            value: Some(value.into()),
        });
    }

    pub fn remove(&mut self, tree: TreeId, key: impl Into<Vec<u8>>) {
        self.writes.push(Write {
            tree,
            key: key.into(),
            value: None,
        });
    }

    /// A compact framing (tree, key length, key, value flag, value length, value) rather than
    /// JSON, which would spell file contents out as arrays of numbers.
    pub fn encode(&self) -> Vec<u8> {
        let size: usize = self
            .writes
            .iter()
            .map(|w| 10 + w.key.len() + w.value.as_ref().map_or(0, Vec::len))
            .sum();
        let mut out =
            Vec::with_capacity(size + self.anchor.as_ref().map_or(0, |a| 13 + a.key.len()));
        if let Some(anchor) = &self.anchor {
            out.push(ANCHOR_MARK);
            push_bytes(&mut out, &anchor.key);
            out.extend_from_slice(&anchor.digest.to_be_bytes());
        }
        for write in &self.writes {
            out.push(write.tree as u8);
            push_bytes(&mut out, &write.key);
            match &write.value {
                Some(value) => {
                    out.push(1);
                    push_bytes(&mut out, value);
                }
                None => out.push(0),
            }
        }
        out
    }

    pub fn decode(raw: &[u8]) -> Result<Writes, StoreError> {
        let corrupt = || StoreError::Corrupt("a set of writes stored ahead is cut short".into());
        let mut rest = raw;
        let mut writes = Vec::new();
        let mut anchor = None;
        if let Some((&ANCHOR_MARK, after)) = rest.split_first() {
            let (key, after) = take_bytes(after).ok_or_else(corrupt)?;
            let (digest, after) = after.split_first_chunk::<8>().ok_or_else(corrupt)?;
            anchor = Some(Anchor {
                key: key.to_vec(),
                digest: u64::from_be_bytes(*digest),
            });
            rest = after;
        }
        while let Some((&tree, after)) = rest.split_first() {
            let tree = TreeId::from_byte(tree).ok_or_else(|| {
                StoreError::Corrupt(format!("a set of writes names an unknown tree {tree}"))
            })?;
            let (key, after) = take_bytes(after).ok_or_else(corrupt)?;
            let (&flag, after) = after.split_first().ok_or_else(corrupt)?;
            let (value, after) = match flag {
                0 => (None, after),
                1 => {
                    let (value, after) = take_bytes(after).ok_or_else(corrupt)?;
                    (Some(value.to_vec()), after)
                }
                _ => return Err(corrupt()),
            };
            writes.push(Write {
                tree,
                key: key.to_vec(),
                value,
            });
            rest = after;
        }
        Ok(Writes { writes, anchor })
    }
}

impl Store {
    pub(super) fn tree(&self, id: TreeId) -> &crate::store::kv::Tree {
        match id {
            TreeId::Agents => &self.agents,
            TreeId::Episodes => &self.episodes,
            TreeId::Journal => &self.journal,
            TreeId::Workspace => &self.workspace,
            TreeId::Audit => &self.audit,
            TreeId::Rules => &self.rules,
            TreeId::WorkspaceUndo => &self.workspace_undo,
            TreeId::AuditChunks => &self.audit_chunks,
            TreeId::EpisodeChunks => &self.episode_chunks,
            TreeId::AgentBriefs => &self.agent_briefs,
            TreeId::Uploads => &self.uploads,
            TreeId::Decisions => &self.decisions,
        }
    }

    /// Applies `writes` so that after a crash at any point either all of them are in the store or
    /// none: stored whole first, applied, then let go (see `ahead`).
    pub(super) fn write_together(&self, writes: &Writes) -> Result<(), StoreError> {
        if let [single] = writes.writes.as_slice() {
            // One key is atomic by itself.
            return self.apply_write(single);
        }
        if self.db.backend() == kv::Backend::Postgres {
            // Without a guard there is no lease to have moved.
            let _: Result<(), kv::FenceMoved> = self.write_in_one_transaction(writes, None)?;
            return Ok(());
        }
        let id = self.db.generate_id()?.to_be_bytes();
        let state = writes
            .writes
            .iter()
            .position(|w| w.tree == TreeId::Agents && w.value.is_some());
        let stored = Writes {
            writes: writes
                .writes
                .iter()
                .enumerate()
                .filter(|(at, _)| Some(*at) != state)
                .map(|(_, write)| write.clone())
                .collect(),
            anchor: state.and_then(|at| {
                let write = &writes.writes[at];
                write
                    .value
                    .as_ref()
                    .map(|value| Anchor::of(&write.key, value))
            }),
        };
        // Compressed: the set holds whole files and records (its first byte, an anchor's mark or
        // a tree id, is never a frame's).
        self.ahead.insert(id, packed::pack(stored.encode()))?;
        if let Some(at) = state {
            self.apply_write(&writes.writes[at])?;
        }
        for write in &stored.writes {
            self.apply_write(write)?;
        }
        self.ahead.remove(id)?;
        Ok(())
    }

    pub(super) fn apply_write(&self, write: &Write) -> Result<(), StoreError> {
        let tree = self.tree(write.tree);
        let value = self.stored_value(write)?;
        // Held while the write lands (see `workspace_sizes`).
        let sizes = (write.tree == TreeId::Workspace).then(|| self.workspace_sizes());
        let before = match value {
            Some(value) => tree.insert(write.key.as_slice(), value)?,
            None => tree.remove(write.key.as_slice())?,
        };
        if let Some(mut sizes) = sizes {
            self.count_workspace_write(&mut sizes, write, before);
        }
        Ok(())
    }

    /// What `write` stores: workspace files and undo records packed (see `packed`), other values
    /// as they are; `None` removes the key.
    fn stored_value(&self, write: &Write) -> Result<Option<Vec<u8>>, StoreError> {
        let files = matches!(write.tree, TreeId::Workspace | TreeId::WorkspaceUndo);
        match &write.value {
            Some(value) if files => packed::pack_any(value.clone())
                .map(Some)
                .map_err(|e| StoreError::Corrupt(e.to_string())),
            value => Ok(value.clone()),
        }
    }

    /// Keeps the agent's workspace size current after `write` replaced `before`.
    fn count_workspace_write(
        &self,
        sizes: &mut super::workspace_sizes::WorkspaceSizes,
        write: &Write,
        before: Option<kv::Bytes>,
    ) {
        // A file key is "agent/path"; an agent whose size is not remembered is added up when asked.
        let agent = write
            .key
            .iter()
            .position(|&b| b == b'/')
            .and_then(|slash| std::str::from_utf8(&write.key[..slash]).ok());
        sizes.writes += 1;
        if let Some(total) = agent.and_then(|agent| sizes.sizes.get_mut(agent)) {
            let after = write.value.as_ref().map_or(0, Vec::len) as u64;
            let before = before.map_or(0, |v| self.file_len(&v));
            *total = total.saturating_sub(before) + after;
        }
    }

    /// `write_together` where the database has transactions that cost no more than the writes:
    /// PostgreSQL's, and any write fenced by a lease (`guard`, see `leases`). Nothing is written
    /// ahead, so nothing is left to finish at the next open.
    pub(super) fn write_in_one_transaction(
        &self,
        writes: &Writes,
        guard: Option<&kv::FenceGuard<'_>>,
    ) -> Result<Result<(), kv::FenceMoved>, StoreError> {
        let mut batch = kv::Batch::default();
        let mut replaced = Vec::new();
        for write in &writes.writes {
            let tree = self.tree(write.tree);
            if write.tree == TreeId::Workspace {
                // The agent's owner is the only writer of its files, so this is what the batch
                // replaces.
                replaced.push((write, tree.get(&write.key)?));
            }
            match self.stored_value(write)? {
                Some(value) => batch.put(tree, write.key.clone(), value),
                None => batch.remove(tree, write.key.clone()),
            }
        }
        // Held while the files land (see `workspace_sizes`).
        let mut sizes = (!replaced.is_empty()).then(|| self.workspace_sizes());
        match guard {
            None => self.db.write_batch(&batch)?,
            Some(guard) => {
                if let Err(moved) = self.db.write_batch_fenced(guard, &batch)? {
                    return Ok(Err(moved));
                }
            }
        }
        if let Some(sizes) = sizes.as_mut() {
            for (write, before) in replaced {
                self.count_workspace_write(sizes, write, before);
            }
        }
        Ok(Ok(()))
    }

    /// At open: applies again, in the order they were made, the sets of writes a crash cut short.
    pub(super) fn finish_writes_cut_short(&self) -> Result<(), StoreError> {
        let (mut finished, mut dropped) = (0usize, 0usize);
        for item in self.ahead.iter() {
            let (key, stored) = item?;
            let raw = packed::unpack(&stored).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let set = Writes::decode(&raw)?;
            let landed = match &set.anchor {
                None => true,
                Some(anchor) => self
                    .agents
                    .get(&anchor.key)?
                    .is_some_and(|value| digest(&value) == anchor.digest),
            };
            if landed {
                for write in set.writes {
                    self.apply_write(&write)?;
                }
                finished += 1;
            } else {
                dropped += 1;
            }
            self.ahead.remove(key)?;
        }
        if finished + dropped > 0 {
            self.db.flush()?;
            tracing::info!(
                finished,
                dropped,
                "sets of writes a crash had cut short: finished, or dropped when their state never landed"
            );
        }
        Ok(())
    }
}

fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // A sled value is far below 4 GiB; a longer one could not have been read to get here.
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

fn take_bytes(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = raw.split_first_chunk::<4>()?;
    let len = u32::from_be_bytes(*len) as usize;
    (rest.len() >= len).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_of_writes_reads_back_as_written_and_a_cut_one_is_refused() {
        let mut writes = Writes::default();
        writes.put(TreeId::Agents, b"a".to_vec(), b"{\"v\":1}".to_vec());
        writes.remove(TreeId::Workspace, b"a/old.txt".to_vec());
        writes.put(TreeId::Workspace, b"a/new.txt".to_vec(), Vec::new());
        let raw = writes.encode();
        assert_eq!(Writes::decode(&raw).unwrap(), writes);
        // sled stores a value whole, so a cut is damage: it is refused, or (at a boundary
        // between writes) read as fewer writes, never as other ones.
        for cut in 1..raw.len() {
            if let Ok(read) = Writes::decode(&raw[..cut]) {
                assert!(read.writes.len() < writes.writes.len(), "cut at {cut}");
                assert_eq!(read.writes[..], writes.writes[..read.writes.len()]);
            }
        }
        let mut unknown = raw.clone();
        unknown[0] = 99;
        assert!(Writes::decode(&unknown).is_err());
        // An anchor reads back too; a set cut inside it is refused.
        writes.anchor = Some(Anchor::of(b"a", b"{\"v\":2}"));
        let raw = writes.encode();
        assert_eq!(Writes::decode(&raw).unwrap(), writes);
        for cut in 1..=12 {
            assert!(Writes::decode(&raw[..cut]).is_err(), "cut at {cut}");
        }
    }
}
