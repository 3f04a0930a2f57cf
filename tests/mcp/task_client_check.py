"""Drive capgate's MCP tasks with the official MCP Python SDK (PyPI `mcp`).

The SDK has no built-in client for the `io.modelcontextprotocol/tasks` extension (SEP-2663);
it has the way to add one: a `ClientExtension` whose `ResultClaim` takes the `resultType:
"task"` answer of `tools/call` and resolves it with follow-up requests on the SDK's own
session. This script is that extension, used the way an agent host would use it: a held
refund is answered with a task; the claim polls `tasks/get` at the task's `pollIntervalMs`
until the task ends; the SDK hands the agent the tool's ordinary `CallToolResult`.

    python task_client_check.py URL TOKEN [--cancel]

One JSON object per stdout line, as mcp_client_check.py does: `{"event": "task", ...}` once
the task exists (the parent decides its approval, in the console or the approvals API);
`{"event": "done", ...}` at the end. `--cancel` cancels the task (`tasks/cancel`) as soon as
it exists, and checks that it ends `cancelled`. Every answer is validated against the
2026-07-28 schema's types the SDK ships (`mcp_types`); any failed check raises.
"""

from __future__ import annotations

import json
import sys
from typing import Any, ClassVar, Literal

import anyio
import httpx2
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict, TypeAdapter

TASKS = "io.modelcontextprotocol/tasks"


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


class CreateTaskResult(Result):
    """SEP-2663's `CreateTaskResult`: the task's fields beside `resultType: "task"`."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: Literal["working", "input_required"]
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None
    status_message: str | None = None


class TaskIdParams(RequestParams):
    task_id: str


class GetTaskRequest(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param: ClassVar[str | None] = "taskId"


class CancelTaskRequest(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param: ClassVar[str | None] = "taskId"


ANY = TypeAdapter(dict[str, Any])
STATUSES = {"working", "input_required", "completed", "failed", "cancelled"}


def check_detailed(task: dict[str, Any]) -> None:
    """The wire shape of SEP-2663's `DetailedTask` (`tasks/get`)."""
    for key in ("taskId", "status", "createdAt", "lastUpdatedAt"):
        check(key in task, f"{key} missing from {task}")
    check(task["status"] in STATUSES, f"unknown status in {task}")
    if task["status"] == "completed":
        CallToolResult.model_validate(task["result"])
    if task["status"] == "failed":
        check(isinstance(task["error"].get("code"), int), f"a JSON-RPC error in {task}")


class CapgateTasks(ClientExtension):
    """The tasks extension, client side: claims `resultType: "task"` and polls it."""

    identifier = TASKS

    def __init__(self, cancel: bool) -> None:
        self.cancel = cancel
        self.polls: list[dict[str, Any]] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.resolve)]

    async def resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        meta = getattr(created, "meta", None) or (created.model_extra or {}).get("_meta") or {}
        approval = dict(meta).get("capgate/approval") or {}
        check(created.task_id.startswith("tsk_"), f"task id {created.task_id}")
        check(created.poll_interval_ms is not None, "a poll interval")
        emit(
            event="task",
            taskId=created.task_id,
            approvalId=approval.get("id"),
            statusMessage=created.status_message,
            url=approval.get("url"),
        )
        if self.cancel:
            ack = await ctx.session.send_request(
                CancelTaskRequest(params=TaskIdParams(task_id=created.task_id)), ANY
            )
            check(ack.get("resultType", "complete") == "complete", f"cancel ack {ack}")
        interval = (created.poll_interval_ms or 1000) / 1000
        while True:
            task = await ctx.session.send_request(
                GetTaskRequest(params=TaskIdParams(task_id=created.task_id)), ANY
            )
            check_detailed(task)
            self.polls.append({"status": task["status"]})
            if task["status"] == "completed":
                return CallToolResult.model_validate(task["result"])
            if task["status"] in ("failed", "cancelled"):
                # The agent sees the end as a tool error carrying the public error.
                error = task.get("error") or {"message": "cancelled"}
                envelope = error.get("data") or {"status": task["status"]}
                return CallToolResult(
                    content=[{"type": "text", "text": json.dumps(envelope)}],
                    structured_content=envelope,
                    is_error=True,
                )
            await anyio.sleep(interval)


async def run(url: str, token: str, cancel: bool) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    tasks = CapgateTasks(cancel)
    async with Client(
        streamable_http_client(url, http_client=http), mode="auto", cache=None, extensions=[tasks]
    ) as client:
        result = await client.call_tool(
            "orders_refund",
            {"orderId": "ord_42", "amount": 649, "reason": "damaged item"},
        )
        emit(
            event="done",
            isError=bool(result.is_error),
            structured=result.structured_content,
            polls=len(tasks.polls),
            statuses=sorted({p["status"] for p in tasks.polls}),
        )


def main() -> None:
    args = sys.argv[1:]
    check(len(args) >= 2, __doc__ or "")
    anyio.run(run, args[0], args[1], "--cancel" in args)


if __name__ == "__main__":
    main()
