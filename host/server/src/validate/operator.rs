//! What the operator commands over approvals (`capgate approvals list|show|approve|reject`)
//! need of a deployment, and nothing more: its file read as `check` reads it (syntax,
//! types, references, values), the store's URL, and the rules of who may decide what. No
//! plugin is loaded or compiled, no JWT secret or other credential is read, no upstream
//! is built: an operator settles approvals with the store alone, even where the plugins
//! or the gateway's secrets are not at hand.
//!
//! The one thing plugins did for these commands is redact an approval's input for review.
//! Without them, the input of a capability that has redactors is withheld (shown as
//! `null`), exactly as the runtime withholds it when a redactor fails; the input of a
//! capability without redactors is shown as `serve` shows it.

use super::*;
use capgate_config::Secrets;
use capgate_core::procedure::{Procedure, ProcedureCall, ProcedureError};

/// A deployment file read for the operator commands: the configuration (its secrets other
/// than `store.url` left unread, see [`Secrets`]) and its located document. It can build
/// the runtime that reads and decides approvals ([`StoreOnly::runtime`]), never one that
/// serves.
pub struct StoreOnly {
    /// The configuration (unread secrets are empty strings): read here only.
    config: Config,
    /// The located document.
    pub doc: Located,
}

/// Read `path` for an operator command, reading only the secrets `secrets` names: the
/// file's own problems (as `check` locates them), or what the operator commands need.
pub fn validate_store_only(path: &Path, secrets: Secrets) -> Result<StoreOnly, Refused> {
    let refused = |problems: Vec<Problem>| Refused {
        path: path.to_path_buf(),
        problems: sorted(problems),
    };
    let (config, doc) = super::rules::load(path, secrets).map_err(refused)?;
    let store_only = StoreOnly { config, doc };
    // What the registry refuses (SI-11 retries, tool names…), located as `check` does.
    if let Err(e) = store_only.registry() {
        let problems = e
            .problems
            .iter()
            .map(|p| registry_problem(&store_only.config, &store_only.doc, p))
            .collect();
        return Err(refused(problems));
    }
    Ok(store_only)
}

/// The procedure of every capability of an operator runtime: it never runs (the operator
/// commands invoke nothing), and says so if it ever were.
struct NotRun;

#[async_trait]
impl Procedure for NotRun {
    async fn call(&self, _call: ProcedureCall) -> Result<serde_json::Value, ProcedureError> {
        Err(ProcedureError::internal(
            "the operator commands run no procedure",
        ))
    }
}

impl StoreOnly {
    /// `[store]`: where the operator commands' store is.
    pub fn store(&self) -> crate::resolve::StoreSettings {
        crate::resolve::StoreSettings::of(&self.config)
    }

    /// `[audit]`: how the operator's decisions are recorded.
    pub fn audit(&self) -> crate::resolve::AuditSettings {
        crate::resolve::AuditSettings::of(&self.config)
    }

    /// Whether the approval input of `capability` is withheld by [`StoreOnly::runtime`]:
    /// it has redactors (plugins, not loaded here).
    pub fn withholds_input(&self, capability: &str) -> bool {
        self.config
            .capabilities
            .iter()
            .find(|c| c.id == capability)
            .is_none_or(|c| !c.redactors.is_empty())
    }

    /// The runtime the approvals commands read and decide with: over `approvals` and
    /// `audit`, with the deployment's rules of who may decide what (the same builder as
    /// `serve`'s runtime), and a registry of the capabilities whose approval input needs no
    /// plugin to be shown (the others are left out, so their input is withheld).
    pub fn runtime(
        &self,
        approvals: Arc<dyn ApprovalCoordinator>,
        audit: AuditConfig,
    ) -> Result<Runtime, AssemblyError> {
        let registry = self.registry()?;
        Ok(runtime_builder(&self.config, registry, approvals, audit).build()?)
    }

    /// The capabilities whose approval input needs no plugin to be shown.
    fn registry(&self) -> Result<Registry, RegistryError> {
        let mut registry = Registry::builder();
        for c in self
            .config
            .capabilities
            .iter()
            .filter(|c| c.redactors.is_empty())
        {
            registry.push(CapabilityDef::new(c.id.clone(), meta_of(c)).procedure(NotRun));
        }
        registry.build()
    }
}
