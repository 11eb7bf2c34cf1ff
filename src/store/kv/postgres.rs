//! The PostgreSQL backend of `kv`: every tree is rows of one table, `kv (tree, key, value)`, whose
//! primary key orders a tree's keys byte by byte as sled does; `kv_trees` names the trees and
//! the sequence `kv_ids` hands out `generate_id`'s numbers to every process. The tables come from
//! the SQL migrations in `migrations/postgres/`, applied by sqlx at connect (under its advisory lock, so
//! two processes starting together apply them once).
//!
//! The store is synchronous (sled is), sqlx is not: each call is sent to a small runtime of the
//! backend's own and waited for on a plain channel, so it works the same from a runtime worker,
//! a blocking thread or a test's single-threaded runtime, and never starts a runtime inside
//! another. A range is read in pages of `PAGE_ROWS`, from whichever end is asked for, so walking a
//! large tree holds one page at a time.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::QueryBuilder;

use super::{Batch, Bytes, Checked, CompareAndSwapError, Error, TreeInner};

/// The lease row a guarded batch checks (see `fenced`).
pub(super) struct Guard {
    pub(super) tree: String,
    pub(super) key: Vec<u8>,
    pub(super) fence: u64,
}

/// Rows read at a time when walking a range.
const PAGE_ROWS: i64 = 64;

/// Connections the pool keeps open at most: a process's agents share them.
const MAX_CONNECTIONS: u32 = 16;

/// How long a call waits for a free connection, or for the server to answer a connect.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// The advisory lock taken while the store's own migrations run (`Db::exclusively`): a number
/// of this program's, spelling "atst" (autothread store).
const MIGRATION_LOCK: i64 = 0x6174_7374;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Why the store could not connect to PostgreSQL. Never shows the URL, which holds a password.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "store.url is not a PostgreSQL URL (postgres://user:password@host:port/database): {0}"
    )]
    Url(#[source] sqlx::Error),
    #[error("cannot reach the PostgreSQL server of store.url: {0}")]
    Connect(#[source] sqlx::Error),
    #[error("cannot bring the PostgreSQL database to this build's tables: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    #[error("cannot start the store's PostgreSQL runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

pub(super) struct Pg {
    pool: PgPool,
    /// The runtime sqlx's futures run on; taken when the backend is dropped.
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

/// A batch's entry with its tree named as PostgreSQL stores it.
type NamedEntry = (Arc<str>, Vec<u8>, Option<Vec<u8>>);

impl Drop for Pg {
    fn drop(&mut self) {
        // Dropped from async code as often as not, where a runtime may not block to stop.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Pg {
    pub(super) fn connect(url: &str) -> Result<Pg, ConnectError> {
        let options: PgConnectOptions = url.parse().map_err(ConnectError::Url)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("autothread-postgres")
            .enable_all()
            .build()
            .map_err(ConnectError::Runtime)?;
        let handle = runtime.handle().clone();
        let pool = wait_for(&handle, async move {
            let pool = PgPoolOptions::new()
                .max_connections(MAX_CONNECTIONS)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect_with(options)
                .await
                .map_err(ConnectError::Connect)?;
            MIGRATOR.run(&pool).await.map_err(ConnectError::Migrate)?;
            Ok::<_, ConnectError>(pool)
        })
        .ok_or_else(|| {
            ConnectError::Runtime(std::io::Error::other(
                "the runtime stopped while connecting",
            ))
        })??;
        Ok(Pg {
            pool,
            runtime: Some(runtime),
            handle,
        })
    }

    /// Runs `work` on the backend's runtime and waits for it.
    fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, sqlx::Error>> + Send + 'static,
    ) -> Result<T, Error> {
        wait_for(&self.handle, work)
            .ok_or(Error::Closed)?
            .map_err(Error::Postgres)
    }

    pub(super) fn register_tree(&self, name: &str) -> Result<(), Error> {
        let (pool, name) = (self.pool.clone(), name.to_owned());
        self.run(async move {
            sqlx::query("INSERT INTO kv_trees (name) VALUES ($1) ON CONFLICT DO NOTHING")
                .bind(name)
                .execute(&pool)
                .await
                .map(drop)
        })
    }

    pub(super) fn drop_tree(&self, name: &str) -> Result<bool, Error> {
        let (pool, name) = (self.pool.clone(), name.to_owned());
        self.run(async move {
            let mut tx = pool.begin().await?;
            sqlx::query("DELETE FROM kv WHERE tree = $1")
                .bind(&name)
                .execute(&mut *tx)
                .await?;
            let named = sqlx::query("DELETE FROM kv_trees WHERE name = $1")
                .bind(&name)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            Ok(named > 0)
        })
    }

    pub(super) fn tree_names(&self, default_tree: &str) -> Result<Vec<Bytes>, Error> {
        let pool = self.pool.clone();
        let names: Vec<String> = self.run(async move {
            sqlx::query_scalar("SELECT name FROM kv_trees ORDER BY name")
                .fetch_all(&pool)
                .await
        })?;
        let mut all = vec![Bytes::from(default_tree.as_bytes())];
        all.extend(
            names
                .into_iter()
                .filter(|name| name != default_tree)
                .map(|name| Bytes::from(name.as_bytes())),
        );
        Ok(all)
    }

    pub(super) fn generate_id(&self) -> Result<u64, Error> {
        let pool = self.pool.clone();
        let id: i64 = self.run(async move {
            sqlx::query_scalar("SELECT nextval('kv_ids')")
                .fetch_one(&pool)
                .await
        })?;
        Ok(id as u64)
    }

    pub(super) fn size_on_disk(&self) -> Result<u64, Error> {
        let pool = self.pool.clone();
        let bytes: i64 = self.run(async move {
            sqlx::query_scalar("SELECT pg_total_relation_size('kv')")
                .fetch_one(&pool)
                .await
        })?;
        Ok(bytes.max(0) as u64)
    }

    /// Lands the batch in one transaction; with a guard, only if the lease row it names carries
    /// its fencing token, read `FOR SHARE` so that a takeover (an update of that row) waits for
    /// the batch or the batch sees the takeover (see `fenced`); with expectations, only if each
    /// key holds what is expected, read `FOR UPDATE` in key order.
    pub(super) fn write_batch_guarded(
        &self,
        batch: &Batch,
        guard: Option<Guard>,
    ) -> Result<Checked, Error> {
        let named = |entries: &[super::Entry]| {
            entries
                .iter()
                .map(|(tree, key, value)| match &tree.inner {
                    TreeInner::Postgres(tree) => {
                        Ok((tree.name.clone(), key.clone(), value.clone()))
                    }
                    TreeInner::Sled(_) => Err(Error::Sled(sled::Error::Unsupported(
                        "a batch mixes two databases".into(),
                    ))),
                })
                .collect::<Result<Vec<_>, Error>>()
        };
        let writes = named(&batch.writes)?;
        let mut expects: Vec<(usize, NamedEntry)> =
            named(&batch.expects)?.into_iter().enumerate().collect();
        // One order for every batch, so two that expect the same keys lock them alike.
        expects.sort_by(|(_, a), (_, b)| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let pool = self.pool.clone();
        self.run(async move {
            let mut tx = pool.begin().await?;
            if let Some(guard) = guard {
                let lease: Option<Vec<u8>> = sqlx::query_scalar(
                    "SELECT value FROM kv WHERE tree = $1 AND key = $2 FOR SHARE",
                )
                .bind(&guard.tree)
                .bind(&guard.key)
                .fetch_optional(&mut *tx)
                .await?;
                if !super::lease_carries(lease.as_deref(), guard.fence) {
                    tx.rollback().await?;
                    return Ok(Checked::FenceMoved);
                }
            }
            for (at, (tree, key, expected)) in expects {
                // An absence the batch fills is claimed by inserting: of two writers, the second
                // finds the key taken (a read would see it absent for both).
                let fills = writes
                    .iter()
                    .rev()
                    .find(|(t, k, _)| *t == tree && *k == key)
                    .and_then(|(_, _, value)| value.clone());
                let current: Option<Vec<u8>> = match (&expected, fills) {
                    (None, Some(value)) => {
                        let inserted = sqlx::query(
                            "INSERT INTO kv (tree, key, value) VALUES ($1, $2, $3) \
                             ON CONFLICT DO NOTHING",
                        )
                        .bind(&*tree)
                        .bind(&key)
                        .bind(value)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                        if inserted == 1 {
                            continue;
                        }
                        sqlx::query_scalar("SELECT value FROM kv WHERE tree = $1 AND key = $2")
                            .bind(&*tree)
                            .bind(&key)
                            .fetch_optional(&mut *tx)
                            .await?
                    }
                    _ => {
                        sqlx::query_scalar(
                            "SELECT value FROM kv WHERE tree = $1 AND key = $2 FOR UPDATE",
                        )
                        .bind(&*tree)
                        .bind(&key)
                        .fetch_optional(&mut *tx)
                        .await?
                    }
                };
                if current != expected {
                    tx.rollback().await?;
                    return Ok(Checked::Differs {
                        at,
                        current: current.map(Bytes::from),
                    });
                }
            }
            for (tree, key, value) in writes {
                match value {
                    Some(value) => {
                        sqlx::query(UPSERT)
                            .bind(&*tree)
                            .bind(key)
                            .bind(value)
                            .execute(&mut *tx)
                            .await?
                    }
                    None => {
                        sqlx::query("DELETE FROM kv WHERE tree = $1 AND key = $2")
                            .bind(&*tree)
                            .bind(key)
                            .execute(&mut *tx)
                            .await?
                    }
                };
            }
            tx.commit().await?;
            Ok(Checked::Landed)
        })
    }

    /// Holds the migration lock (a session-level advisory lock on a connection of its own) while
    /// `work` runs.
    pub(super) fn exclusively<T, E: From<Error>>(
        &self,
        work: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let pool = self.pool.clone();
        let connection = self.run(async move {
            let mut connection = pool.acquire().await?;
            sqlx::query("SELECT pg_advisory_lock($1)")
                .bind(MIGRATION_LOCK)
                .execute(&mut *connection)
                .await?;
            Ok(connection)
        })?;
        let outcome = work();
        self.run(async move {
            let mut connection = connection;
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(MIGRATION_LOCK)
                .execute(&mut *connection)
                .await
                .map(drop)
        })?;
        outcome
    }
}

const UPSERT: &str = "INSERT INTO kv (tree, key, value) VALUES ($1, $2, $3) \
                      ON CONFLICT (tree, key) DO UPDATE SET value = EXCLUDED.value";

/// Spawns `work` on `handle` and blocks until it ends; `None` if the runtime dropped it.
fn wait_for<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    work: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (send, receive) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = send.send(work.await);
    });
    receive.recv().ok()
}

/// One tree: its name, on the backend's pool.
#[derive(Clone)]
pub(super) struct PgTree {
    pg: Arc<Pg>,
    name: Arc<str>,
}

impl PgTree {
    pub(super) fn new(pg: Arc<Pg>, name: &str) -> PgTree {
        PgTree {
            pg,
            name: name.into(),
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    fn parts(&self) -> (PgPool, Arc<str>) {
        (self.pg.pool.clone(), self.name.clone())
    }

    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Bytes>, Error> {
        let ((pool, tree), key) = (self.parts(), key.to_vec());
        let value: Option<Vec<u8>> = self.pg.run(async move {
            sqlx::query_scalar("SELECT value FROM kv WHERE tree = $1 AND key = $2")
                .bind(&*tree)
                .bind(key)
                .fetch_optional(&pool)
                .await
        })?;
        Ok(value.map(Bytes::from))
    }

    pub(super) fn contains_key(&self, key: &[u8]) -> Result<bool, Error> {
        let ((pool, tree), key) = (self.parts(), key.to_vec());
        self.pg.run(async move {
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM kv WHERE tree = $1 AND key = $2)")
                .bind(&*tree)
                .bind(key)
                .fetch_one(&pool)
                .await
        })
    }

    pub(super) fn insert(&self, key: &[u8], value: &[u8]) -> Result<Option<Bytes>, Error> {
        let ((pool, tree), key, value) = (self.parts(), key.to_vec(), value.to_vec());
        let before: Option<Vec<u8>> = self.pg.run(async move {
            // The statement's snapshot is taken before it writes, so `before` reads the value it
            // replaces. (With FOR UPDATE it would read nothing: the row locked is the one this
            // statement itself updated.) Each agent's keys have one writer, so nothing can land
            // between the two.
            sqlx::query_scalar(
                "WITH before AS (SELECT value FROM kv WHERE tree = $1 AND key = $2) \
                 INSERT INTO kv (tree, key, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (tree, key) DO UPDATE SET value = EXCLUDED.value \
                 RETURNING (SELECT value FROM before)",
            )
            .bind(&*tree)
            .bind(key)
            .bind(value)
            .fetch_one(&pool)
            .await
        })?;
        Ok(before.map(Bytes::from))
    }

    pub(super) fn remove(&self, key: &[u8]) -> Result<Option<Bytes>, Error> {
        let ((pool, tree), key) = (self.parts(), key.to_vec());
        let before: Option<Vec<u8>> = self.pg.run(async move {
            sqlx::query_scalar("DELETE FROM kv WHERE tree = $1 AND key = $2 RETURNING value")
                .bind(&*tree)
                .bind(key)
                .fetch_optional(&pool)
                .await
        })?;
        Ok(before.map(Bytes::from))
    }

    pub(super) fn compare_and_swap(
        &self,
        key: &[u8],
        old: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<Result<(), CompareAndSwapError>, Error> {
        let ((pool, tree), key_owned) = (self.parts(), key.to_vec());
        let (old, new) = (old.map(<[u8]>::to_vec), new.map(<[u8]>::to_vec));
        let swapped =
            self.pg.run(async move {
                let changed = match (old, new) {
                (None, None) => {
                    return sqlx::query_scalar::<_, bool>(
                        "SELECT NOT EXISTS (SELECT 1 FROM kv WHERE tree = $1 AND key = $2)",
                    )
                    .bind(&*tree)
                    .bind(key_owned)
                    .fetch_one(&pool)
                    .await;
                }
                (None, Some(new)) => sqlx::query(
                    "INSERT INTO kv (tree, key, value) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                )
                .bind(&*tree)
                .bind(key_owned)
                .bind(new)
                .execute(&pool)
                .await?,
                (Some(old), Some(new)) => sqlx::query(
                    "UPDATE kv SET value = $4 WHERE tree = $1 AND key = $2 AND value = $3",
                )
                .bind(&*tree)
                .bind(key_owned)
                .bind(old)
                .bind(new)
                .execute(&pool)
                .await?,
                (Some(old), None) => {
                    sqlx::query("DELETE FROM kv WHERE tree = $1 AND key = $2 AND value = $3")
                        .bind(&*tree)
                        .bind(key_owned)
                        .bind(old)
                        .execute(&pool)
                        .await?
                }
            };
                Ok(changed.rows_affected() == 1)
            })?;
        if swapped {
            Ok(Ok(()))
        } else {
            Ok(Err(CompareAndSwapError {
                current: self.get(key)?,
            }))
        }
    }

    pub(super) fn len(&self) -> Result<usize, Error> {
        let (pool, tree) = self.parts();
        let count: i64 = self.pg.run(async move {
            sqlx::query_scalar("SELECT count(*) FROM kv WHERE tree = $1")
                .bind(&*tree)
                .fetch_one(&pool)
                .await
        })?;
        Ok(count.max(0) as usize)
    }

    pub(super) fn clear(&self) -> Result<(), Error> {
        let (pool, tree) = self.parts();
        self.pg.run(async move {
            sqlx::query("DELETE FROM kv WHERE tree = $1")
                .bind(&*tree)
                .execute(&pool)
                .await
                .map(drop)
        })
    }

    pub(super) fn range(&self, low: Bound<Vec<u8>>, high: Bound<Vec<u8>>) -> PgIter {
        PgIter {
            tree: self.clone(),
            low,
            high,
            front: VecDeque::new(),
            back: VecDeque::new(),
            ended: false,
        }
    }

    /// Up to `PAGE_ROWS` pairs between `low` and `high`, from the low end or the high end.
    fn page(
        &self,
        low: &Bound<Vec<u8>>,
        high: &Bound<Vec<u8>>,
        from: End,
    ) -> Result<Vec<(Bytes, Bytes)>, Error> {
        let ((pool, tree), low, high) = (self.parts(), low.clone(), high.clone());
        let rows: Vec<(Vec<u8>, Vec<u8>)> = self.pg.run(async move {
            let mut query = QueryBuilder::new("SELECT key, value FROM kv WHERE tree = ");
            query.push_bind(tree.to_string());
            match low {
                Bound::Included(key) => query.push(" AND key >= ").push_bind(key),
                Bound::Excluded(key) => query.push(" AND key > ").push_bind(key),
                Bound::Unbounded => &mut query,
            };
            match high {
                Bound::Included(key) => query.push(" AND key <= ").push_bind(key),
                Bound::Excluded(key) => query.push(" AND key < ").push_bind(key),
                Bound::Unbounded => &mut query,
            };
            query.push(match from {
                End::Low => " ORDER BY key ASC LIMIT ",
                End::High => " ORDER BY key DESC LIMIT ",
            });
            query.push_bind(PAGE_ROWS);
            query.build_query_as().fetch_all(&pool).await
        })?;
        Ok(rows
            .into_iter()
            .map(|(key, value)| (Bytes::from(key), Bytes::from(value)))
            .collect())
    }
}

#[derive(Clone, Copy)]
enum End {
    Low,
    High,
}

/// A range walked from both ends, a page at a time. `low` and `high` shrink past every pair
/// handed out, so the two ends never hand out the same pair, whatever each has read ahead.
pub struct PgIter {
    tree: PgTree,
    low: Bound<Vec<u8>>,
    high: Bound<Vec<u8>>,
    front: VecDeque<(Bytes, Bytes)>,
    back: VecDeque<(Bytes, Bytes)>,
    ended: bool,
}

impl PgIter {
    fn above_low(&self, key: &[u8]) -> bool {
        match &self.low {
            Bound::Included(low) => key >= low.as_slice(),
            Bound::Excluded(low) => key > low.as_slice(),
            Bound::Unbounded => true,
        }
    }

    fn below_high(&self, key: &[u8]) -> bool {
        match &self.high {
            Bound::Included(high) => key <= high.as_slice(),
            Bound::Excluded(high) => key < high.as_slice(),
            Bound::Unbounded => true,
        }
    }

    fn take(&mut self, from: End) -> Option<Result<(Bytes, Bytes), Error>> {
        if self.ended {
            return None;
        }
        let buffered = match from {
            End::Low => &mut self.front,
            End::High => &mut self.back,
        };
        if buffered.is_empty() {
            match self.tree.page(&self.low, &self.high, from) {
                Ok(page) => match from {
                    End::Low => self.front.extend(page),
                    End::High => self.back.extend(page),
                },
                Err(e) => {
                    self.ended = true;
                    return Some(Err(e));
                }
            }
        }
        let next = match from {
            End::Low => self.front.pop_front(),
            End::High => self.back.pop_front(),
        };
        let Some((key, value)) = next else {
            self.ended = true;
            return None;
        };
        // The other end may have handed out this pair already.
        if !(self.above_low(&key) && self.below_high(&key)) {
            self.ended = true;
            return None;
        }
        match from {
            End::Low => self.low = Bound::Excluded(key.to_vec()),
            End::High => self.high = Bound::Excluded(key.to_vec()),
        }
        Some(Ok((key, value)))
    }
}

impl Iterator for PgIter {
    type Item = Result<(Bytes, Bytes), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.take(End::Low)
    }
}

impl DoubleEndedIterator for PgIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.take(End::High)
    }
}
