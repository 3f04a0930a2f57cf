//! One store path rule, as processes run from a directory that is neither the config file's
//! nor the store's: `store.url` in a configuration file is relative to that file,
//! `--store` is relative to the current directory, and a command that only reads refuses a
//! SQLite database that is not there (saying what to do) instead of creating an empty one.

use crate::common;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A deployment with no plugins whose store is `cfg.db` beside the file.
fn config() -> String {
    format!(
        "revision = \"r1\"\n\n[store]\nurl = \"sqlite://cfg.db\"\n\n{}\n{}",
        common::LOOKUP_OVER_HTTP,
        common::AGENT_ROUTE_WITH_DANAS_KEY
    )
}

/// `root/cfg/capgate.toml` and an empty `root/work`, the current directory of every run.
struct Layout {
    _root: tempfile::TempDir,
    cfg: PathBuf,
    work: PathBuf,
}

impl Layout {
    fn new() -> Layout {
        let root = tempfile::tempdir().expect("tempdir");
        let base = root.path().canonicalize().expect("canonical tempdir");
        let cfg = base.join("cfg");
        let work = base.join("work");
        std::fs::create_dir_all(&cfg).expect("cfg dir");
        std::fs::create_dir_all(&work).expect("work dir");
        std::fs::write(cfg.join("capgate.toml"), config()).expect("write config");
        Layout {
            _root: root,
            cfg,
            work,
        }
    }

    /// `capgate ARGS` in `work`, with no `CAPGATE_STORE` from the environment.
    fn capgate(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_capgate"))
            .args(args)
            .current_dir(&self.work)
            .env_remove("CAPGATE_STORE")
            .output()
            .expect("run capgate")
    }

    /// Start `capgate serve ARGS --listen 127.0.0.1:0` in `work`, wait until it listens,
    /// then stop it.
    fn serve_once(&self, args: &[&str]) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_capgate"))
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .current_dir(&self.work)
            .env_remove("CAPGATE_STORE")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start capgate serve");
        let stdout = child.stdout.take().expect("stdout");
        let listening = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("listening on"));
        let _ = child.kill();
        let _ = child.wait();
        assert!(listening, "capgate serve {args:?} never listened");
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_refused_without_creating(out: &Output, missing: &Path, rule: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "it succeeded:\n{err}");
    assert!(
        err.contains(&format!("no SQLite database at {}", missing.display())),
        "the error names the resolved path {}:\n{err}",
        missing.display()
    );
    assert!(
        err.contains(rule),
        "the error states the rule ({rule}):\n{err}"
    );
    assert!(
        err.contains("capgate migrate --store"),
        "the error says what to do next:\n{err}"
    );
    assert!(!missing.exists(), "{} was created", missing.display());
}

#[test]
fn read_only_commands_refuse_a_missing_sqlite_database_and_create_nothing() {
    let l = Layout::new();
    let missing = l.work.join("rel.db");
    let config = l.cfg.join("capgate.toml");
    let config = config.to_str().expect("utf-8 path");
    let scope = [
        "--namespace",
        "org_1",
        "--actor",
        "user:u_dana",
        "--surface",
        "aiSdk",
    ];
    let commands: Vec<Vec<&str>> = vec![
        vec!["audit", "tail", "--store", "sqlite://rel.db"],
        vec!["audit", "query", "--store", "sqlite://rel.db"],
        [
            &["invocations", "show", "call_1"][..],
            &scope,
            &["--store", "sqlite://rel.db"],
        ]
        .concat(),
        vec!["invocations", "purge", "--store", "sqlite://rel.db"],
        vec![
            "approvals",
            "list",
            "--config",
            config,
            "--store",
            "sqlite://rel.db",
        ],
        vec![
            "approvals",
            "show",
            "apr_1",
            "--config",
            config,
            "--store",
            "sqlite://rel.db",
        ],
    ];
    for args in commands {
        let out = l.capgate(&args);
        assert_refused_without_creating(&out, &missing, "relative to the current directory");
        assert!(
            !l.cfg.join("rel.db").exists(),
            "{args:?}: a --store path is not relative to the config file"
        );
    }
}

#[test]
fn a_config_files_store_url_is_relative_to_the_file_not_the_current_directory() {
    let l = Layout::new();
    let config = l.cfg.join("capgate.toml");
    let config = config.to_str().expect("utf-8 path");
    // No store yet: the error names the file's store, beside the file.
    let out = l.capgate(&["approvals", "list", "--config", config]);
    assert_refused_without_creating(
        &out,
        &l.cfg.join("cfg.db"),
        "relative to that file's directory",
    );
    assert!(!l.work.join("cfg.db").exists());
    // `serve` creates it there, and then every reader of the same file finds it.
    l.serve_once(&["--config", config]);
    assert!(
        l.cfg.join("cfg.db").is_file(),
        "serve created the file's store"
    );
    assert!(
        !l.work.join("cfg.db").exists(),
        "not in the current directory"
    );
    let out = l.capgate(&["approvals", "list", "--config", config]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_command_line_store_is_relative_to_the_current_directory_under_every_command() {
    let l = Layout::new();
    let config = l.cfg.join("capgate.toml");
    let config = config.to_str().expect("utf-8 path");
    // `serve --store sqlite://served.db` creates it in the current directory.
    l.serve_once(&["--config", config, "--store", "sqlite://served.db"]);
    assert!(
        l.work.join("served.db").is_file(),
        "serve's --store is cwd-relative"
    );
    assert!(
        !l.cfg.join("served.db").exists(),
        "not beside the config file"
    );
    // `migrate` creates in the current directory too; then the readers find both.
    let out = l.capgate(&["migrate", "--store", "sqlite://rel.db"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(l.work.join("rel.db").is_file());
    for db in ["sqlite://served.db", "sqlite://rel.db"] {
        for args in [
            vec!["audit", "tail", "--store", db],
            vec!["invocations", "purge", "--store", db],
            vec!["approvals", "list", "--config", config, "--store", db],
        ] {
            let out = l.capgate(&args);
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        }
    }
    // `migrate` into a directory that does not exist says so, and creates nothing.
    let out = l.capgate(&["migrate", "--store", "sqlite://nowhere/x.db"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    assert!(!l.work.join("nowhere").exists());
}
