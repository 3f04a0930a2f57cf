//! `capgate contract diff OLD NEW`: reading the two sides from their files and choosing
//! the surfaces; the comparison itself is [`capgate_contract::diff`].
//!
//! Each side is a contract file (the JSON array `capgate contract export` prints: one
//! surface's descriptors) or a `.toml` deployment file, whose contract is exported in
//! process exactly as `capgate contract export` does it (the same validation, no store).
//!
//! Contracts are per surface. Two deployment files are compared on every model-facing
//! gateway surface (aiSdk, mcp, workflow), so exposure changes show; when a contract file
//! is involved only one surface can be compared (the file holds one), `--surface` or
//! aiSdk — `contract export`'s own default, so a file exported without `--surface`
//! compares right.

use crate::validate::{Refused, validate};
use capgate_contract::{Contract, ParseError, PortableCapabilityDescriptor};
use capgate_core::actor::Surface;
use std::path::{Path, PathBuf};

pub use capgate_contract::diff::{Report, diff};

/// The surfaces two deployment files are compared on by default.
pub const GATEWAY_SURFACES: [Surface; 3] = Surface::GATEWAY_DOORS;

/// Why a diff could not be made (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// The file could not be read.
    #[error(
        "cannot read {}: {source}. Check the path: OLD and NEW are contract files (`capgate contract export … > contract.json`) or .toml deployment files",
        path.display()
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a contract.
    #[error(
        "{} is not a capgate contract: {reason}. Write one with `capgate contract export --config capgate.toml --surface aiSdk > contract.json`, or pass the .toml deployment file itself",
        path.display()
    )]
    NotContract {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its place.
        reason: String,
    },
    /// The deployment file was refused (its problems are in [`Refused`]).
    #[error(
        "{} was refused, so it has no contract to compare: fix the problems above (`capgate check --config {}` lists them)",
        .0.path.display(), .0.path.display()
    )]
    Refused(Refused),
    /// The deployment's capability registry could not be built.
    #[error("{}: cannot build its capabilities: {reason}", path.display())]
    Assembly {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `--surface` is not a gateway surface.
    #[error(
        "unknown surface `{0}`: a contract is per surface, pass --surface aiSdk, mcp or workflow"
    )]
    Surface(Surface),
}

/// One side of a diff, as read from its file.
pub enum Side {
    /// A contract file: one surface's descriptors.
    Contract {
        /// Its descriptors.
        descriptors: Vec<PortableCapabilityDescriptor>,
    },
    /// A validated deployment file.
    Config(Box<crate::validate::Checked>),
}

impl Side {
    /// Read a side: a `.toml` file is a deployment (validated as `capgate check` does), any
    /// other file a contract.
    pub fn read(path: &Path) -> Result<Side, DiffError> {
        if path.extension().is_some_and(|e| e == "toml") {
            if !path.is_file() {
                // The same words as for a contract file, rather than a located problem.
                let source = std::fs::metadata(path).err().unwrap_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file")
                });
                return Err(DiffError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
            return validate(path)
                .map(|c| Side::Config(Box::new(c)))
                .map_err(DiffError::Refused);
        }
        let text = std::fs::read_to_string(path).map_err(|source| DiffError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let descriptors =
            capgate_contract::parse_contract(&text).map_err(|e| DiffError::NotContract {
                path: path.to_path_buf(),
                reason: match e {
                    ParseError::NotJson(_) => format!("{e}; a deployment file must end in .toml"),
                    e => e.to_string(),
                },
            })?;
        Ok(Side::Contract { descriptors })
    }

    fn is_config(&self) -> bool {
        matches!(self, Side::Config(_))
    }

    /// This side's contract on `surfaces` (a contract file holds its one surface).
    pub fn contract(&self, surfaces: &[Surface]) -> Result<Contract, DiffError> {
        match self {
            Side::Contract { descriptors } => {
                Ok(surfaces.iter().map(|s| (*s, descriptors.clone())).collect())
            }
            Side::Config(checked) => {
                let runtime = checked.scratch_runtime().map_err(|e| DiffError::Assembly {
                    path: checked.path().to_path_buf(),
                    reason: e.to_string(),
                })?;
                Ok(Contract::export(
                    &runtime,
                    surfaces.iter().copied(),
                    checked.revision(),
                ))
            }
        }
    }
}

/// The surfaces to compare: `--surface` when given; every gateway surface for two
/// deployment files; aiSdk (`contract export`'s default) when a contract file is involved.
pub fn surfaces(flag: Option<Surface>, old: &Side, new: &Side) -> Result<Vec<Surface>, DiffError> {
    select_surfaces(flag, old.is_config() && new.is_config())
}

fn select_surfaces(flag: Option<Surface>, two_configs: bool) -> Result<Vec<Surface>, DiffError> {
    match flag {
        Some(s) if GATEWAY_SURFACES.contains(&s) => Ok(vec![s]),
        Some(s) => Err(DiffError::Surface(s)),
        None if two_configs => Ok(GATEWAY_SURFACES.to_vec()),
        None => Ok(vec![Surface::AiSdk]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capgate_core::meta::Risk;
    use serde_json::json;

    /// The diff of a refund capability on aiSdk, before and after `edit`.
    fn changed(edit: impl Fn(&mut PortableCapabilityDescriptor)) -> Report {
        let old: PortableCapabilityDescriptor = match serde_json::from_value(json!({
            "version": 1, "id": "orders.refund", "path": ["orders", "refund"],
            "description": "Refund an order.", "inputSchema": {"type": "object"},
            "sideEffect": "write", "risk": "high", "tags": [], "requiresApproval": false,
            "discovery": "discoverable",
            "toolNames": {"aiSdk": "orders_refund", "mcp": "orders_refund"},
            "contractDigest": "d1"
        })) {
            Ok(d) => d,
            Err(e) => panic!("fixture descriptor: {e}"),
        };
        let mut new = old.clone();
        edit(&mut new);
        new.contract_digest = "d2".into();
        diff(
            &Contract::on(Surface::AiSdk, vec![old]),
            &Contract::on(Surface::AiSdk, vec![new]),
            "old",
            "new",
        )
    }

    #[test]
    fn two_configs_compare_every_gateway_surface_and_a_contract_file_one() {
        let names = |flag, both| -> Vec<&'static str> {
            match select_surfaces(flag, both) {
                Ok(s) => s.into_iter().map(Surface::as_str).collect(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(names(None, true), ["aiSdk", "mcp", "workflow"]);
        assert_eq!(names(None, false), ["aiSdk"]);
        assert_eq!(names(Some(Surface::Mcp), true), ["mcp"]);
        assert_eq!(names(Some(Surface::Workflow), false), ["workflow"]);
        for bad in [Surface::Direct, Surface::Test] {
            assert!(matches!(
                select_surfaces(Some(bad), true),
                Err(DiffError::Surface(_))
            ));
        }
    }

    #[test]
    fn the_table_has_one_row_per_change_and_a_summary() {
        let t = changed(|d| {
            d.risk = Risk::Critical;
            d.description = "x".into();
        })
        .render_table(crate::table::render);
        assert!(t.contains("CAPABILITY"), "{t}");
        assert!(
            t.contains("orders.refund  changed  additive  description"),
            "{t}"
        );
        assert!(
            t.contains(&format!("\n{}breaking  risk", " ".repeat(24))),
            "{t}"
        );
        assert!(
            t.contains(
                "0 added, 0 removed, 1 changed, 0 unchanged; 1 breaking change(s), 1 additive"
            ),
            "{t}"
        );
    }

    #[test]
    fn a_file_that_is_not_json_is_told_a_deployment_file_ends_in_toml() {
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("a temporary directory: {e}"),
        };
        let path = dir.path().join("old.json");
        if let Err(e) = std::fs::write(&path, "revision = 1") {
            panic!("write {}: {e}", path.display());
        }
        let err = match Side::read(&path) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted a TOML text as a contract"),
        };
        assert!(
            err.contains("is not a capgate contract: it is not JSON ("),
            "{err}"
        );
        assert!(
            err.contains("); a deployment file must end in .toml. Write one"),
            "{err}"
        );
    }
}
