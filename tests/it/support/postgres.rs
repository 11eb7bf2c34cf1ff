//! The PostgreSQL server the store's tests use (`AUTOTHREAD_TEST_POSTGRES_URL`, started by
//! `scripts/postgres-test-server.sh`): a schema of its own for each test, so tests sharing the
//! server never see each other's rows.

use super::needs::needs;

pub const TEST_POSTGRES_URL: &str = "AUTOTHREAD_TEST_POSTGRES_URL";

/// The URL of a fresh, empty schema on the test server, and the server's password (which no
/// output may show); `None` after the skip or failure `needs` makes when there is no server.
pub async fn fresh_database() -> Option<(String, String)> {
    let url = needs(std::env::var(TEST_POSTGRES_URL).map_err(|_| {
        format!(
            "{TEST_POSTGRES_URL} names no PostgreSQL server (scripts/postgres-test-server.sh starts one)"
        )
    }))?;
    let password = reqwest::Url::parse(&url)
        .ok()
        .and_then(|parsed| parsed.password().map(str::to_string))
        .expect("the test server's URL has a password");
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    {
        use sqlx::Connection as _;
        let mut connection = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&mut connection)
            .await
            .unwrap();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    Some((
        format!("{url}{separator}options[search_path]={schema}"),
        password,
    ))
}
