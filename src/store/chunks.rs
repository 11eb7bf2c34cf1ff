//! Records of one agent folded together: the newest under keys of their own, older ones in chunks
//! of dozens, in a tree beside them. The audit trail and the agents' steps are kept this way.
//!
//! Why: sled keeps a few dozen bytes of memory for every key a store holds (its page table and the
//! log positions of each B-tree page), so a record kept under a key of its own for every cycle grew
//! the bot's memory with its cycles (see the README's memory figures). A chunk also compresses its
//! records together.
//!
//! A `Folding` names the two trees, how many records stay apart (`keep_newest`) and how many one
//! fold takes (`least`, `most`). A chunk's key is the key its newest record had, then how many
//! records it holds: chunks sort with the records they replaced, so `count_records` and
//! `newest_records` (a page) read no chunk they do not draw on. `fold_records` writes the chunk and
//! removes its records in one `write_together`.
//!
//! A fold moves records from one tree to the other in several writes, and a reader scans the two
//! trees one after the other, so both hold the lock of the agent's records (`records_lock`, one of
//! `RECORD_LOCKS` chosen by hash, never two held at once): otherwise a reader could pass the chunk
//! before it lands and the records after they go.

use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::ahead::{TreeId, Writes};
use super::{decode, encode, Store, StoreError};
use crate::locks::LockRecovered;

/// Commits check whether their agent's records are due to be folded every this many cycles.
pub(super) const FOLD_CHECK_EVERY: u64 = 16;

/// How many locks the agents' records are spread over (see `records_lock`).
const RECORD_LOCKS: usize = 16;

pub(super) fn record_locks() -> Arc<[Mutex<()>]> {
    (0..RECORD_LOCKS).map(|_| Mutex::new(())).collect()
}

/// Several records of one agent, oldest first.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Chunk<T> {
    pub records: Vec<T>,
}

/// How one kind of record is folded.
pub(super) struct Folding {
    pub singles: TreeId,
    pub chunks: TreeId,
    /// The newest records, which stay under keys of their own.
    pub keep_newest: usize,
    /// A fold waits until it can take at least this many records...
    pub least: usize,
    /// ...and takes at most this many, so that a chunk stays a small record.
    pub most: usize,
}

pub(super) fn chunk_key(newest_record_key: &[u8], count: usize) -> Vec<u8> {
    let mut key = newest_record_key.to_vec();
    key.extend_from_slice(&(count as u32).to_be_bytes());
    key
}

pub(super) fn chunk_count(key: &[u8]) -> Result<usize, StoreError> {
    key.last_chunk::<4>()
        .map(|count| u32::from_be_bytes(*count) as usize)
        .ok_or_else(|| StoreError::Corrupt("a chunk of records has a malformed key".into()))
}

/// The key the chunk's newest record had.
pub(super) fn newest_record_key(chunk_key: &[u8]) -> &[u8] {
    &chunk_key[..chunk_key.len().saturating_sub(4)]
}

impl Store {
    /// The lock of the records under `prefix` (one agent's), shared with the agents whose
    /// prefixes hash alike. Never held while taking another: the locks are not reentrant.
    pub(super) fn records_lock(&self, prefix: &[u8]) -> MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        prefix.hash(&mut hasher);
        let lock = &self.record_locks[hasher.finish() as usize % self.record_locks.len()];
        // The lock guards no data of its own, so one a panic left poisoned is still good.
        lock.lock_recovered()
    }

    /// Folds the oldest records under `prefix` into a chunk, once there are at least
    /// `folding.least` of them beyond the `keep_newest` newest; the chunk and the removal of the
    /// records land together. Returns how many records were folded.
    /// With a fence, the fold lands only while `agent`'s lease carries it (see `leases`).
    pub(super) fn fold_records<T: Serialize + DeserializeOwned>(
        &self,
        folding: &Folding,
        agent: &str,
        fence: Option<super::Fence>,
    ) -> Result<usize, StoreError> {
        let prefix = &super::agent_prefix(agent);
        let _held = self.records_lock(prefix);
        let mut present = self
            .tree(folding.singles)
            .scan_prefix(prefix)
            .take(folding.keep_newest + folding.most)
            .collect::<Result<Vec<_>, _>>()?;
        let foldable = present
            .len()
            .saturating_sub(folding.keep_newest)
            .min(folding.most);
        if foldable < folding.least {
            return Ok(0);
        }
        present.truncate(foldable);
        let taken = present;
        let Some((newest, _)) = taken.last() else {
            return Ok(0);
        };
        let chunk = Chunk::<T> {
            records: taken
                .iter()
                .map(|(key, raw)| decode(key, raw))
                .collect::<Result<_, _>>()?,
        };
        let mut writes = Writes::default();
        writes.put(
            folding.chunks,
            chunk_key(newest, taken.len()),
            encode(&chunk)?,
        );
        for (key, _) in &taken {
            writes.remove(folding.singles, key.to_vec());
        }
        self.write_together_fenced(&writes, agent, fence)?;
        Ok(taken.len())
    }

    /// How many records `prefix` holds, folded or not, counted without reading the chunks.
    pub(super) fn count_records(
        &self,
        folding: &Folding,
        prefix: &[u8],
    ) -> Result<usize, StoreError> {
        let _held = self.records_lock(prefix);
        let mut total = self
            .tree(folding.singles)
            .scan_prefix(prefix)
            .keys()
            .count();
        for key in self.tree(folding.chunks).scan_prefix(prefix).keys() {
            total += chunk_count(&key?)?;
        }
        Ok(total)
    }

    /// Up to `take` of the records under `prefix`, newest first, after the `skip` newest. Only
    /// the chunks the page draws on are decoded.
    pub(super) fn newest_records<T: DeserializeOwned>(
        &self,
        folding: &Folding,
        prefix: &[u8],
        mut skip: usize,
        take: usize,
    ) -> Result<Vec<T>, StoreError> {
        let _held = self.records_lock(prefix);
        let mut page = Vec::new();
        for item in self.tree(folding.singles).scan_prefix(prefix).rev() {
            if page.len() >= take {
                return Ok(page);
            }
            let (key, raw) = item?;
            if skip > 0 {
                skip -= 1;
                continue;
            }
            page.push(decode(&key, &raw)?);
        }
        for item in self.tree(folding.chunks).scan_prefix(prefix).rev() {
            if page.len() >= take {
                break;
            }
            let (key, raw) = item?;
            let count = chunk_count(&key)?;
            if skip >= count {
                skip -= count;
                continue;
            }
            let chunk: Chunk<T> = decode(&key, &raw)?;
            let wanted = take - page.len();
            page.extend(chunk.records.into_iter().rev().skip(skip).take(wanted));
            skip = 0;
        }
        Ok(page)
    }

    /// The records under `prefix` whose keys are in `start..end`, oldest first, with `key_of`
    /// giving the key a folded record had. Chunks sort by their newest record, so the folded ones
    /// are in the chunks from the first whose newest record is at `start` or later, up to the
    /// first whose newest record is at `end` or later.
    pub(super) fn records_in<T: DeserializeOwned>(
        &self,
        folding: &Folding,
        prefix: &[u8],
        (start, end): (&[u8], &[u8]),
        key_of: impl Fn(&T) -> Vec<u8>,
    ) -> Result<Vec<T>, StoreError> {
        let wanted = |key: &[u8]| key >= start && key < end;
        let _held = self.records_lock(prefix);
        let mut records = Vec::new();
        for item in self.tree(folding.chunks).range(start..) {
            let (key, raw) = item?;
            if !key.starts_with(prefix) {
                break;
            }
            let chunk: Chunk<T> = decode(&key, &raw)?;
            records.extend(
                chunk
                    .records
                    .into_iter()
                    .filter(|record| wanted(&key_of(record))),
            );
            if newest_record_key(&key) >= end {
                break;
            }
        }
        for item in self.tree(folding.singles).range(start..end) {
            let (key, raw) = item?;
            records.push(decode(&key, &raw)?);
        }
        Ok(records)
    }

    /// Every record under `prefix`, oldest first.
    pub(super) fn all_records<T: DeserializeOwned>(
        &self,
        folding: &Folding,
        prefix: &[u8],
    ) -> Result<Vec<T>, StoreError> {
        let _held = self.records_lock(prefix);
        let mut records = Vec::new();
        for item in self.tree(folding.chunks).scan_prefix(prefix) {
            let (key, raw) = item?;
            records.extend(decode::<Chunk<T>>(&key, &raw)?.records);
        }
        for item in self.tree(folding.singles).scan_prefix(prefix) {
            let (key, raw) = item?;
            records.push(decode(&key, &raw)?);
        }
        Ok(records)
    }
}
