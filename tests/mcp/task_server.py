"""An MCP server (the official Python SDK's MCPServer) whose long tool answers with a task:
the `io.modelcontextprotocol/tasks` extension (SEP-2663) served through the SDK's own
extension interface (`mcp.server.extension.Extension`: a `tools/call` interceptor and the
`tasks/get` and `tasks/cancel` methods).

Run over stdio by capgate as an `[upstreams.mcp.NAME]`, for
host/provider/tests/all/mcp_upstream_tasks.rs:

    python task_server.py STATE_DIR

Its tools:
  - `crunch(seconds)`: to a client that declared the extension, answered at once with a
    task that works for `seconds` and then completes with `{"crunched": seconds}` (a
    client without it gets the result after waiting, as any tool);
  - `ask_for_input()`: a task that at once asks its client for input (`input_required`);
  - `stall()`: a task that never ends.
STATE_DIR is how the test watches it: every `tasks/cancel` appends the task id to
STATE_DIR/cancelled, every task that ran to its end appends it to STATE_DIR/finished.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp_types import RequestParams

STATE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
TASKS = "io.modelcontextprotocol/tasks"
LONG = {"crunch", "ask_for_input", "stall"}


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def append(name: str, line: str) -> None:
    with open(STATE / name, "a", encoding="utf-8") as f:
        f.write(line + "\n")


class TaskIdParams(RequestParams):
    task_id: str


class Tasks(Extension):
    identifier = TASKS

    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, Any]] = {}

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel),
        ]

    def declared(self, ctx: Any) -> bool:
        capabilities = ctx.session.client_capabilities
        extensions = capabilities.extensions if capabilities else None
        return bool(extensions) and TASKS in extensions

    async def intercept_tool_call(self, params: Any, ctx: Any, call_next: Any) -> Any:
        if params.name not in LONG or not self.declared(ctx):
            return await call_next(ctx)
        task_id = "up_" + uuid.uuid4().hex
        task: dict[str, Any] = {
            "taskId": task_id,
            "status": "working",
            "createdAt": now(),
            "lastUpdatedAt": now(),
            "ttlMs": 600_000,
            "pollIntervalMs": 50,
        }
        self.tasks[task_id] = task
        arguments = params.arguments or {}
        if params.name == "crunch":
            task["job"] = asyncio.ensure_future(self.crunch(task, float(arguments.get("seconds", 0))))
        elif params.name == "ask_for_input":
            task["status"] = "input_required"
            task["inputRequests"] = {
                "name": {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": "Your name?",
                        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
                    },
                }
            }
        return {"resultType": "task", **public(task)}

    async def crunch(self, task: dict[str, Any], seconds: float) -> None:
        await asyncio.sleep(seconds)
        if task["status"] != "working":
            return
        task["status"] = "completed"
        task["lastUpdatedAt"] = now()
        task["result"] = {
            "content": [{"type": "text", "text": f"crunched {seconds}"}],
            "structuredContent": {"crunched": seconds},
            "isError": False,
        }
        append("finished", task["taskId"])

    async def get(self, ctx: Any, params: TaskIdParams) -> dict[str, Any]:
        task = self.tasks.get(params.task_id)
        if task is None:
            raise ValueError("unknown task")
        return {"resultType": "complete", **public(task)}

    async def cancel(self, ctx: Any, params: TaskIdParams) -> dict[str, Any]:
        task = self.tasks.get(params.task_id)
        if task is None:
            raise ValueError("unknown task")
        if task["status"] in ("working", "input_required"):
            task["status"] = "cancelled"
            task.pop("inputRequests", None)
            task["lastUpdatedAt"] = now()
            job = task.get("job")
            if job is not None:
                job.cancel()
        append("cancelled", params.task_id)
        return {"resultType": "complete"}


def public(task: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in task.items() if k != "job"}


server = MCPServer("tasking", extensions=[Tasks()])


@server.tool(description="Crunch numbers for a while")
async def crunch(seconds: float) -> dict[str, Any]:
    await asyncio.sleep(seconds)
    return {"crunched": seconds}


@server.tool(description="Ask the user for their name")
async def ask_for_input() -> str:
    return "nobody"


@server.tool(description="Never finish")
async def stall() -> str:
    await asyncio.sleep(3600)
    return "never"


if __name__ == "__main__":
    server.run("stdio")
