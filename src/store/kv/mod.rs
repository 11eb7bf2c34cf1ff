//! The ordered key-value database everything the bot stores sits on: named trees of byte keys
//! and values, in sled (one process, the default) or in PostgreSQL (`store.url`, many processes;
//! see `postgres`). The store, the ledger and long-term memory are written against `Db` and
//! `Tree` only, so every record, journal entry, reservation and memory lives in whichever backend
//! the store was opened with, and every store test runs against both.
//!
//! The surface is the part of sled's the store uses, with sled's meaning: keys ordered byte by
//! byte, `insert` and `remove` returning what was there, `compare_and_swap`, iteration both ways
//! over a range or a prefix, `generate_id`, and `flush` as the durability point. Two additions:
//! `Db::write_batch` lands puts and removes on several trees all or none (a sled transaction, a
//! PostgreSQL transaction), `Db::write_batch_fenced` lands one only while a lease carries the
//! writer's token (see `fenced`), `Db::write_batch_checked` lands one only while the values it
//! expects are there (a compare-and-swap over several keys, see `fenced`), and `Db::backend` tells
//! the store when a set of writes can simply be one transaction (PostgreSQL) rather than written
//! ahead (sled, see `ahead`).

mod fenced;
mod postgres;

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

pub use fenced::{Checked, FenceGuard, FenceMoved};
pub use postgres::ConnectError;

/// A stored key or value: sled's own buffer, which both backends hand out.
pub type Bytes = sled::IVec;

/// Why a read or write of the database failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Sled(#[from] sled::Error),
    #[error("PostgreSQL: {0}")]
    Postgres(#[source] sqlx::Error),
    /// The store's connection to PostgreSQL has been shut down (the process is stopping).
    #[error("the store's connection to PostgreSQL is closed")]
    Closed,
    /// A flush failed earlier, and this call waited on it (see `store::durable`).
    #[error("flushing the store failed: {0}")]
    Flush(String),
    /// A read-modify-write lost to other writers this many times in a row.
    #[error("a record kept changing under {0} attempts to update it")]
    Contended(u32),
}

/// Which database holds the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sled,
    Postgres,
}

/// The database: sled's, or a PostgreSQL one reached through a pool.
#[derive(Clone)]
pub struct Db {
    inner: DbInner,
    default_tree: Tree,
}

#[derive(Clone)]
enum DbInner {
    Sled(sled::Db),
    Postgres(Arc<postgres::Pg>),
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}

/// The name sled gives its default tree, which `tree_names` lists on both backends.
const DEFAULT_TREE: &str = "__sled__default";

impl Db {
    pub fn from_sled(db: sled::Db) -> Db {
        let default_tree = Tree {
            inner: TreeInner::Sled(sled::Tree::clone(&db)),
        };
        Db {
            inner: DbInner::Sled(db),
            default_tree,
        }
    }

    /// Connects to the PostgreSQL database at `url` and brings its tables to this build's schema
    /// (the SQL migrations in `migrations/postgres/`).
    pub fn connect_postgres(url: &str) -> Result<Db, ConnectError> {
        let pg = Arc::new(postgres::Pg::connect(url)?);
        let default_tree = Tree {
            inner: TreeInner::Postgres(postgres::PgTree::new(pg.clone(), DEFAULT_TREE)),
        };
        Ok(Db {
            inner: DbInner::Postgres(pg),
            default_tree,
        })
    }

    pub fn backend(&self) -> Backend {
        match &self.inner {
            DbInner::Sled(_) => Backend::Sled,
            DbInner::Postgres(_) => Backend::Postgres,
        }
    }

    pub fn open_tree(&self, name: &str) -> Result<Tree, Error> {
        Ok(Tree {
            inner: match &self.inner {
                DbInner::Sled(db) => TreeInner::Sled(db.open_tree(name)?),
                DbInner::Postgres(pg) => {
                    pg.register_tree(name)?;
                    TreeInner::Postgres(postgres::PgTree::new(pg.clone(), name))
                }
            },
        })
    }

    /// Removes a tree and everything in it; false when there was none.
    pub fn drop_tree(&self, name: &str) -> Result<bool, Error> {
        match &self.inner {
            DbInner::Sled(db) => Ok(db.drop_tree(name)?),
            DbInner::Postgres(pg) => pg.drop_tree(name),
        }
    }

    /// The names of the trees there are, the default one included.
    pub fn tree_names(&self) -> Result<Vec<Bytes>, Error> {
        match &self.inner {
            DbInner::Sled(db) => Ok(db.tree_names()),
            DbInner::Postgres(pg) => pg.tree_names(DEFAULT_TREE),
        }
    }

    /// A number never handed out before by this database (by any process, for PostgreSQL).
    pub fn generate_id(&self) -> Result<u64, Error> {
        match &self.inner {
            DbInner::Sled(db) => Ok(db.generate_id()?),
            DbInner::Postgres(pg) => pg.generate_id(),
        }
    }

    /// Makes everything written so far durable. PostgreSQL made each write durable when it
    /// committed, so there it returns at once.
    pub fn flush(&self) -> Result<(), Error> {
        match &self.inner {
            DbInner::Sled(db) => db.flush().map(drop).map_err(Error::from),
            DbInner::Postgres(_) => Ok(()),
        }
    }

    pub fn size_on_disk(&self) -> Result<u64, Error> {
        match &self.inner {
            DbInner::Sled(db) => Ok(db.size_on_disk()?),
            DbInner::Postgres(pg) => pg.size_on_disk(),
        }
    }

    /// Lands every write of `batch` or none of them.
    pub fn write_batch(&self, batch: &Batch) -> Result<(), Error> {
        if batch.writes.is_empty() {
            return Ok(());
        }
        match self.write_batch_checked(batch, None)? {
            Checked::Landed => Ok(()),
            // Neither can happen without a guard or an expectation; said rather than assumed.
            Checked::FenceMoved | Checked::Differs { .. } => Err(Error::Contended(1)),
        }
    }

    /// Runs `work` while no other process runs it on this database (the store's own migrations
    /// at open); sled's lock on its folder already keeps other processes out.
    pub fn exclusively<T, E: From<Error>>(
        &self,
        work: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        match &self.inner {
            DbInner::Sled(_) => work(),
            DbInner::Postgres(pg) => pg.exclusively(work),
        }
    }
}

impl std::ops::Deref for Db {
    type Target = Tree;

    /// The default tree, as sled's `Db` gives it.
    fn deref(&self) -> &Tree {
        &self.default_tree
    }
}

/// A key of a tree with a value, or `None` for no value: what a batch writes, or expects to find.
pub(super) type Entry = (Tree, Vec<u8>, Option<Vec<u8>>);

/// Writes to land together (`Db::write_batch`): a value to put, or `None` to remove the key; and
/// the values a checked batch expects to find first (`Db::write_batch_checked`).
#[derive(Default)]
pub struct Batch {
    writes: Vec<Entry>,
    expects: Vec<Entry>,
}

impl Batch {
    pub fn put(&mut self, tree: &Tree, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.writes
            .push((tree.clone(), key.into(), Some(value.into())));
    }

    pub fn remove(&mut self, tree: &Tree, key: impl Into<Vec<u8>>) {
        self.writes.push((tree.clone(), key.into(), None));
    }

    /// Lands the batch only if `key` holds `value` (`None`: is absent) when it is written.
    pub fn expect(&mut self, tree: &Tree, key: impl Into<Vec<u8>>, value: Option<Vec<u8>>) {
        self.expects.push((tree.clone(), key.into(), value));
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.expects.is_empty()
    }
}

/// Whether a stored lease value carries `fence`: its first eight bytes (see `fenced`).
fn lease_carries(value: Option<&[u8]>, fence: u64) -> bool {
    value
        .and_then(|value| value.first_chunk::<8>())
        .is_some_and(|token| u64::from_be_bytes(*token) == fence)
}

/// A sled transaction over the batch's trees, each named once; with a guard (the lease's tree,
/// key and fencing token, see `fenced`), one that writes nothing unless the lease carries the
/// token, and with expectations, one that writes nothing unless each key holds what is expected.
fn sled_batch(batch: &Batch, guard: Option<(&sled::Tree, &[u8], u64)>) -> Result<Checked, Error> {
    use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};
    let mut trees: Vec<sled::Tree> = Vec::new();
    let mut at_tree = |tree: &sled::Tree| match trees.iter().position(|t| t.name() == tree.name()) {
        Some(at) => at,
        None => {
            trees.push(tree.clone());
            trees.len() - 1
        }
    };
    let guard = guard.map(|(tree, key, fence)| (at_tree(tree), key, fence));
    let mut placed = |writes: &[Entry]| {
        let mut out = Vec::with_capacity(writes.len());
        for (tree, key, value) in writes {
            let TreeInner::Sled(tree) = &tree.inner else {
                return Err(Error::Sled(sled::Error::Unsupported(
                    "a batch mixes two databases".into(),
                )));
            };
            out.push((at_tree(tree), key.clone(), value.clone()));
        }
        Ok(out)
    };
    let expects = placed(&batch.expects)?;
    let writes = placed(&batch.writes)?;
    let outcome = trees.as_slice().transaction(|trees| {
        if let Some((at, key, fence)) = guard {
            let lease = trees[at].get(key)?;
            if !lease_carries(lease.as_deref(), fence) {
                return Err(ConflictableTransactionError::Abort(Checked::FenceMoved));
            }
        }
        for (index, (at, key, expected)) in expects.iter().enumerate() {
            let current = trees[*at].get(key.as_slice())?;
            if current.as_deref() != expected.as_deref() {
                return Err(ConflictableTransactionError::Abort(Checked::Differs {
                    at: index,
                    current,
                }));
            }
        }
        for (at, key, value) in &writes {
            match value {
                Some(value) => trees[*at].insert(key.as_slice(), value.as_slice())?,
                None => trees[*at].remove(key.as_slice())?,
            };
        }
        Ok::<(), ConflictableTransactionError<Checked>>(())
    });
    match outcome {
        Ok(()) => Ok(Checked::Landed),
        Err(TransactionError::Abort(refused)) => Ok(refused),
        Err(TransactionError::Storage(inner)) => Err(Error::Sled(inner)),
    }
}

/// One named tree of the database.
#[derive(Clone)]
pub struct Tree {
    inner: TreeInner,
}

#[derive(Clone)]
enum TreeInner {
    Sled(sled::Tree),
    Postgres(postgres::PgTree),
}

/// A compare-and-swap found another value than the one expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompareAndSwapError {
    pub current: Option<Bytes>,
}

/// How many times a read-modify-write on PostgreSQL is tried before it gives up.
const UPDATE_ATTEMPTS: u32 = 1000;

impl Tree {
    pub fn name(&self) -> Bytes {
        match &self.inner {
            TreeInner::Sled(tree) => tree.name(),
            TreeInner::Postgres(tree) => Bytes::from(tree.name().as_bytes()),
        }
    }

    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>, Error> {
        match &self.inner {
            TreeInner::Sled(tree) => Ok(tree.get(key)?),
            TreeInner::Postgres(tree) => tree.get(key.as_ref()),
        }
    }

    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool, Error> {
        match &self.inner {
            TreeInner::Sled(tree) => Ok(tree.contains_key(key)?),
            TreeInner::Postgres(tree) => tree.contains_key(key.as_ref()),
        }
    }

    /// Sets `key`, returning the value it replaced.
    pub fn insert(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<Bytes>,
    ) -> Result<Option<Bytes>, Error> {
        match &self.inner {
            TreeInner::Sled(tree) => Ok(tree.insert(key, value)?),
            TreeInner::Postgres(tree) => tree.insert(key.as_ref(), &value.into()),
        }
    }

    /// Removes `key`, returning the value it had.
    pub fn remove(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>, Error> {
        match &self.inner {
            TreeInner::Sled(tree) => Ok(tree.remove(key)?),
            TreeInner::Postgres(tree) => tree.remove(key.as_ref()),
        }
    }

    /// Sets `key` to `new` (or removes it, for `None`) only if it holds `old` (or is absent).
    pub fn compare_and_swap(
        &self,
        key: impl AsRef<[u8]>,
        old: Option<impl AsRef<[u8]>>,
        new: Option<impl Into<Bytes>>,
    ) -> Result<Result<(), CompareAndSwapError>, Error> {
        match &self.inner {
            TreeInner::Sled(tree) => Ok(tree
                .compare_and_swap(key, old, new)?
                .map_err(|e| CompareAndSwapError { current: e.current })),
            TreeInner::Postgres(tree) => tree.compare_and_swap(
                key.as_ref(),
                old.as_ref().map(AsRef::as_ref),
                new.map(Into::into).as_deref(),
            ),
        }
    }

    /// Replaces the value under `key` by `f(old)` atomically, calling `f` again when another
    /// writer got in first; returns the new value.
    pub fn update_and_fetch<V: Into<Bytes>>(
        &self,
        key: impl AsRef<[u8]>,
        mut f: impl FnMut(Option<&[u8]>) -> Option<V>,
    ) -> Result<Option<Bytes>, Error> {
        match &self.inner {
            TreeInner::Sled(tree) => Ok(tree.update_and_fetch(key, f)?),
            TreeInner::Postgres(_) => {
                let key = key.as_ref();
                for _ in 0..UPDATE_ATTEMPTS {
                    let old = self.get(key)?;
                    let new: Option<Bytes> = f(old.as_deref()).map(Into::into);
                    if self
                        .compare_and_swap(key, old.as_deref(), new.clone())?
                        .is_ok()
                    {
                        return Ok(new);
                    }
                }
                Err(Error::Contended(UPDATE_ATTEMPTS))
            }
        }
    }

    pub fn first(&self) -> Result<Option<(Bytes, Bytes)>, Error> {
        self.iter().next().transpose()
    }

    pub fn last(&self) -> Result<Option<(Bytes, Bytes)>, Error> {
        self.iter().next_back().transpose()
    }

    /// Every pair of the tree, in key order.
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }

    /// The pairs whose key starts with `prefix`, in key order.
    pub fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let prefix = prefix.as_ref();
        match &self.inner {
            TreeInner::Sled(tree) => Iter::Sled(tree.scan_prefix(prefix)),
            TreeInner::Postgres(tree) => {
                let end = match successor_of_prefix(prefix) {
                    Some(end) => Bound::Excluded(end),
                    None => Bound::Unbounded,
                };
                Iter::Postgres(tree.range(Bound::Included(prefix.to_vec()), end))
            }
        }
    }

    /// The pairs whose key lies in `range`, in key order.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        match &self.inner {
            TreeInner::Sled(tree) => Iter::Sled(tree.range(range)),
            TreeInner::Postgres(tree) => {
                let owned = |bound: Bound<&K>| match bound {
                    Bound::Included(key) => Bound::Included(key.as_ref().to_vec()),
                    Bound::Excluded(key) => Bound::Excluded(key.as_ref().to_vec()),
                    Bound::Unbounded => Bound::Unbounded,
                };
                Iter::Postgres(tree.range(owned(range.start_bound()), owned(range.end_bound())))
            }
        }
    }

    pub fn len(&self) -> usize {
        match &self.inner {
            TreeInner::Sled(tree) => tree.len(),
            // A count that fails reads as none; `len` is for reports and bounds, as in sled.
            TreeInner::Postgres(tree) => tree.len().unwrap_or(0),
        }
    }

    pub fn is_empty(&self) -> bool {
        match &self.inner {
            TreeInner::Sled(tree) => tree.is_empty(),
            TreeInner::Postgres(tree) => tree.len().map_or(true, |n| n == 0),
        }
    }

    pub fn clear(&self) -> Result<(), Error> {
        match &self.inner {
            TreeInner::Sled(tree) => Ok(tree.clear()?),
            TreeInner::Postgres(tree) => tree.clear(),
        }
    }

    pub fn flush(&self) -> Result<(), Error> {
        match &self.inner {
            TreeInner::Sled(tree) => tree.flush().map(drop).map_err(Error::from),
            TreeInner::Postgres(_) => Ok(()),
        }
    }
}

/// The first key after every key that starts with `prefix`, if there is one (there is none when
/// the prefix is all 0xff bytes).
fn successor_of_prefix(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Pairs in key order, from either end.
pub enum Iter {
    Sled(sled::Iter),
    Postgres(postgres::PgIter),
}

impl Iterator for Iter {
    type Item = Result<(Bytes, Bytes), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Sled(iter) => iter.next().map(|item| item.map_err(Error::from)),
            Iter::Postgres(iter) => iter.next(),
        }
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Sled(iter) => iter.next_back().map(|item| item.map_err(Error::from)),
            Iter::Postgres(iter) => iter.next_back(),
        }
    }
}

impl Iter {
    /// The keys only, as sled's `Iter::keys`.
    pub fn keys(self) -> impl DoubleEndedIterator<Item = Result<Bytes, Error>> {
        self.map(|item| item.map(|(key, _)| key))
    }

    /// The values only, as sled's `Iter::values`.
    pub fn values(self) -> impl DoubleEndedIterator<Item = Result<Bytes, Error>> {
        self.map(|item| item.map(|(_, value)| value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_backends::{on_both_backends, TestStore};

    #[test]
    fn a_prefix_ends_before_the_first_key_that_does_not_start_with_it() {
        assert_eq!(successor_of_prefix(b"ab/"), Some(b"ab0".to_vec()));
        assert_eq!(successor_of_prefix(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(successor_of_prefix(b"\xff\xff"), None);
        assert_eq!(successor_of_prefix(b""), None);
    }

    fn keys(iter: impl Iterator<Item = Result<(Bytes, Bytes), Error>>) -> Vec<Vec<u8>> {
        iter.map(|item| item.unwrap().0.to_vec()).collect()
    }

    /// More keys than a page, with neighbours on both sides of the prefix, read from either end
    /// and from both at once, in sled's byte order (0xff sorts last).
    fn ranges_read_in_byte_order_from_either_end_and_from_both_at_once(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        let tree = store.db.open_tree("kv_test").unwrap();
        let mut expected = Vec::new();
        for n in 0..150u32 {
            let key = format!("a/{n:04}").into_bytes();
            tree.insert(&key, n.to_be_bytes().to_vec()).unwrap();
            expected.push(key);
        }
        let mut high = b"a/".to_vec();
        high.push(0xff);
        tree.insert(&high, b"high".to_vec()).unwrap();
        expected.push(high);
        for outside in [&b"a"[..], b"a.", b"b/0001", b"\xff"] {
            tree.insert(outside, b"x".to_vec()).unwrap();
        }
        assert_eq!(keys(tree.scan_prefix(b"a/")), expected);
        let mut backwards = keys(tree.scan_prefix(b"a/").rev());
        backwards.reverse();
        assert_eq!(backwards, expected);
        // Both ends at once meet in the middle, each pair handed out once.
        let mut iter = tree.scan_prefix(b"a/");
        let (mut front, mut back) = (Vec::new(), Vec::new());
        loop {
            match iter.next() {
                Some(item) => front.push(item.unwrap().0.to_vec()),
                None => break,
            }
            match iter.next_back() {
                Some(item) => back.push(item.unwrap().0.to_vec()),
                None => break,
            }
        }
        back.reverse();
        front.extend(back);
        assert_eq!(front, expected);
        assert_eq!(
            keys(tree.range(b"a/0010".as_slice()..b"a/0013".as_slice())),
            vec![b"a/0010".to_vec(), b"a/0011".to_vec(), b"a/0012".to_vec()]
        );
        assert_eq!(tree.first().unwrap().unwrap().0.as_ref(), b"a");
        assert_eq!(tree.last().unwrap().unwrap().0.as_ref(), b"\xff");
        assert_eq!(tree.len(), 155);
    }

    fn writes_return_what_they_replaced_and_compare_and_swap_checks_the_value(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        let tree = store.db.open_tree("kv_test").unwrap();
        assert_eq!(tree.insert(b"k", b"one".to_vec()).unwrap(), None);
        assert_eq!(
            tree.insert(b"k", b"two".to_vec()).unwrap().as_deref(),
            Some(&b"one"[..])
        );
        // Absent expected, present found: refused, with what is there.
        let refused = tree
            .compare_and_swap(b"k", None::<&[u8]>, Some(b"three".to_vec()))
            .unwrap()
            .unwrap_err();
        assert_eq!(refused.current.as_deref(), Some(&b"two"[..]));
        assert!(tree
            .compare_and_swap(b"k", Some(b"one"), Some(b"three".to_vec()))
            .unwrap()
            .is_err());
        tree.compare_and_swap(b"k", Some(b"two"), Some(b"three".to_vec()))
            .unwrap()
            .unwrap();
        tree.compare_and_swap(b"k", Some(b"three"), None::<Vec<u8>>)
            .unwrap()
            .unwrap();
        assert!(!tree.contains_key(b"k").unwrap());
        tree.compare_and_swap(b"k", None::<&[u8]>, Some(b"new".to_vec()))
            .unwrap()
            .unwrap();
        let counted = tree
            .update_and_fetch(b"n", |old| {
                let n = old.map_or(0, |raw| raw[0]);
                Some(vec![n + 1])
            })
            .unwrap();
        assert_eq!(counted.as_deref(), Some(&[1u8][..]));
        assert_eq!(tree.remove(b"k").unwrap().as_deref(), Some(&b"new"[..]));
        assert_eq!(tree.remove(b"k").unwrap(), None);
        // Trees are named, listed and dropped with what they hold.
        let names = store.db.tree_names().unwrap();
        assert!(names.iter().any(|name| name.as_ref() == b"kv_test"));
        assert!(store.db.drop_tree("kv_test").unwrap());
        let tree = store.db.open_tree("kv_test").unwrap();
        assert!(tree.is_empty());
        let (first, second) = (
            store.db.generate_id().unwrap(),
            store.db.generate_id().unwrap(),
        );
        assert_ne!(first, second);
    }

    /// A batch lands whole: here across two trees, on both backends; and on PostgreSQL, where a
    /// write can fail inside it (a key longer than its index takes), it leaves nothing.
    fn a_batch_lands_all_or_nothing(backend: Backend) {
        let Some(test) = TestStore::on(backend) else {
            return;
        };
        let store = test.open();
        let (left, right) = (
            store.db.open_tree("kv_left").unwrap(),
            store.db.open_tree("kv_right").unwrap(),
        );
        left.insert(b"gone", b"x".to_vec()).unwrap();
        let mut batch = Batch::default();
        batch.put(&left, b"a".to_vec(), b"1".to_vec());
        batch.put(&right, b"b".to_vec(), b"2".to_vec());
        batch.remove(&left, b"gone".to_vec());
        store.db.write_batch(&batch).unwrap();
        assert_eq!(left.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(right.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(left.get(b"gone").unwrap(), None);
        if backend == Backend::Postgres {
            let mut failing = Batch::default();
            failing.put(&left, b"c".to_vec(), b"3".to_vec());
            // Random bytes do not compress, so the index refuses the key.
            let huge: Vec<u8> = (0..20_000u32)
                .map(|n| (n.wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect();
            failing.put(&right, huge, b"4".to_vec());
            assert!(store.db.write_batch(&failing).is_err());
            assert_eq!(left.get(b"c").unwrap(), None);
        }
    }

    on_both_backends!(
        ranges_read_in_byte_order_from_either_end_and_from_both_at_once,
        writes_return_what_they_replaced_and_compare_and_swap_checks_the_value,
        a_batch_lands_all_or_nothing,
    );
}
