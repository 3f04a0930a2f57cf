//! TLS to Postgres, against a private cluster this test starts: `ssl = on`, a server
//! certificate for `localhost` and 127.0.0.1 signed by a CA made for the test, and a
//! `pg_hba.conf` that accepts TLS connections only. The store connects under `verify-full`
//! with that CA and migrates; an unrelated CA, and a connection without TLS, are refused
//! with errors that say why.
//!
//! Needs the Postgres server binaries (`/usr/lib/postgresql/*/bin`); without them the test
//! is skipped with a notice, except under `CI=true`, where it fails.

use capgate_store::{Store, StoreError, StoreOptions, TlsFailure};
use sqlx::Connection;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The newest `/usr/lib/postgresql/<version>/bin` that has `initdb` and `pg_ctl`.
fn postgres_bin() -> Option<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.split('.').next()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, bin)| bin)
}

/// A certificate authority made for one test run.
struct Ca {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let issuer = rcgen::CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        Ca { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate and its key (PEM) for `localhost` and 127.0.0.1.
    fn server(&self) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("server key");
        let cert =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .expect("server params")
                .signed_by(&key, &self.issuer)
                .expect("server certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// Run `program args` as the `postgres` OS user when this process is root (Postgres
/// refuses to run as root), as this user otherwise; panic with its output on failure.
fn run_as_postgres(root: bool, program: &Path, args: &[&str]) {
    let mut cmd = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    let out = cmd
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{}\n{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Postgres cluster owned by one test, stopped (`pg_ctl stop -m immediate`) and its
/// directory removed when dropped.
struct Cluster {
    bin: PathBuf,
    root: bool,
    data: PathBuf,
    port: u16,
    /// The CA that signed the server's certificate, as a file.
    ca_file: PathBuf,
    /// Holds everything; removed last.
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Start a cluster with TLS only, or `None` (a notice) when the Postgres binaries are
    /// missing outside CI.
    fn start(ca: &Ca) -> Option<Cluster> {
        let Some(bin) = postgres_bin() else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "no Postgres server binaries under /usr/lib/postgresql/*/bin but CI=true: \
                     the Postgres TLS test must run in CI (install the postgresql package)"
                );
            }
            eprintln!("notice: no Postgres server binaries; skipping the Postgres TLS test");
            return None;
        };
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let data = dir.path().join("data");
        let (cert, key) = ca.server();
        let (cert_file, key_file) = (dir.path().join("server.crt"), dir.path().join("server.key"));
        std::fs::write(&cert_file, cert).expect("server.crt");
        std::fs::write(&key_file, key).expect("server.key");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).expect("ca.pem");
        // Postgres refuses a key file others can read.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600))
            .expect("chmod server.key");
        if root {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(
                status.success(),
                "chown -R postgres {}",
                dir.path().display()
            );
        }
        let data_s = data.to_str().expect("a UTF-8 temporary path").to_string();
        run_as_postgres(
            root,
            &bin.join("initdb"),
            &["-D", &data_s, "-U", "postgres", "--auth=trust", "--no-sync"],
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let conf = format!(
            "\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\nfsync = off\n",
            dir.path().display(),
            cert_file.display(),
            key_file.display()
        );
        let mut pg_conf = std::fs::read_to_string(data.join("postgresql.conf")).expect("conf");
        pg_conf.push_str(&conf);
        std::fs::write(data.join("postgresql.conf"), pg_conf).expect("postgresql.conf");
        // TLS connections only: a plain one finds no line and is refused.
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        )
        .expect("pg_hba.conf");
        let log = dir.path().join("postgres.log");
        let cluster = Cluster {
            bin,
            root,
            data,
            port,
            ca_file,
            dir,
        };
        run_as_postgres(
            root,
            &cluster.bin.join("pg_ctl"),
            &[
                "-D",
                &data_s,
                "-l",
                log.to_str().expect("UTF-8"),
                "-w",
                "-t",
                "120",
                "start",
            ],
        );
        Some(cluster)
    }

    /// A URL to the cluster at `host` with `query`.
    fn url(&self, host: &str, query: &str) -> String {
        format!(
            "postgres://postgres:not-a-secret@{host}:{}/postgres?{query}",
            self.port
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data.to_string_lossy().into_owned();
        let mut cmd = if self.root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"));
            c
        } else {
            Command::new(self.bin.join("pg_ctl"))
        };
        let _ = cmd
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .output();
        // Then the TempDir field removes the directory.
    }
}

fn options() -> StoreOptions {
    StoreOptions {
        auto_migrate: Some(true),
        max_connections: Some(2),
        ..StoreOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tls_verify_full_accepts_the_configured_ca_and_refuses_another() {
    let ca = Ca::new("capgate Postgres TLS test CA");
    let Some(cluster) = Cluster::start(&ca) else {
        return;
    };
    let ca_file = cluster.ca_file.display().to_string();

    // verify-full with the CA that signed the certificate, by the name it carries: the
    // store opens and migrates over TLS.
    let good = cluster.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca_file}"),
    );
    let store = Store::open_with(&good, options())
        .await
        .unwrap_or_else(|e| panic!("verify-full with the test CA: {e}"));
    let status = store.migration_status().await.expect("migration status");
    assert!(
        !status.is_empty() && status.iter().all(|m| m.applied),
        "every migration applied over TLS: {status:?}"
    );
    store.close().await;
    let mut conn = sqlx::PgConnection::connect(&good).await.expect("connect");
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .expect("pg_stat_ssl");
    assert!(ssl, "the connection is encrypted");
    let _ = conn.close().await;

    // An unrelated CA: the certificate is refused, and the error says so.
    let other = Ca::new("an unrelated CA");
    let other_file = cluster.dir.path().join("other-ca.pem");
    std::fs::write(&other_file, other.pem()).expect("other-ca.pem");
    let other_file = other_file.display().to_string();
    for mode in ["verify-full", "verify-ca", "require"] {
        let wrong = cluster.url(
            "localhost",
            &format!("sslmode={mode}&sslrootcert={other_file}"),
        );
        let err = match Store::open_with(&wrong, options()).await {
            Ok(_) => panic!("sslmode={mode} with an unrelated CA must be refused"),
            Err(e) => e,
        };
        let text = err.to_string();
        match &err {
            StoreError::Tls { failure, .. } => {
                assert_eq!(*failure, TlsFailure::UntrustedCertificate, "{text}")
            }
            other => panic!("sslmode={mode}: expected StoreError::Tls, got {other:?}"),
        }
        assert!(
            text.contains("TLS handshake with the Postgres server")
                && text.contains("not signed by a trusted CA")
                && text.contains(&other_file),
            "sslmode={mode}: {text}"
        );
        assert!(!text.contains("not-a-secret"), "password in {text}");
    }

    // No TLS: the server's hostssl-only pg_hba.conf refuses the connection.
    let plain = cluster.url("127.0.0.1", "sslmode=disable");
    let err = match Store::open_with(&plain, options()).await {
        Ok(_) => panic!("sslmode=disable must be refused by a hostssl-only server"),
        Err(e) => e,
    };
    let text = err.to_string();
    assert!(matches!(err, StoreError::Connect(_)), "{err:?}");
    assert!(
        text.contains("pg_hba.conf") && text.contains("no encryption"),
        "{text}"
    );
    drop(cluster);
}
