//! Held calls as MCP tasks (see [`crate::mcp::tasks`]): opening a task for a held
//! `tools/call`, `tasks/get` (which runs the call once a human decided), `tasks/update`
//! (the client answered the URL elicitation) and `tasks/cancel` (which withdraws an
//! approval nobody has run).

use super::{Caller, CapgateMcp, Resumed, contract_mismatch_result, progress_fields};
use crate::mcp::tasks::{McpTasks, StoredTask, TaskState, TaskStoreError, principal_digest};
use capgate_core::actor::{ActorRef, Surface};
use capgate_core::approval::{ApprovalStatus, ApprovalSummary};
use capgate_core::audit::{AuditEvent, EventPayload};
use capgate_core::id::BoundedId;
use capgate_core::result::ExecutionResult;
use capgate_core::runtime::InvokeRequest;
use chrono::{DateTime, SecondsFormat, Utc};
use rmcp::model::{
    CallToolResponse, CreateTaskResult, DetailedTask, ElicitRequest, ElicitRequestParams,
    GetTaskResult, InputRequest, InputRequests, JsonObject, MetaObject, Task, TaskPayload,
    TaskStatus,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The key of the one input request a held task makes: the URL elicitation pointing the
/// client's user to the approval's console page.
const APPROVAL_INPUT: &str = "capgate-approval";

/// The JSON-RPC error code of a task that ended without the tool's result; the public
/// error (`APPROVAL_REJECTED`, `TIMEOUT`, …) is in `data.error.code`.
const TASK_FAILED: i32 = -32000;

/// How often a replica running a task's call looks for a `tasks/cancel` another replica
/// recorded.
const CANCEL_WATCH: Duration = Duration::from_millis(250);

/// How often a running task's progress is written to its status, at most.
const REPORT_EVERY: Duration = Duration::from_millis(500);

/// What a run may take beyond its capability's own deadlines before the task is taken for
/// one whose replica stopped.
const RUN_GRACE: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// The message of a task whose replica stopped mid-run.
const RUN_LOST: &str = "The replica running this call stopped before the call ended; its outcome is unknown (see the audit trail).";

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A new task id: `tsk_` and 128 random bits in hex.
fn new_task_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(format!("tsk_{}", hex(&bytes)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unknown_task() -> ErrorData {
    ErrorData::invalid_params("Unknown task.", None)
}

fn unavailable(e: &TaskStoreError) -> ErrorData {
    tracing::warn!(target: "capgate::mcp", error = %e, "the MCP task store did not answer");
    ErrorData::internal_error("The task store is unavailable.", None)
}

/// Whether the request's client declared the tasks extension.
pub(super) fn client_wants_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

/// Whether the request's client can show its user a URL (URL-mode elicitation).
fn client_takes_urls(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.url.is_some())
}

impl CapgateMcp {
    fn tasks(&self) -> Option<&McpTasks> {
        self.options.tasks.as_ref()
    }

    /// What a held task's status says: what it waits for, never the input.
    fn waiting_message(&self, approval: &ApprovalSummary) -> String {
        let types = if approval.types.is_empty() {
            String::new()
        } else {
            format!(" ({})", approval.types.join(", "))
        };
        let whom = match self.options.approval_url_for(&approval.id) {
            Some(url) => format!("a human decides at {url}"),
            None => "a human decides in the approval console".to_owned(),
        };
        format!(
            "Awaiting approval {}{types} until {}: {whom}.",
            approval.id,
            rfc3339(approval.expires_at)
        )
    }

    /// The wire task of a stored one.
    fn wire_task(&self, task: &StoredTask, status: TaskStatus) -> Task {
        let tasks = self.tasks();
        let mut wire = Task::new(
            task.id.clone(),
            status,
            rfc3339(task.created_at),
            rfc3339(task.updated_at),
        )
        .with_status_message(task.status_message.clone());
        if let Ok(ttl) = u64::try_from((task.purge_after - task.created_at).num_milliseconds()) {
            wire = wire.with_ttl_ms(ttl);
        }
        if let Some(t) = tasks {
            wire = wire.with_poll_interval_ms(
                u64::try_from(t.poll_interval.as_millis()).unwrap_or(u64::MAX),
            );
        }
        wire
    }

    /// Answer a held call with a task, when the client declared the extension and tasks
    /// are on; `None` answers it as before (the approval-required result). Audited
    /// `capgate.mcp.task_created` on the held execution.
    pub(super) async fn open_task(
        &self,
        caller: &Caller,
        capability_id: &str,
        result: &ExecutionResult,
        context: &RequestContext<RoleServer>,
    ) -> Option<CreateTaskResult> {
        let tasks = self.tasks()?;
        let approval = result.approval()?;
        if !client_wants_tasks(context) {
            return None;
        }
        let now = self.runtime.now();
        let retention = chrono::Duration::from_std(tasks.retention).ok()?;
        let task = StoredTask {
            id: new_task_id()?,
            principal_sha256: principal_digest(&caller.principal),
            namespace: caller.principal.namespace.clone(),
            approval_id: Some(approval.id.clone()),
            capability_id: capability_id.to_owned(),
            state: TaskState::Working,
            status_message: self.waiting_message(approval),
            outcome: None,
            input_answered: false,
            claim: None,
            run_deadline: None,
            created_at: now,
            updated_at: now,
            purge_after: approval.expires_at.max(now) + retention,
        };
        if let Err(e) = tasks.store.create(&task, tasks.max_per_principal).await {
            // The held call stands; the client is told about it as one without tasks is.
            tracing::info!(target: "capgate::mcp", error = %e, "no MCP task for a held call");
            return None;
        }
        crate::metrics::mcp_task("created");
        let execution_id = match result {
            ExecutionResult::ApprovalRequired { execution_id, .. } => Some(execution_id.clone()),
            _ => None,
        };
        self.audit_task(
            caller.principal.actor.reference(),
            execution_id,
            Some(capability_id),
            EventPayload::McpTaskCreated {
                task_id: task.id.clone(),
                approval_id: task.approval_id.clone(),
            },
        )
        .await;
        let mut meta = MetaObject::new();
        meta.insert(
            "capgate/approval".into(),
            json!({
                "id": approval.id,
                "types": approval.types,
                "expiresAt": approval.expires_at,
                "url": self.options.approval_url_for(&approval.id),
            }),
        );
        Some(CreateTaskResult::new(self.wire_task(&task, TaskStatus::Working)).with_meta(meta))
    }

    async fn audit_task(
        &self,
        actor: ActorRef,
        execution_id: Option<String>,
        capability_id: Option<&str>,
        payload: EventPayload,
    ) {
        let event = AuditEvent {
            timestamp: self.runtime.now(),
            surface: Surface::Mcp,
            actor,
            execution_id,
            capability_id: capability_id.map(str::to_owned),
            correlation_id: None,
            input_hash: None,
            payload,
        };
        if let Err(e) = self.runtime.record(event).await {
            tracing::warn!(target: "capgate::mcp", error = %e, "an MCP task event could not be audited");
        }
        self.drain_audit().await;
    }

    /// `tasks/get`: the caller's own task, as it stands. A working task whose approval was
    /// decided (or lapsed) is claimed by exactly one poller across replicas, which runs the
    /// call in the background; the next polls see it end.
    pub(super) async fn task_get(
        &self,
        task_id: &str,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let tasks = self.tasks().ok_or_else(unknown_task)?;
        let caller = self.caller(&context)?;
        let me = principal_digest(&caller.principal);
        let mut task = tasks
            .store
            .get(task_id, &me)
            .await
            .map_err(|e| unavailable(&e))?
            .ok_or_else(unknown_task)?;
        if task.state == TaskState::Working
            && task.claim.is_some()
            && task.run_deadline.is_some_and(|d| d < self.runtime.now())
        {
            self.abandon(&mut task, tasks).await?;
        }
        let mut pending = false;
        if task.state == TaskState::Working
            && task.claim.is_none()
            && let Some(approval_id) = task.approval_id.clone()
        {
            let record = self
                .runtime
                .approvals()
                .get_for_requester(
                    &approval_id,
                    &caller.principal.namespace,
                    &caller.principal.actor.reference(),
                )
                .await
                .map_err(|e| {
                    tracing::warn!(target: "capgate::mcp", error = %e, "approval store did not answer a task poll");
                    ErrorData::internal_error("The approval store is unavailable.", None)
                })?;
            pending = record
                .as_ref()
                .is_some_and(|r| r.effective_status(self.runtime.now()) == ApprovalStatus::Pending);
            if !pending && let Some(token) = new_task_id() {
                let deadline = self.run_deadline(&task.capability_id);
                let claimed = tasks
                    .store
                    .claim(&task.id, &token, self.runtime.now(), deadline)
                    .await
                    .map_err(|e| unavailable(&e))?;
                if claimed {
                    task.claim = Some(token.clone());
                    task.status_message = "Decided; running the call.".to_owned();
                    let server = self.clone();
                    let run = task.clone();
                    tokio::spawn(async move { server.run_task(run, caller, token).await });
                }
            }
        }
        Ok(GetTaskResult::new(self.detailed(&task, pending, &context)))
    }

    /// The `tasks/get` answer for a stored task.
    fn detailed(
        &self,
        task: &StoredTask,
        pending: bool,
        context: &RequestContext<RoleServer>,
    ) -> DetailedTask {
        let parse = |text: &Option<String>| -> JsonObject {
            text.as_deref()
                .and_then(|t| serde_json::from_str::<JsonObject>(t).ok())
                .unwrap_or_default()
        };
        let payload = match task.state {
            TaskState::Completed => TaskPayload::Completed {
                result: parse(&task.outcome),
            },
            TaskState::Failed => TaskPayload::Failed {
                error: parse(&task.outcome),
            },
            TaskState::Cancelled => TaskPayload::Cancelled,
            TaskState::Working => match self.approval_input(task, pending, context) {
                Some(input_requests) => TaskPayload::InputRequired { input_requests },
                None => TaskPayload::Working,
            },
        };
        DetailedTask::new(self.wire_task(task, payload.status()), payload)
    }

    /// While the approval is pending, a client that can show its user a URL (and has not
    /// answered yet) is asked to show the approval's console page: the human signs in
    /// there and decides; nothing in the request carries the input or lets the model
    /// decide.
    fn approval_input(
        &self,
        task: &StoredTask,
        pending: bool,
        context: &RequestContext<RoleServer>,
    ) -> Option<InputRequests> {
        if !pending || task.input_answered || !client_takes_urls(context) {
            return None;
        }
        let url = self
            .options
            .approval_url_for(task.approval_id.as_deref()?)?;
        let params = ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message: format!(
                "A call of `{}` waits for a human's approval. Open the approval console to \
                 review it; the decision is made there, by a signed-in approver.",
                task.capability_id
            ),
            url,
            elicitation_id: task.approval_id.clone().unwrap_or_default(),
        };
        let mut requests = InputRequests::new();
        requests.insert(
            APPROVAL_INPUT.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        );
        Some(requests)
    }

    /// `tasks/update`: the client answered the URL elicitation (whatever its user chose,
    /// the decision is still the console's). Anything else is refused.
    pub(super) async fn task_update(
        &self,
        task_id: &str,
        keys: Vec<String>,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let tasks = self.tasks().ok_or_else(unknown_task)?;
        let caller = self.caller(&context)?;
        if keys.iter().any(|k| k != APPROVAL_INPUT) || keys.is_empty() {
            return Err(ErrorData::invalid_params(
                "The task has no such input request.",
                None,
            ));
        }
        let me = principal_digest(&caller.principal);
        let answered = tasks
            .store
            .answer_input(task_id, &me, self.runtime.now())
            .await
            .map_err(|e| unavailable(&e))?;
        if answered {
            Ok(())
        } else {
            Err(unknown_task())
        }
    }

    /// `tasks/cancel`: the caller's own working task ends `cancelled`, and its approval is
    /// withdrawn when nobody has run it (pending, or approved and unconsumed), so the call
    /// never runs. A call already running is asked to stop. Audited
    /// `capgate.mcp.task_cancelled`.
    pub(super) async fn task_cancel(
        &self,
        task_id: &str,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let tasks = self.tasks().ok_or_else(unknown_task)?;
        let caller = self.caller(&context)?;
        let me = principal_digest(&caller.principal);
        let principal = &caller.principal;
        // Withdraw first: a run that claims the task after this finds the approval
        // cancelled and never consumes it.
        let known = tasks
            .store
            .get(task_id, &me)
            .await
            .map_err(|e| unavailable(&e))?
            .ok_or_else(unknown_task)?;
        if known.state != TaskState::Working {
            return Err(ErrorData::invalid_params(
                "The task has already ended.",
                None,
            ));
        }
        let mut withdrawn = false;
        if let Some(approval_id) = &known.approval_id {
            withdrawn = self
                .runtime
                .approvals()
                .withdraw(
                    approval_id,
                    &principal.namespace,
                    &principal.actor.reference(),
                )
                .await
                .is_ok();
        }
        let message = if withdrawn {
            "Cancelled by the requester; the approval was withdrawn and the call never runs."
        } else {
            "Cancelled by the requester."
        };
        let cancelled = tasks
            .store
            .cancel(task_id, &me, message, self.runtime.now())
            .await
            .map_err(|e| unavailable(&e))?;
        let Some(task) = cancelled else {
            return Err(ErrorData::invalid_params(
                "The task has already ended.",
                None,
            ));
        };
        crate::metrics::mcp_task("cancelled");
        self.audit_task(
            principal.actor.reference(),
            None,
            Some(&task.capability_id),
            EventPayload::McpTaskCancelled {
                task_id: task.id.clone(),
                approval_id: task.approval_id.clone(),
                approval_withdrawn: withdrawn,
            },
        )
        .await;
        Ok(())
    }

    /// Run a claimed task's call through the resume path and record how it ended. A
    /// `tasks/cancel` recorded meanwhile (on any replica) cancels the running call.
    async fn run_task(self, task: StoredTask, caller: Caller, token: String) {
        let caller_actor = caller.principal.actor.reference();
        let Some(tasks) = self.tasks().cloned() else {
            return;
        };
        let Some(approval_id) = task
            .approval_id
            .as_deref()
            .and_then(|a| BoundedId::new(a).ok())
        else {
            return;
        };
        let me = principal_digest(&caller.principal);
        let cancel = CancellationToken::new();
        let watch = watch_for_cancel(&tasks, &task.id, &me, cancel.clone());
        let resumed = self
            .resume_approved(caller, &approval_id, cancel, None)
            .await;
        watch.abort();
        let (state, message, outcome, execution_id, code) = match resumed {
            Ok(Resumed::Ran(result)) => self.ended(&result),
            Ok(Resumed::ContractChanged) => {
                let result = contract_mismatch_result();
                let envelope = result.structured_content.clone().unwrap_or(Value::Null);
                (
                    TaskState::Failed,
                    "The deployment's contract changed since this call asked for approval."
                        .to_owned(),
                    failed_error(&envelope),
                    None,
                    Some("CONTRACT_MISMATCH".to_owned()),
                )
            }
            Err(refused) => (
                TaskState::Failed,
                refused.message.to_string(),
                json!({"code": refused.code.0, "message": refused.message}),
                None,
                None,
            ),
        };
        let actor = caller_actor;
        self.record_end(
            &tasks,
            &task,
            &token,
            actor,
            (state, message, outcome, execution_id, code),
        )
        .await;
    }

    /// How a resumed call ends its task: the tool's result when the call completed, else
    /// the public error.
    fn ended(
        &self,
        result: &ExecutionResult,
    ) -> (TaskState, String, Value, Option<String>, Option<String>) {
        let tool = self.tool_result(result);
        let envelope = tool.structured_content.clone().unwrap_or(Value::Null);
        match result {
            ExecutionResult::Completed { execution_id, .. } => (
                TaskState::Completed,
                "Approved and run.".to_owned(),
                serde_json::to_value(&tool).unwrap_or(Value::Null),
                Some(execution_id.clone()),
                None,
            ),
            ExecutionResult::Failed {
                execution_id,
                error,
                ..
            }
            | ExecutionResult::Cancelled {
                execution_id,
                error,
                ..
            } => {
                let public = error.to_public();
                (
                    TaskState::Failed,
                    public.message.clone(),
                    failed_error(&envelope),
                    Some(execution_id.clone()),
                    Some(public.code.as_str().to_owned()),
                )
            }
            // A long call that ended held for approval (a resume never asks again): its task
            // completes with the approval-required answer a client without tasks gets.
            ExecutionResult::ApprovalRequired { execution_id, .. } => (
                TaskState::Completed,
                "Held for approval.".to_owned(),
                serde_json::to_value(&tool).unwrap_or(Value::Null),
                Some(execution_id.clone()),
                None,
            ),
        }
    }
}

/// The JSON-RPC error of a failed task: the public message, and the envelope (status,
/// public error, execution id) as `data`.
fn failed_error(envelope: &Value) -> Value {
    let message = envelope
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("The call failed.");
    json!({"code": TASK_FAILED, "message": message, "data": envelope})
}

/// The end of a task as recorded: its state, status message, outcome, the execution that
/// ended it and the public error code.
type Ending = (TaskState, String, Value, Option<String>, Option<String>);

/// Cancel `cancel` once the task leaves `working` (a `tasks/cancel` on any replica).
fn watch_for_cancel(
    tasks: &McpTasks,
    id: &str,
    me: &str,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let (store, id, me) = (tasks.store.clone(), id.to_owned(), me.to_owned());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(CANCEL_WATCH).await;
            if let Ok(Some(t)) = store.get(&id, &me).await
                && t.state != TaskState::Working
            {
                cancel.cancel();
                return;
            }
        }
    })
}

impl CapgateMcp {
    /// When a run of `capability_id` starting now must have ended: its per-attempt
    /// timeout for every attempt its retry policy allows, their backoff, and a grace.
    fn run_deadline(&self, capability_id: &str) -> DateTime<Utc> {
        let meta = self.runtime.registry().get(capability_id).map(|c| &c.meta);
        let timeout = meta
            .and_then(|m| m.timeout_ms)
            .unwrap_or(self.runtime.defaults().timeout_ms);
        let attempts = meta
            .and_then(|m| m.retry.as_ref())
            .map_or(1, |r| u64::from(r.max_attempts) + 1);
        let backoff = meta
            .and_then(|m| m.retry.as_ref())
            .map_or(0, |r| r.backoff_ms.unwrap_or(250) << attempts.min(16));
        let budget = timeout.saturating_mul(attempts).saturating_add(backoff);
        let budget = chrono::TimeDelta::milliseconds(i64::try_from(budget).unwrap_or(i64::MAX / 2));
        self.runtime.now() + budget + RUN_GRACE
    }

    /// A claimed task past its run deadline: the replica running it stopped. It fails as
    /// outcome-unknown (what ran is in the audit trail).
    async fn abandon(&self, task: &mut StoredTask, tasks: &McpTasks) -> Result<(), ErrorData> {
        let envelope = json!({
            "status": "failed",
            "error": {"code": "INTERNAL_ERROR", "message": RUN_LOST, "retryable": false},
        });
        let outcome = failed_error(&envelope);
        let claim = task.claim.clone().unwrap_or_default();
        let actor = ActorRef {
            id: "capgate".into(),
            kind: capgate_core::actor::ActorKind::Service,
        };
        let ending = (
            TaskState::Failed,
            RUN_LOST.to_owned(),
            outcome.clone(),
            None,
            Some("INTERNAL_ERROR".to_owned()),
        );
        if self.record_end(tasks, task, &claim, actor, ending).await {
            task.state = TaskState::Failed;
            task.status_message = RUN_LOST.to_owned();
            task.outcome = Some(outcome.to_string());
        }
        Ok(())
    }

    /// Store how a claimed task ended, and audit and count it when this call ended it.
    async fn record_end(
        &self,
        tasks: &McpTasks,
        task: &StoredTask,
        claim: &str,
        actor: ActorRef,
        (state, message, outcome, execution_id, code): Ending,
    ) -> bool {
        let outcome = outcome.to_string();
        let now = self.runtime.now();
        match tasks
            .store
            .finish(&task.id, state, &message, &outcome, Some(claim), now)
            .await
        {
            Ok(true) => {
                crate::metrics::mcp_task(state.as_str());
                self.audit_task(
                    actor,
                    execution_id,
                    Some(&task.capability_id),
                    EventPayload::McpTaskFinished {
                        task_id: task.id.clone(),
                        status: state.as_str().to_owned(),
                        code,
                        approval_id: task.approval_id.clone(),
                    },
                )
                .await;
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::error!(target: "capgate::mcp", error = %e, task = %task.id, "an MCP task's end could not be stored");
                false
            }
        }
    }

    /// A call of a capability declared to run as a task (`task_after_ms`): it runs off the
    /// request; answered as usual when it ends within `after` (or the client goes away
    /// first), else with a task the client polls. The task holds the run's claim; its
    /// status carries the procedure's progress; `tasks/cancel` (on any replica) cancels
    /// the run; the capability's own timeout and cancellation rules apply unchanged.
    pub(super) async fn invoke_as_task(
        &self,
        caller: &Caller,
        capability_id: &str,
        invoke: InvokeRequest,
        after: Duration,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let cancel = CancellationToken::new();
        let (progress, mut reports) = capgate_core::progress::bounded();
        let invoke = invoke.cancel(cancel.clone()).progress(progress);
        let runtime = self.runtime.clone();
        let mut run = tokio::spawn(async move { runtime.invoke(invoke).await });
        // The latest progress, as the task's status says it.
        let latest: Arc<Mutex<Option<String>>> = Arc::default();
        let reader = {
            let latest = latest.clone();
            tokio::spawn(async move {
                let mut last = 0.0;
                while let Some(value) = reports.next().await {
                    let (done, total, message) = progress_fields(&value, last);
                    last = done;
                    let of = total.map_or_else(String::new, |t| format!(" of {t}"));
                    let text = match message {
                        Some(m) => format!("Running: {m} ({done}{of})."),
                        None => format!("Running ({done}{of})."),
                    };
                    *latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(text);
                }
            })
        };
        let joined = |r: Result<ExecutionResult, tokio::task::JoinError>| {
            r.unwrap_or_else(|e| {
                tracing::error!(target: "capgate::mcp", error = %e, "a task's call panicked");
                ExecutionResult::Failed {
                    execution_id: String::new(),
                    error: capgate_core::error::CapabilityError::new(
                        capgate_core::error::ErrorCode::InternalError,
                    ),
                    effect_status: None,
                }
            })
        };
        let answered = tokio::select! {
            r = &mut run => Some(joined(r)),
            () = context.ct.cancelled() => {
                cancel.cancel();
                Some(joined((&mut run).await))
            }
            () = tokio::time::sleep(after) => None,
        };
        if let Some(result) = answered {
            reader.abort();
            self.drain_audit().await;
            if let Some(task) = self
                .open_task(caller, capability_id, &result, context)
                .await
            {
                return Ok(CallToolResponse::Task(task));
            }
            return Ok(self.tool_result(&result).into());
        }
        // Still running: a task holds the run from here.
        let Some(tasks) = self.tasks().cloned() else {
            return Ok(self.tool_result(&joined(run.await)).into());
        };
        let now = self.runtime.now();
        let token = new_task_id().unwrap_or_default();
        let deadline = self.run_deadline(capability_id);
        let retention = chrono::Duration::from_std(tasks.retention).unwrap_or_default();
        let message = latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| "Running.".to_owned());
        let task = StoredTask {
            id: new_task_id().unwrap_or_default(),
            principal_sha256: principal_digest(&caller.principal),
            namespace: caller.principal.namespace.clone(),
            approval_id: None,
            capability_id: capability_id.to_owned(),
            state: TaskState::Working,
            status_message: message,
            outcome: None,
            input_answered: false,
            claim: Some(token.clone()),
            run_deadline: Some(deadline),
            created_at: now,
            updated_at: now,
            purge_after: deadline + retention,
        };
        let stored = if token.is_empty() || task.id.is_empty() {
            false
        } else {
            tasks
                .store
                .create(&task, tasks.max_per_principal)
                .await
                .inspect_err(|e| tracing::info!(target: "capgate::mcp", error = %e, "no MCP task for a long call"))
                .is_ok()
        };
        if !stored {
            // No task (past the bound, the store away): the request holds until the end,
            // as for a client without tasks.
            tracing::info!(target: "capgate::mcp", "no MCP task for a long call; it holds its request");
            let result = joined(run.await);
            reader.abort();
            self.drain_audit().await;
            return Ok(self.tool_result(&result).into());
        }
        crate::metrics::mcp_task("created");
        let actor = caller.principal.actor.reference();
        self.audit_task(
            actor.clone(),
            None,
            Some(capability_id),
            EventPayload::McpTaskCreated {
                task_id: task.id.clone(),
                approval_id: None,
            },
        )
        .await;
        let handle = CreateTaskResult::new(self.wire_task(&task, TaskStatus::Working));
        let server = self.clone();
        tokio::spawn(async move {
            let watch = watch_for_cancel(&tasks, &task.id, &task.principal_sha256, cancel);
            let reporter = {
                let (store, id, token, latest, runtime) = (
                    tasks.store.clone(),
                    task.id.clone(),
                    token.clone(),
                    latest.clone(),
                    server.runtime.clone(),
                );
                tokio::spawn(async move {
                    let mut said = None;
                    loop {
                        tokio::time::sleep(REPORT_EVERY).await;
                        let now = latest.lock().unwrap_or_else(|p| p.into_inner()).clone();
                        if now.is_some() && now != said {
                            if let Some(m) = &now {
                                let _ = store.report(&id, &token, m, runtime.now()).await;
                            }
                            said = now;
                        }
                    }
                })
            };
            let result = joined(run.await);
            watch.abort();
            reporter.abort();
            reader.abort();
            server.drain_audit().await;
            let ending = server.ended(&result);
            server
                .record_end(&tasks, &task, &token, actor, ending)
                .await;
        });
        Ok(CallToolResponse::Task(handle))
    }
}
