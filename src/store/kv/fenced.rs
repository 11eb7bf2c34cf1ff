//! Batches guarded by a lease's fencing token (`Db::write_batch_fenced`): the batch lands only if
//! the lease under its guard still carries the token the writer was given, checked and written in
//! one transaction on both backends, so a writer whose lease another process took over (it
//! stalled, its clock ran late, its connection hung) cannot write over the new owner's records.
//!
//! The kv layer knows one thing of a lease's value: its first eight bytes are the token, big-endian
//! (see `store::leases`). On sled, the check and the writes are one sled transaction over the
//! lease's tree and the batch's. On PostgreSQL the transaction reads the lease row `FOR SHARE`:
//! a takeover's compare-and-swap updates that row, so it waits for the batch to commit, and a
//! batch that comes after the takeover reads the new token and writes nothing.
//!
//! A checked batch (`Db::write_batch_checked`) also carries expectations: values its keys must
//! hold for it to land (a compare-and-swap over several keys), which the spend ledger's accounts
//! and the first-click-wins decision records are written with.

use super::{postgres, Batch, Bytes, DbInner, Error, Tree, TreeInner};

/// The lease a fenced batch is checked against: the value under `key` in `tree`, which must begin
/// with `fence` (eight bytes, big-endian).
pub struct FenceGuard<'a> {
    pub tree: &'a Tree,
    pub key: &'a [u8],
    pub fence: u64,
}

/// A fenced batch found another token (or no lease) under its guard, and wrote nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceMoved;

/// What a checked batch (`Db::write_batch_checked`) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// Every write landed.
    Landed,
    /// The lease under the guard carries another token: nothing was written.
    FenceMoved,
    /// The key of the batch's expectation number `at` held `current`, not what was expected:
    /// nothing was written.
    Differs { at: usize, current: Option<Bytes> },
}

impl super::Db {
    /// Lands every write of `batch`, or none of them when the lease under `guard` no longer
    /// carries `guard.fence`.
    pub fn write_batch_fenced(
        &self,
        guard: &FenceGuard<'_>,
        batch: &Batch,
    ) -> Result<Result<(), FenceMoved>, Error> {
        match self.write_batch_checked(batch, Some(guard))? {
            Checked::Landed => Ok(Ok(())),
            Checked::FenceMoved => Ok(Err(FenceMoved)),
            // A batch with no expectation cannot differ from one; said rather than assumed.
            Checked::Differs { .. } => Err(Error::Contended(1)),
        }
    }

    /// Lands every write of `batch` only if each of its expectations (`Batch::expect`) holds and,
    /// with a guard, the lease still carries its token; all in one transaction. On PostgreSQL an
    /// expected value is read `FOR UPDATE`, in key order so that two batches over the same keys
    /// wait for each other rather than deadlock, and an expected absence that the batch fills is
    /// an insert that finds the key taken when another writer got there first.
    pub fn write_batch_checked(
        &self,
        batch: &Batch,
        guard: Option<&FenceGuard<'_>>,
    ) -> Result<Checked, Error> {
        if batch.is_empty() {
            return Ok(Checked::Landed);
        }
        match (&self.inner, guard.map(|guard| (&guard.tree.inner, guard))) {
            (DbInner::Sled(_), None) => super::sled_batch(batch, None),
            (DbInner::Sled(_), Some((TreeInner::Sled(tree), guard))) => {
                super::sled_batch(batch, Some((tree, guard.key, guard.fence)))
            }
            (DbInner::Postgres(pg), None) => pg.write_batch_guarded(batch, None),
            (DbInner::Postgres(pg), Some((TreeInner::Postgres(tree), guard))) => pg
                .write_batch_guarded(
                    batch,
                    Some(postgres::Guard {
                        tree: tree.name().to_owned(),
                        key: guard.key.to_vec(),
                        fence: guard.fence,
                    }),
                ),
            _ => Err(Error::Sled(sled::Error::Unsupported(
                "a fenced batch mixes two databases".into(),
            ))),
        }
    }
}
