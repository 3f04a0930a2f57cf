//! Store URLs in `capgate check`: a Postgres URL's TLS parameters (`sslmode`,
//! `sslrootcert`) are checked where the file writes them, relative paths resolved against
//! the file's directory, the password never shown.

use capgate_config::Config;
use capgate_config::store_url::{check_url, resolve_postgres_files};
use std::path::Path;

/// A PEM CA certificate made for the test.
fn ca_pem() -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).expect("certificate").pem()
}

/// The problems of a configuration in `dir` whose store is `url` (none: an empty list).
fn problems(dir: &Path, url: &str) -> Vec<String> {
    let text = format!("revision = \"r1\"\n[store]\nurl = \"{url}\"\n");
    match Config::parse(&dir.join("capgate.toml"), text) {
        Ok(_) => Vec::new(),
        Err(problems) => problems
            .iter()
            .map(|p| {
                assert_eq!(p.key, "store.url", "{p}");
                p.message.clone()
            })
            .collect(),
    }
}

#[test]
fn an_unknown_sslmode_is_refused_naming_the_modes() {
    let err = check_url("postgres://u:secret@db/x?sslmode=verify_full").expect_err("refused");
    assert!(
        err.contains("sslmode=verify_full")
            && err.contains("disable, allow, prefer, require, verify-ca, verify-full"),
        "{err}"
    );
    assert!(!err.contains("secret"), "password shown: {err}");
    for mode in ["disable", "prefer", "require", "verify-ca", "VERIFY-FULL"] {
        check_url(&format!("postgres://u:secret@db/x?sslmode={mode}")).expect(mode);
    }
    let dir = tempfile::tempdir().expect("dir");
    let found = problems(dir.path(), "postgres://u:secret@db/x?sslmode=on");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("verify-full"), "{found:?}");
}

#[test]
fn sslrootcert_is_a_pem_certificate_file_relative_to_the_config_file() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::create_dir(dir.path().join("certs")).expect("certs");
    std::fs::write(dir.path().join("certs/ca.pem"), ca_pem()).expect("ca.pem");
    let url = "postgres://u:secret@db/x?sslmode=verify-full&sslrootcert=certs/ca.pem";
    assert_eq!(problems(dir.path(), url), Vec::<String>::new());

    // Missing: the resolved path and the rule are named, the password is not.
    let missing = "postgres://u:secret@db/x?sslmode=verify-full&sslrootcert=certs/nope.pem";
    let found = problems(dir.path(), missing);
    assert_eq!(found.len(), 1, "{found:?}");
    let want = dir.path().join("certs/nope.pem").display().to_string();
    assert!(
        found[0].contains(&want) && found[0].contains("relative to this file's directory"),
        "{found:?}"
    );
    assert!(!found[0].contains("secret"), "password shown: {found:?}");

    // Not a certificate.
    std::fs::write(dir.path().join("certs/notes.txt"), "hello").expect("notes");
    let found = problems(
        dir.path(),
        "postgres://u:secret@db/x?sslmode=verify-ca&sslrootcert=certs/notes.txt",
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("no PEM certificate"), "{found:?}");

    // A client certificate without its key.
    let err = check_url("postgres://u:secret@db/x?sslcert=c.pem").expect_err("refused");
    assert!(err.contains("sslkey"), "{err}");
}

#[test]
fn relative_tls_files_are_resolved_and_the_rest_of_the_url_is_kept() {
    let base = Path::new("/etc/capgate");
    assert_eq!(
        resolve_postgres_files(
            "postgres://u:p%40ss@db:5433/x?sslmode=verify-full&sslrootcert=certs/ca%20file.pem&application_name=cg",
            base
        ),
        "postgres://u:p%40ss@db:5433/x?sslmode=verify-full&sslrootcert=/etc/capgate/certs/ca%20file.pem&application_name=cg"
    );
    let absolute = "postgres://u:p@db/x?sslrootcert=/srv/ca.pem&sslcert=c.pem&sslkey=k.pem";
    assert_eq!(
        resolve_postgres_files(absolute, base),
        "postgres://u:p@db/x?sslrootcert=/srv/ca.pem&sslcert=/etc/capgate/c.pem&sslkey=/etc/capgate/k.pem"
    );
    assert_eq!(
        resolve_postgres_files("postgres://u:p@db/x", base),
        "postgres://u:p@db/x"
    );
    assert_eq!(
        resolve_postgres_files("sqlite://x.db?sslrootcert=a", base),
        "sqlite://x.db?sslrootcert=a"
    );
}
