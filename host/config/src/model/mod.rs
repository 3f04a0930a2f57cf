//! The deployment file's model (`capgate.toml`): one typed section per table, as written.
//! Reading it with every problem located is [`crate::load`]; its cross-references are
//! checked in `references.rs`; a number's range is declared on its field
//! (`#[key(range = …)]`) and checked with the other values in [`crate::values`].

mod capability;
pub mod declared;
mod deployment;
mod gateway;

pub use capability::*;
pub use deployment::*;
pub use gateway::*;

use crate::keys::Keys;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The whole file. Every top-level key may be left out (`#[key(default)]`: [`Config::parse`]
/// reads each section on its own, a missing one as its `Default`).
#[derive(Keys, Debug, Default)]
#[key(live, default)]
pub struct Config {
    /// The file, for relative paths.
    #[key(skip)]
    pub path: PathBuf,
    /// Changes whenever handler or policy meaning changes (part of the contract digest).
    pub revision: String,
    /// `[runtime]`: the defaults every call runs with (timeouts, approval expiry) and
    /// where plugins come from.
    #[key(table)]
    pub runtime: RuntimeSection,
    /// `[store]`: the database approvals, the invocation journal and the audit trail
    /// are kept in.
    #[key(restart = "the store is opened at start", table)]
    pub store: StoreSection,
    /// `[audit]`: how strictly and how verbosely every step is recorded, and an optional
    /// JSON-lines copy.
    #[key(table)]
    pub audit: AuditSection,
    /// `[plugins.NAME]`: the Wasm components the deployment loads, each pinned by digest.
    #[key(tables)]
    pub plugins: BTreeMap<String, PluginSection>,
    /// `[policies.NAME]`: a policy plugin bound to its configuration, named for the
    /// capabilities that use it.
    #[key(tables)]
    pub policies: BTreeMap<String, BindingSection>,
    /// `[redactors.NAME]`: an output redactor plugin bound to its configuration.
    #[key(tables, declared = "declared::RedactorKeys")]
    pub redactors: BTreeMap<String, BindingSection>,
    /// `[[capabilities]]`: what agents may call, in declaration order.
    #[key(tables)]
    pub capabilities: Vec<CapabilitySection>,
    /// `[gateway]`: the HTTP listener, its doors and who may open them.
    #[key(table)]
    pub gateway: GatewaySection,
    /// `[mcp]`: the MCP server (`/mcp`, and `capgate mcp --stdio`).
    #[key(table)]
    pub mcp: McpSection,
    /// `[upstreams]`: the servers capabilities' procedures call (`[upstreams.mcp.NAME]`).
    #[key(table)]
    pub upstreams: UpstreamsSection,
    /// `[approvals]`: who may decide which approval types.
    #[key(table)]
    pub approvals: ApprovalsSection,
    /// `[telemetry]`: metrics and traces.
    #[key(restart = "metrics and traces are set up at start", table)]
    pub telemetry: crate::telemetry::TelemetrySection,
}

/// The directory of a file: `.` for a bare file name, whose parent is the empty path
/// (which nothing can make absolute).
pub fn file_dir(file: &Path) -> &Path {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

impl Config {
    /// The config file's directory: `.` for a bare file name (`--config capgate.toml`,
    /// whose parent is the empty path, which nothing can resolve).
    pub fn dir(&self) -> &Path {
        file_dir(&self.path)
    }

    /// A path relative to the config file's directory (an absolute path stays as it is).
    pub fn relative(&self, p: impl AsRef<Path>) -> PathBuf {
        self.dir().join(p)
    }

    /// `runtime.stateDir` (relative to the config file), or the config file's directory.
    pub fn state_dir(&self) -> PathBuf {
        match &self.runtime.state_dir {
            Some(dir) => self.relative(dir),
            None => self.dir().to_path_buf(),
        }
    }

    /// A path relative to [`Config::state_dir`] (an absolute path stays as it is): where
    /// what capgate writes goes.
    pub fn state_path(&self, p: impl AsRef<Path>) -> PathBuf {
        self.state_dir().join(p)
    }

    /// The plugin directory.
    pub fn plugin_dir(&self) -> PathBuf {
        self.relative(&self.runtime.plugin_dir)
    }

    /// The schema JSON of a [`SchemaRef`].
    pub fn resolve_schema(&self, s: &SchemaRef) -> Result<serde_json::Value, String> {
        match s {
            SchemaRef::Inline(m) => Ok(serde_json::Value::Object(m.clone())),
            SchemaRef::Path(p) => {
                let full = self.relative(p);
                let text = std::fs::read_to_string(&full)
                    .map_err(|e| format!("cannot read schema file {}: {e}", full.display()))?;
                serde_json::from_str(&text)
                    .map_err(|e| format!("schema file {} is not JSON: {e}", full.display()))
            }
        }
    }
}
