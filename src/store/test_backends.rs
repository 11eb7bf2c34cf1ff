//! The store's tests on both backends: `on_both_backends!` turns a test written for a `Backend`
//! into one test per backend, and `TestStore` gives it a store of its own on that backend (a
//! folder for sled; a fresh schema of the PostgreSQL server in `AUTOTHREAD_TEST_POSTGRES_URL`,
//! which `scripts/postgres-test-server.sh` starts, for PostgreSQL). Without that server a
//! PostgreSQL test fails under `CI=true` and says it skipped, and why, outside CI.

use super::kv::Backend;
use super::Store;

/// The variable naming the PostgreSQL server the tests use.
pub(crate) const TEST_POSTGRES_URL: &str = "AUTOTHREAD_TEST_POSTGRES_URL";

/// A store for one test, which it may open, drop and open again as a restart would.
pub(crate) struct TestStore {
    dir: tempfile::TempDir,
    postgres_url: Option<String>,
}

impl TestStore {
    /// A new, empty store on `backend`; `None` when the test cannot run here (said why).
    pub(crate) fn on(backend: Backend) -> Option<TestStore> {
        let dir = tempfile::tempdir().unwrap();
        let postgres_url = match backend {
            Backend::Sled => None,
            Backend::Postgres => match std::env::var(TEST_POSTGRES_URL) {
                Ok(url) => Some(fresh_schema(&url)),
                Err(_) => {
                    let why = format!(
                        "{TEST_POSTGRES_URL} names no PostgreSQL server \
                         (scripts/postgres-test-server.sh starts one)"
                    );
                    assert_ne!(
                        std::env::var("CI").as_deref(),
                        Ok("true"),
                        "under CI=true every test runs, and this one cannot: {why}"
                    );
                    eprintln!("skipped: {why}");
                    return None;
                }
            },
        };
        Some(TestStore { dir, postgres_url })
    }

    /// Opens the store (again).
    pub(crate) fn open(&self) -> Store {
        self.try_open().unwrap()
    }

    pub(crate) fn try_open(&self) -> Result<Store, super::StoreError> {
        match &self.postgres_url {
            Some(url) => Store::open_postgres(url, self.dir.path()),
            None => Store::open(self.dir.path()),
        }
    }
}

/// A schema of its own on the server at `url`, and the URL that makes it the only one a
/// connection sees: tests share one server and never see each other's rows.
fn fresh_schema(url: &str) -> String {
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let (url_owned, statement) = (url.to_string(), format!("CREATE SCHEMA {schema}"));
    // On a thread of its own, so that a test's own runtime is not asked to block.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            use sqlx::Connection as _;
            let mut connection = sqlx::PgConnection::connect(&url_owned).await.unwrap();
            sqlx::query(&statement)
                .execute(&mut connection)
                .await
                .unwrap();
        });
    })
    .join()
    .unwrap();
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options[search_path]={schema}")
}

/// Runs the test function `name(backend: Backend)` once on each backend, as `name::sled` and
/// `name::postgres`; `async` for a test that awaits.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn sled() {
                    super::$name($crate::store::kv::Backend::Sled)
                }
                #[test]
                fn postgres() {
                    super::$name($crate::store::kv::Backend::Postgres)
                }
            }
        )*
    };
    (async $($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn sled() {
                    super::$name($crate::store::kv::Backend::Sled).await
                }
                #[tokio::test]
                async fn postgres() {
                    super::$name($crate::store::kv::Backend::Postgres).await
                }
            }
        )*
    };
}
pub(crate) use on_both_backends;
