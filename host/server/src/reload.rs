//! Configuration reloads of `capgate serve` (SIGHUP, `POST /admin/reload`).
//!
//! A reload reads the file the process was started with and takes it through exactly the
//! validation of `capgate check` ([`crate::validate::validate`], on a blocking thread: it
//! compiles the plugins), then refuses what cannot change in a running process (the
//! listener, the store, the audit file, the journal's horizon, telemetry), each with its
//! place in the file. A refused file changes nothing: the previous configuration keeps
//! serving. Otherwise a whole new application is built over the same store, journal, audit
//! sinks, console sessions, MCP sessions and rate limiter, and swapped in at once: requests
//! in flight finish on the application they started on, every later request runs on the
//! new one. Reloads run one at a time. Each outcome is audited
//! (`capgate.config.reloaded`, `capgate.config.reload_refused`) and counted
//! (`capgate_config_reloads_total{result}`).

use crate::build::Deployment;
use crate::validate::Checked;
use arc_swap::ArcSwap;
use capgate_config::located::Problem;
use capgate_core::actor::{ActorKind, ActorRef, Surface};
use capgate_core::audit::{AuditEvent, EventPayload};
use capgate_core::runtime::Runtime;
use capgate_gateway::admin::{ReloadAnswer, ReloadRequester};
use capgate_gateway::app::Kept;
use capgate_gateway::auth::Authenticated;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

const LOG: &str = "capgate::reload";

/// At most this many problem locations go into a refusal's audit event.
const MAX_AUDITED_LOCATIONS: usize = 20;

/// What asked for a reload.
pub enum Trigger {
    /// SIGHUP.
    Signal,
    /// `POST /admin/reload`, by this operator.
    Admin(Box<Authenticated>),
    /// The program embedding the server ([`crate::serve::Served::reload`]).
    Embedder,
}

impl Trigger {
    fn name(&self) -> &'static str {
        match self {
            Trigger::Signal => "signal",
            Trigger::Admin(_) => "admin",
            Trigger::Embedder => "embedder",
        }
    }

    /// The audit envelope's actor and the operator's namespace.
    fn actor(&self) -> (ActorRef, Option<String>) {
        match self {
            Trigger::Signal => (
                ActorRef {
                    id: "sighup".into(),
                    kind: ActorKind::Service,
                },
                None,
            ),
            Trigger::Embedder => (
                ActorRef {
                    id: "embedder".into(),
                    kind: ActorKind::Service,
                },
                None,
            ),
            Trigger::Admin(who) => (
                ActorRef::from(&who.principal.actor),
                Some(who.principal.namespace.clone()),
            ),
        }
    }
}

/// The configuration being served.
struct Serving {
    checked: Checked,
    deployment: Deployment,
    revision: String,
    contract_digest: String,
    /// Its MCP upstreams' pin watch (stops when this configuration is replaced).
    watch: Option<capgate_provider::mcp::watch::PinWatch>,
}

impl Serving {
    fn summary(&self) -> Value {
        json!({
            "revision": self.revision,
            "contractDigest": self.contract_digest,
            "capabilities": self.deployment.runtime.registry().len(),
        })
    }
}

/// Reloads the configuration of a serving process and swaps its application.
pub struct Reloader {
    path: PathBuf,
    kept: Arc<Kept>,
    current: Arc<ArcSwap<axum::Router>>,
    serving: tokio::sync::Mutex<Serving>,
}

impl Reloader {
    /// The reloader of a process serving `checked` over `deployment`; [`Self::serve_first`]
    /// then builds the first application.
    pub fn new(
        checked: Checked,
        deployment: Deployment,
        kept: Arc<Kept>,
        current: Arc<ArcSwap<axum::Router>>,
    ) -> anyhow::Result<Arc<Reloader>> {
        let contract_digest = contract_digest(&checked, &deployment.runtime);
        Ok(Arc::new(Reloader {
            path: checked.path().to_path_buf(),
            kept,
            current,
            serving: tokio::sync::Mutex::new(Serving {
                revision: checked.revision().to_string(),
                checked,
                deployment,
                contract_digest,
                watch: None,
            }),
        }))
    }

    /// The runtime of the configuration serving now and its approvals' escalation (for
    /// background work such as the approval sweeper, which must not keep a replaced
    /// configuration alive).
    pub async fn runtime(&self) -> (Runtime, Option<crate::resolve::Escalation>) {
        let serving = self.serving.lock().await;
        (
            serving.deployment.runtime.clone(),
            serving.checked.escalation().cloned(),
        )
    }

    /// Build the application of the configuration the process started with.
    pub async fn serve_first(&self) -> anyhow::Result<()> {
        let mut serving = self.serving.lock().await;
        let app = crate::serve::app(&serving.checked, &serving.deployment, &self.kept)?;
        self.current.store(Arc::new(app));
        serving.watch = crate::upstreams::watch(
            &serving.checked,
            serving.deployment.runtime.clone(),
            serving.deployment.sinks.clone(),
        );
        Ok(())
    }

    /// Reload the file: swap in its configuration, or keep the current one and say why.
    pub async fn reload(&self, trigger: Trigger) -> ReloadAnswer {
        let mut serving = self.serving.lock().await;
        let path = self.path.clone();
        let checked =
            match tokio::task::spawn_blocking(move || crate::validate::validate(&path)).await {
                Ok(Ok(checked)) => checked,
                Ok(Err(refused)) => return self.refuse(&serving, &trigger, refused.problems).await,
                Err(e) => {
                    return self
                        .fail(
                            &serving,
                            &trigger,
                            format!("validation did not finish: {e}"),
                        )
                        .await;
                }
            };
        let fixed = fixed_settings(&serving.checked, &checked);
        if !fixed.is_empty() {
            discard(checked);
            return self.refuse(&serving, &trigger, fixed).await;
        }
        let built = serving
            .deployment
            .rebuilt(&checked)
            .and_then(|d| crate::serve::app(&checked, &d, &self.kept).map(|app| (d, app)));
        let (deployment, app) = match built {
            Ok(built) => built,
            Err(e) => {
                discard(checked);
                return self.fail(&serving, &trigger, format!("{e:#}")).await;
            }
        };
        let next = Serving {
            revision: checked.revision().to_string(),
            contract_digest: contract_digest(&checked, &deployment.runtime),
            watch: crate::upstreams::watch(
                &checked,
                deployment.runtime.clone(),
                deployment.sinks.clone(),
            ),
            checked,
            deployment,
        };
        let warnings = revision_warnings(&serving, &next);
        // The swap: from here on every new request runs on the new application.
        self.current.store(Arc::new(app));
        let previous = std::mem::replace(&mut *serving, next);
        let (actor, namespace) = trigger.actor();
        audit(
            &serving,
            actor,
            EventPayload::ConfigReloaded {
                trigger: trigger.name().into(),
                namespace,
                previous_revision: previous.revision.clone(),
                revision: serving.revision.clone(),
                previous_contract_digest: previous.contract_digest.clone(),
                contract_digest: serving.contract_digest.clone(),
            },
        )
        .await;
        crate::metrics::record_reload("reloaded");
        for w in &warnings {
            tracing::warn!(target: LOG, "{w}");
        }
        tracing::info!(
            target: LOG,
            trigger = trigger.name(),
            previous_revision = %previous.revision,
            revision = %serving.revision,
            contract_digest = %serving.contract_digest,
            "configuration reloaded"
        );
        let answer = json!({
            "status": "reloaded",
            "previous": previous.summary(),
            "current": serving.summary(),
            "warnings": warnings,
        });
        discard(previous);
        ReloadAnswer::Reloaded(answer)
    }

    async fn refuse(
        &self,
        serving: &Serving,
        trigger: &Trigger,
        problems: Vec<Problem>,
    ) -> ReloadAnswer {
        for p in &problems {
            tracing::error!(target: LOG, "{p}");
        }
        let message = format!(
            "{} problem(s) in {}; the configuration was not reloaded and revision {} keeps serving. Fix them (`capgate check --config {}` shows the same) and reload again.",
            problems.len(),
            self.path.display(),
            serving.revision,
            self.path.display()
        );
        tracing::error!(target: LOG, trigger = trigger.name(), "{message}");
        let locations = problems
            .iter()
            .take(MAX_AUDITED_LOCATIONS)
            .map(|p| format!("{}:{} {}", p.line, p.column, p.key))
            .collect();
        audit_refused(serving, trigger, problems.len(), locations).await;
        crate::metrics::record_reload("refused");
        ReloadAnswer::Refused(json!({
            "status": "refused",
            "message": message,
            "problems": problems.iter().map(|p| json!({
                "file": p.file.display().to_string(),
                "line": p.line,
                "column": p.column,
                "key": p.key,
                "message": p.message,
                "located": p.to_string(),
            })).collect::<Vec<_>>(),
            "current": serving.summary(),
        }))
    }

    async fn fail(&self, serving: &Serving, trigger: &Trigger, why: String) -> ReloadAnswer {
        tracing::error!(target: LOG, trigger = trigger.name(), "the configuration could not be reloaded: {why}; revision {} keeps serving", serving.revision);
        audit_refused(serving, trigger, 0, Vec::new()).await;
        crate::metrics::record_reload("failed");
        ReloadAnswer::Failed(json!({
            "status": "failed",
            "message": format!("the configuration passed its checks but could not be built: {why}; the previous configuration keeps serving"),
            "current": serving.summary(),
        }))
    }
}

/// Record a reload that did not take effect: refused (`problems` located problems, the first
/// few `locations`) or failed after its checks (no problems).
async fn audit_refused(
    serving: &Serving,
    trigger: &Trigger,
    problems: usize,
    locations: Vec<String>,
) {
    let (actor, namespace) = trigger.actor();
    audit(
        serving,
        actor,
        EventPayload::ConfigReloadRefused {
            trigger: trigger.name().into(),
            namespace,
            revision: serving.revision.clone(),
            contract_digest: serving.contract_digest.clone(),
            problems,
            locations,
        },
    )
    .await;
}

#[async_trait::async_trait]
impl capgate_gateway::admin::Reloader for Reloader {
    async fn reload(&self, requester: ReloadRequester) -> ReloadAnswer {
        Reloader::reload(self, Trigger::Admin(Box::new(requester.who))).await
    }
}

/// Drop a configuration off the async threads (its plugins' instance pools and provider
/// runtime go with it).
fn discard<T: Send + 'static>(value: T) {
    drop(tokio::task::spawn_blocking(move || drop(value)));
}

/// Record one reload event on every sink of the deployment and write it out.
async fn audit(serving: &Serving, actor: ActorRef, payload: EventPayload) {
    let event = AuditEvent::operational(serving.deployment.runtime.now(), actor, None, payload);
    capgate_core::audit::record_operational(&serving.deployment.sinks, &event).await;
}

/// One located problem for each key a running process cannot take over (declared with
/// `#[key(restart = "why")]` in capgate-config, compared as written) that the new file
/// changes.
fn fixed_settings(old: &Checked, new: &Checked) -> Vec<Problem> {
    capgate_config::keys::restart_keys()
        .into_iter()
        .filter(|(pointer, _)| old.doc.json.pointer(pointer) != new.doc.json.pointer(pointer))
        .map(|(pointer, why)| {
            new.doc.problem(
                &pointer,
                format!(
                    "cannot change while `capgate serve` runs ({why}): put back the value it started with, or restart it to apply this"
                ),
            )
        })
        .collect()
}

/// A warning when the file changed but neither its `revision` nor any contract digest did:
/// contract digests cover names, schemas and phases, not a policy's or procedure's
/// configuration, so remote hosts cannot tell.
fn revision_warnings(old: &Serving, new: &Serving) -> Vec<String> {
    if old.checked.doc.json != new.checked.doc.json
        && old.revision == new.revision
        && old.contract_digest == new.contract_digest
    {
        vec![format!(
            "the configuration changed but `revision` is still \"{}\" and no contract digest changed (they do not cover policy or procedure configuration), so remote hosts cannot tell; bump `revision` when a policy's or handler's meaning changes",
            new.revision
        )]
    } else {
        Vec::new()
    }
}

/// The deployment's contract digest ([`capgate_contract::deployment_digest`]) over the
/// surfaces it serves: each gateway route's and `mcp`.
pub fn contract_digest(checked: &Checked, runtime: &Runtime) -> String {
    let routes = checked.gateway().routes().iter().map(|r| r.surface);
    capgate_contract::deployment_digest(runtime, routes.chain([Surface::Mcp]), checked.revision())
}
