//! Where the store is: one rule for every command.
//!
//! - `store.url` in a configuration file is relative to **that file's directory**.
//! - `--store` (or `CAPGATE_STORE`) on the command line is relative to the **current
//!   directory**, like every path a command line takes.
//! - The same holds for the files a Postgres URL names (`sslrootcert`, `sslcert`,
//!   `sslkey`).
//!
//! `serve`, `mcp` and `migrate` may create a SQLite database ([`Access::Create`]); every
//! other command only opens one that exists ([`Access::Existing`]), so a mistyped path is
//! an error that says what to do, never a new empty database and an empty answer.

use anyhow::{Context, bail};
use capgate_config::store_url::{Kind, kind, resolve_postgres_files};
pub use capgate_config::store_url::{check_url, redact_url};
use capgate_store::Store;
use std::path::{Path, PathBuf};

/// How a command uses the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `serve`, `mcp`, `migrate`: a SQLite file that does not exist yet is created.
    Create,
    /// Every other command: the database must already be there.
    Existing,
}

/// Where a store URL was written, which decides what a relative SQLite path is relative to.
#[derive(Debug, Clone)]
enum Origin {
    /// `--store` or `CAPGATE_STORE`: the current directory.
    CommandLine { cwd: PathBuf },
    /// `store.url` in this configuration file: its state directory (`runtime.stateDir`,
    /// by default the file's directory).
    ConfigFile { file: PathBuf, state: PathBuf },
}

/// A store URL with its SQLite path resolved by the rule of this module.
#[derive(Debug, Clone)]
pub struct StoreUrl {
    /// As written.
    written: String,
    /// With an absolute SQLite path.
    resolved: String,
    /// The SQLite file, when it is one.
    file: Option<PathBuf>,
    origin: Origin,
}

impl StoreUrl {
    /// `--store URL` (or `CAPGATE_STORE`): a relative SQLite path is relative to the
    /// current directory.
    pub fn from_command_line(url: &str) -> anyhow::Result<StoreUrl> {
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        StoreUrl::resolve(url, Origin::CommandLine { cwd })
            .map_err(|e| anyhow::anyhow!("--store: {e}"))
    }

    /// `store.url` of a configuration file: a relative SQLite path is relative to the file's
    /// directory.
    pub fn from_config_file(url: &str, file: &Path) -> anyhow::Result<StoreUrl> {
        StoreUrl::from_config_file_in(url, file, capgate_config::file_dir(file))
    }

    /// `store.url` of a configuration file whose state directory is `state`: a relative
    /// SQLite path is relative to it (a Postgres URL's certificate files stay relative to
    /// the file's directory: they are configuration, not state).
    pub fn from_config_file_in(url: &str, file: &Path, state: &Path) -> anyhow::Result<StoreUrl> {
        let file = std::path::absolute(file)
            .with_context(|| format!("cannot resolve {}", file.display()))?;
        let state = std::path::absolute(state)
            .with_context(|| format!("cannot resolve {}", state.display()))?;
        StoreUrl::resolve(
            url,
            Origin::ConfigFile {
                file: file.clone(),
                state,
            },
        )
        .map_err(|e| anyhow::anyhow!("{}: store.url: {e}", file.display()))
    }

    /// The store of a command with a configuration file: `--store` when given, else the
    /// file's `store.url`.
    pub fn for_store(
        command_line: Option<&str>,
        store: &crate::resolve::StoreSettings,
    ) -> anyhow::Result<StoreUrl> {
        match command_line {
            Some(url) => StoreUrl::from_command_line(url),
            None => StoreUrl::from_config_file_in(store.url(), store.file(), store.state_dir()),
        }
    }

    fn resolve(url: &str, origin: Origin) -> Result<StoreUrl, String> {
        let (base, files) = match &origin {
            Origin::CommandLine { cwd } => (cwd.as_path(), cwd.as_path()),
            Origin::ConfigFile { file, state } => {
                (state.as_path(), file.parent().unwrap_or(Path::new("/")))
            }
        };
        let (resolved, file) = match kind(url)? {
            Kind::SqliteFile { path, query } => {
                let full = base.join(path);
                let resolved = match query {
                    Some(q) => format!("sqlite://{}?{q}", full.display()),
                    None => format!("sqlite://{}", full.display()),
                };
                (resolved, Some(full))
            }
            Kind::SqliteMemory => (url.to_string(), None),
            // `sslrootcert`, `sslcert` and `sslkey` by the same rule as a SQLite path.
            Kind::Postgres => (resolve_postgres_files(url, files), None),
        };
        Ok(StoreUrl {
            written: url.to_string(),
            resolved,
            file,
            origin,
        })
    }

    /// The URL to open (SQLite path absolute).
    pub fn url(&self) -> &str {
        &self.resolved
    }

    /// The URL for messages: the resolved one, password hidden.
    pub fn display(&self) -> String {
        redact_url(&self.resolved)
    }

    /// Where the relative path was taken from, for messages.
    fn rule(&self) -> String {
        match &self.origin {
            Origin::CommandLine { cwd } => format!(
                "--store {} is relative to the current directory ({})",
                redact_url(&self.written),
                cwd.display()
            ),
            Origin::ConfigFile { file, state } if Some(state.as_path()) == file.parent() => {
                format!(
                    "store.url {} in {} is relative to that file's directory",
                    redact_url(&self.written),
                    file.display()
                )
            }
            Origin::ConfigFile { file, state } => format!(
                "store.url {} in {} is relative to its runtime.stateDir ({})",
                redact_url(&self.written),
                file.display(),
                state.display()
            ),
        }
    }

    /// Refuse what `access` does not allow, before anything is opened: a SQLite database
    /// that does not exist (for [`Access::Existing`]), or one in a missing directory.
    pub fn require(&self, access: Access) -> anyhow::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if file.is_file() {
            return Ok(());
        }
        if file.exists() {
            bail!(
                "{} is not a SQLite database file\n  note: {}",
                file.display(),
                self.rule()
            );
        }
        match access {
            Access::Existing => bail!(
                "no SQLite database at {}\n  note: {}\n  help: point --store (or store.url) at the database `capgate serve` writes; \
                 to start an empty one on purpose, run `capgate migrate --store {}`",
                file.display(),
                self.rule(),
                self.display()
            ),
            Access::Create => match file.parent() {
                Some(dir) if !dir.is_dir() => bail!(
                    "cannot create the SQLite database {}: the directory {} does not exist\n  note: {}",
                    file.display(),
                    dir.display(),
                    self.rule()
                ),
                _ => Ok(()),
            },
        }
    }

    /// Open the store (SQLite is migrated at open), after [`StoreUrl::require`].
    pub async fn open(&self, access: Access) -> anyhow::Result<Store> {
        self.open_with(access, capgate_store::StoreOptions::default())
            .await
    }

    /// [`StoreUrl::open`] with the pool options of a configuration's `[store]`.
    pub async fn open_with(
        &self,
        access: Access,
        options: capgate_store::StoreOptions,
    ) -> anyhow::Result<Store> {
        self.require(access)?;
        Store::open_with(&self.resolved, options)
            .await
            .with_context(|| format!("could not open the store {}", self.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_config_file_name_resolves_against_the_current_directory() {
        // Issue 57: `capgate serve --config capgate.toml`, run where the file is, failed with
        // "cannot make an empty path absolute" (the parent of a bare name is empty).
        let cwd = std::env::current_dir().expect("cwd");
        let s = StoreUrl::from_config_file("sqlite://capgate.db", Path::new("capgate.toml"))
            .expect("a bare file name resolves");
        assert_eq!(
            s.url(),
            format!("sqlite://{}", cwd.join("capgate.db").display())
        );
        let (cfg, _) = capgate_config::Config::parse(
            Path::new("capgate.toml"),
            "revision = \"r1\"\n[store]\nurl = \"sqlite://state.db\"\n".into(),
        )
        .expect("parses");
        assert_eq!(cfg.state_dir(), Path::new("."));
        let settings = crate::resolve::StoreSettings::of(&cfg);
        let s = StoreUrl::for_store(None, &settings).expect("the file's store resolves");
        assert_eq!(
            s.url(),
            format!("sqlite://{}", cwd.join("state.db").display())
        );
    }

    #[test]
    fn a_relative_sqlite_path_in_a_config_file_is_relative_to_the_file() {
        let s = StoreUrl::from_config_file(
            "sqlite://state/x.db?mode=rwc",
            Path::new("/etc/cg/capgate.toml"),
        )
        .expect("url");
        assert_eq!(s.url(), "sqlite:///etc/cg/state/x.db?mode=rwc");
    }

    #[test]
    fn an_absolute_sqlite_path_and_other_urls_stay_as_written() {
        let s = StoreUrl::from_config_file("sqlite:///var/x.db", Path::new("/etc/capgate.toml"))
            .expect("url");
        assert_eq!(s.url(), "sqlite:///var/x.db");
        let p = StoreUrl::from_config_file("postgres://u:p@h/db", Path::new("/etc/capgate.toml"))
            .expect("url");
        assert_eq!(p.url(), "postgres://u:p@h/db");
        assert_eq!(p.display(), "postgres://u:***@h/db");
        let tls = StoreUrl::from_config_file(
            "postgres://u:p@h/db?sslmode=verify-full&sslrootcert=certs/ca.pem",
            Path::new("/etc/cg/capgate.toml"),
        )
        .expect("url");
        assert_eq!(
            tls.url(),
            "postgres://u:p@h/db?sslmode=verify-full&sslrootcert=/etc/cg/certs/ca.pem"
        );
    }

    #[test]
    fn an_unknown_scheme_or_an_empty_path_is_refused() {
        assert!(check_url("mysql://h/db").is_err());
        assert!(check_url("sqlite://").is_err());
        assert!(check_url("sqlite::memory:").is_ok());
    }
}
