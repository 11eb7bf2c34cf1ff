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

use super::{postgres, Batch, DbInner, Error, Tree, TreeInner};

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

impl super::Db {
    /// Lands every write of `batch`, or none of them when the lease under `guard` no longer
    /// carries `guard.fence`.
    pub fn write_batch_fenced(
        &self,
        guard: &FenceGuard<'_>,
        batch: &Batch,
    ) -> Result<Result<(), FenceMoved>, Error> {
        match (&self.inner, &guard.tree.inner) {
            (DbInner::Sled(_), TreeInner::Sled(tree)) => {
                super::sled_batch(batch, Some((tree, guard.key, guard.fence)))
            }
            (DbInner::Postgres(pg), TreeInner::Postgres(tree)) => pg.write_batch_guarded(
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
