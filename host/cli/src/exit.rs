//! The exit statuses of `capgate`, one table for every command, so a script can tell a
//! refusal from a mistake on the command line from a failure of the machine:
//!
//! | status | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | a refusal or a failed check: a configuration refused by validation, a failing scenario or plugin case, a breaking contract change, `import mcp --diff` finding changes, an approval decision the rules refuse |
//! | 2 | usage: the command line (clap's own errors) or an input it names cannot be used as given (`test`'s scenario files, `contract diff`'s inputs, `keys hash` without a key, a store URL that does not parse) |
//! | 3 | a runtime error: the store unreachable or missing, a file that cannot be read or written, anything else that failed |
//!
//! A command returns its status when it decided it ([`Status::code`]); an error it returns
//! is classified by [`status_of`] in src/main.rs, the one place that maps an error to a
//! status: a [`Refused`] configuration and an [`Exit`] error carry theirs, anything else
//! is a runtime error.

use crate::validate::Refused;
use std::process::ExitCode;

/// One of the statuses of the table above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// 0: done.
    Ok,
    /// 1: a refusal or a failed check.
    Failed,
    /// 2: a usage error.
    Usage,
    /// 3: a runtime error.
    Runtime,
}

impl Status {
    /// The number the process exits with.
    pub fn number(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::Failed => 1,
            Status::Usage => 2,
            Status::Runtime => 3,
        }
    }

    /// The process's exit code.
    pub fn code(self) -> ExitCode {
        ExitCode::from(self.number())
    }
}

/// An error that is not a runtime error: a refusal ([`Status::Failed`]) or a usage error
/// ([`Status::Usage`]), with what to tell the operator. Commands return it (through
/// `anyhow`) where the difference matters to a script.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    /// The status it exits with.
    pub status: Status,
    /// What went wrong and what to do.
    pub message: String,
}

impl Exit {
    /// A refusal: exits 1.
    pub fn refusal(message: impl Into<String>) -> anyhow::Error {
        Exit {
            status: Status::Failed,
            message: message.into(),
        }
        .into()
    }

    /// A usage error: exits 2.
    pub fn usage(message: impl Into<String>) -> anyhow::Error {
        Exit {
            status: Status::Usage,
            message: message.into(),
        }
        .into()
    }
}

/// The status an error exits with: the first [`Refused`] or [`Exit`] in its chain decides
/// (so `.context(…)` keeps it), anything else is [`Status::Runtime`].
pub fn status_of(e: &anyhow::Error) -> Status {
    for cause in e.chain() {
        if cause.downcast_ref::<Refused>().is_some() {
            return Status::Failed;
        }
        if let Some(exit) = cause.downcast_ref::<Exit>() {
            return exit.status;
        }
        // A store URL that does not parse (a bad `sslmode`…) is an input that cannot be used
        // as given, whether `--store` or `store.url` named it: fixing it is the operator's.
        if let Some(capgate_store::StoreError::Url(_)) = cause.downcast_ref() {
            return Status::Usage;
        }
    }
    Status::Runtime
}

/// An error and its causes on one line, each cause said once: many errors print their
/// source inside their own message too, which `{:#}` would repeat.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let message = cause.to_string();
        if out.contains(&message) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&message);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn an_error_keeps_its_status_under_context_and_anything_else_is_a_runtime_error() {
        let refused: anyhow::Result<()> = Err(Exit::refusal("SI-4"));
        let e = refused.context("could not decide").expect_err("an error");
        assert_eq!(status_of(&e), Status::Failed);
        assert_eq!(status_of(&Exit::usage("--store: bad")), Status::Usage);
        let io = anyhow::Error::from(std::io::Error::other("disk"));
        assert_eq!(status_of(&io), Status::Runtime);
        let numbers: Vec<u8> = [Status::Ok, Status::Failed, Status::Usage, Status::Runtime]
            .map(Status::number)
            .to_vec();
        assert_eq!(numbers, [0, 1, 2, 3]);
    }

    #[test]
    fn a_cause_its_parent_already_says_is_printed_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("invalid store URL: {0}")]
        struct Outer(#[source] std::io::Error);
        let e = anyhow::Error::from(Outer(std::io::Error::other("unknown sslmode")))
            .context("could not open the store");
        assert_eq!(
            one_line(&e),
            "could not open the store: invalid store URL: unknown sslmode"
        );
    }
}
