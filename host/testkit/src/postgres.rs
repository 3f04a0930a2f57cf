//! A throwaway Postgres database per test.

use sqlx::Connection;

/// The variable CI sets to a Postgres server the tests may `CREATE DATABASE` on.
pub const URL_ENV: &str = "CAPGATE_TEST_POSTGRES_URL";

/// A database that exists for one test, dropped (`WITH (FORCE)`) when this value is.
pub struct TestDatabase {
    base: String,
    name: String,
    /// Its connection URL.
    pub url: String,
}

impl TestDatabase {
    /// A fresh database named `{prefix}_{uuid}` on the server in [`URL_ENV`]. Without the
    /// variable: a panic under `CI=true`, a printed notice and `None` otherwise.
    pub async fn create(prefix: &str) -> Option<TestDatabase> {
        let Ok(base) = std::env::var(URL_ENV) else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "{URL_ENV} is not set but CI=true: the Postgres tests must run in CI \
                     (point it at a server where the tests may CREATE DATABASE)"
                );
            }
            eprintln!("notice: {URL_ENV} is not set; skipping this Postgres test");
            return None;
        };
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&base)
            .await
            .unwrap_or_else(|e| panic!("cannot reach {URL_ENV}={base}: {e}"));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let _ = admin.close().await;
        let url = with_database(&base, &name);
        Some(TestDatabase { base, name, url })
    }

    /// Drop the database now (a store still using it loses it: the database-loss drills).
    pub async fn drop_now(&self) {
        drop_database(&self.base, &self.name).await;
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        // Drop runs inside the test's runtime, which cannot be blocked on: use a thread
        // with a runtime of its own.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(drop_database(&base, &name));
            }
        })
        .join();
    }
}

async fn drop_database(base: &str, name: &str) {
    if let Ok(mut admin) = sqlx::PgConnection::connect(base).await {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await;
        let _ = admin.close().await;
    }
}

/// `base` with its database name replaced by `name` (query parameters kept).
pub fn with_database(base: &str, name: &str) -> String {
    let (path_start, rest) = match base.find("://") {
        Some(i) => (i + 3, &base[i + 3..]),
        None => (0, base),
    };
    let (authority_end, query) = match rest.find('/') {
        Some(slash) => {
            let after = &rest[slash..];
            let q = after.find('?').map(|q| &after[q..]).unwrap_or("");
            (path_start + slash, q)
        }
        None => {
            let q = rest.find('?');
            (
                path_start + q.unwrap_or(rest.len()),
                q.map(|q| &rest[q..]).unwrap_or(""),
            )
        }
    };
    format!("{}/{name}{query}", &base[..authority_end])
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_names_are_replaced_in_urls() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres?sslmode=disable", "x"),
            "postgres://u:p@h:5432/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
        assert_eq!(with_database("postgres://h?a=b", "x"), "postgres://h/x?a=b");
    }
}
