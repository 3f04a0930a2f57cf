"""Drive a capgate MCP server with the official MCP Python SDK (PyPI `mcp`).

Run by host/gateway/tests/all/mcp_python.rs, which owns the server side:

    python mcp_client_check.py http URL [--mode legacy|auto]
    python mcp_client_check.py stdio COMMAND [ARGS...]
    python mcp_client_check.py defaults URL     (a server on default options)

The script speaks a small line protocol with its parent on stdout/stdin: every line it
prints is one JSON object. `{"event": "approval", "approvalId": ...}` asks the parent to
decide the approval through the runtime's approvals API; the parent answers with one line
on stdin. `{"event": "cancelled", ...}` says a call was cancelled mid-flight (the parent
checks the audit trail); `{"event": "concealed", ...}` names the executions of an unknown,
an unexposed and a hidden tool call, whose audit the parent checks at once (the server
answers only after the call's events are written). The last line is `{"event": "done", ...}`. Any failed check raises,
so the exit code is non-zero.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


async def read_parent_line() -> str:
    line = await anyio.to_thread.run_sync(sys.stdin.readline)
    check(line != "", "the parent closed stdin")
    return line.strip()


def envelope(result: Any) -> dict[str, Any]:
    """The envelope, from structuredContent, checked against the JSON text content."""
    structured = result.structured_content
    check(isinstance(structured, dict), f"structuredContent is not an object: {result!r}")
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    check(len(texts) == 1, f"expected one text content, got {result.content!r}")
    check(json.loads(texts[0]) == structured, "text content and structuredContent differ")
    return structured


def without_execution_id(result: Any) -> tuple[str, str]:
    """A tool result's text block and structuredContent, serialized exactly as received,
    with its own executionId blanked: what tells one refusal from another, if anything."""
    structured = envelope(result)
    execution_id = structured.get("executionId")
    check(isinstance(execution_id, str) and execution_id.startswith("exe_"), f"no executionId: {structured}")
    text = [c.text for c in result.content if getattr(c, "type", None) == "text"][0]
    blank = json.dumps({**structured, "executionId": "exe_"}, sort_keys=True)
    return text.replace(execution_id, "exe_"), blank


async def concealed_calls(client: Client) -> dict[str, str]:
    """SI-8: an unknown, an unexposed and a hidden tool are one and the same answer, byte
    for byte in the text block and in structuredContent (their execution ids aside), and
    each opened an execution (stage 2) so each is audited."""
    answers = {
        "unknown": await client.call_tool("no_such_tool", {}),
        "not-exposed": await client.call_tool("internal_export", {}),
        "hidden": await client.call_tool("vault_read", {}),
    }
    shapes = {reason: without_execution_id(r) for reason, r in answers.items()}
    for reason, r in answers.items():
        check(r.is_error is True, f"{reason}: isError")
        check(shapes[reason] == shapes["unknown"], f"{reason} differs from unknown: {shapes[reason]} vs {shapes['unknown']}")
    env = envelope(answers["unknown"])
    check(env["error"]["code"] == "CAPABILITY_NOT_FOUND", f"unknown: {env}")
    return {reason: envelope(r)["executionId"] for reason, r in answers.items()}


def http_client(url: str, token: str, mode: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(url, http_client=http), mode=mode, cache=None)


async def tool_names(client: Client) -> dict[str, Any]:
    listed = await client.list_tools()
    return {t.name: t for t in listed.tools}


async def scenario(client: Client, *, transport: str, actor: str, admin_client: Client | None) -> dict[str, Any]:
    report: dict[str, Any] = {"transport": transport, "protocolVersion": client.protocol_version}
    check(client.server_info is not None and client.server_info.name == "capgate", "serverInfo.name")

    # tools/list: names, schemas, annotations; unexposed and hidden capabilities absent.
    tools = await tool_names(client)
    report["tools"] = sorted(tools)
    for absent in ("internal_export", "vault_read", "orders_purge"):
        check(absent not in tools, f"{absent} must not be listed for {actor}: {sorted(tools)}")
    for present in ("orders_lookup", "orders_refund", "jobs_wait", "approvals_resume"):
        check(present in tools, f"{present} missing from {sorted(tools)}")
    refund = tools["orders_refund"]
    check(refund.input_schema["required"] == ["orderId", "amount"], "refund schema")
    check(refund.input_schema["properties"]["amount"]["type"] == "number", "refund amount type")
    check(refund.annotations.read_only_hint is False, "refund readOnlyHint")
    check(refund.annotations.destructive_hint is False, "refund destructiveHint")
    check(refund.annotations.idempotent_hint is False, "refund idempotentHint")
    lookup = tools["orders_lookup"]
    check(lookup.annotations.read_only_hint is True, "lookup readOnlyHint")
    check(lookup.annotations.idempotent_hint is True, "lookup idempotentHint")

    # Two principals, two lists: the discovery policy shows orders_purge to admins only.
    if admin_client is not None:
        admin_tools = await tool_names(admin_client)
        report["adminTools"] = sorted(admin_tools)
        check("orders_purge" in admin_tools, "admin must see orders_purge")
        check(admin_tools["orders_purge"].annotations.destructive_hint is True, "purge destructiveHint")
        purged = envelope(await admin_client.call_tool("orders_purge", {"orderId": "ord_9"}))
        check(purged["status"] == "completed", f"admin purge: {purged}")

    # tools/call success; the actor is the authenticated one, never model input.
    done = await client.call_tool("orders_lookup", {"orderId": "ord_1"})
    env = envelope(done)
    check(done.is_error is not True, "lookup isError")
    check(env["status"] == "completed", f"lookup: {env}")
    check(env["output"] == {"orderId": "ord_1", "status": "shipped", "actor": actor}, f"lookup output {env}")

    # INPUT_INVALID is a tool result with isError, not a protocol error.
    bad = await client.call_tool("orders_refund", {"orderId": "ord_1", "amount": "lots"})
    env = envelope(bad)
    check(bad.is_error is True, "INPUT_INVALID must set isError")
    check(env["status"] == "failed" and env["error"]["code"] == "INPUT_INVALID", f"bad input: {env}")
    check(set(env["error"]) <= {"code", "message", "retryable", "details"}, f"model-safe error only: {env}")
    check("lots" not in json.dumps(env), "the offending value must not be echoed")

    # A hidden capability called by name is the concealed not-found.
    hidden = await client.call_tool("vault_read", {})
    env = envelope(hidden)
    check(hidden.is_error is True and env["error"]["code"] == "CAPABILITY_NOT_FOUND", f"hidden: {env}")
    check("s3cr3t" not in json.dumps(env), "hidden output leaked")

    # Unknown, unexposed and hidden: one answer, each audited by the time it arrives.
    concealed = await concealed_calls(client)
    report["concealedExecutions"] = concealed
    emit(event="concealed", executions=concealed)
    ack = await read_parent_line()
    check(ack == "audited", f"parent said {ack!r}")

    # A small refund completes; a large one waits for a human.
    small = envelope(await client.call_tool("orders_refund", {"orderId": "ord_1", "amount": 20}))
    check(small["status"] == "completed", f"small refund: {small}")
    held = await client.call_tool("orders_refund", {"orderId": "ord_42", "amount": 649})
    env = envelope(held)
    check(held.is_error is not True, "approval-required is not an error")
    check(env["status"] == "approval-required", f"big refund: {env}")
    approval_id = env["approvalId"]
    check(approval_id == env["approval"]["id"] and approval_id.startswith("apr_"), f"approval id: {env}")
    check(bool(env["expiresAt"]), "expiresAt")
    check(env["message"].startswith("Awaiting approval: "), f"message: {env}")
    check(env.get("url") == f"https://console.example/approvals/{approval_id}", f"console url: {env}")

    # Resuming before the decision is APPROVAL_PENDING; no MCP request can decide.
    early = envelope(await client.call_tool("approvals_resume", {"approvalId": approval_id}))
    check(early["status"] == "failed" and early["error"]["code"] == "APPROVAL_PENDING", f"early resume: {early}")

    emit(event="approval", approvalId=approval_id)
    decided = await read_parent_line()
    check(decided == "approved", f"parent said {decided!r}")
    resumed = await client.call_tool("approvals_resume", {"approvalId": approval_id})
    env = envelope(resumed)
    check(env["status"] == "completed", f"resume: {env}")
    check(env["output"]["refundId"] == "ref_ord_42" and env["output"]["approvedBy"] == "u_manager", f"resumed output {env}")
    again = envelope(await client.call_tool("approvals_resume", {"approvalId": approval_id}))
    check(again["error"]["code"] == "APPROVAL_CONSUMED", f"second resume: {again}")

    # A call cancelled mid-flight: wait for its first progress notification, then cancel.
    started = anyio.Event()
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))
        started.set()

    async def slow_call() -> None:
        await client.call_tool("jobs_wait", {"seconds": 30}, progress_callback=on_progress)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_call)
            await started.wait()
            tg.cancel_scope.cancel()
    check(progress and progress[0][2] == "started", f"progress: {progress}")
    emit(event="cancelled", tool="jobs_wait", progress=progress)
    ack = await read_parent_line()
    check(ack == "audited", f"parent said {ack!r}")

    # The session is still usable after a cancellation.
    after = envelope(await client.call_tool("orders_lookup", {"orderId": "ord_2"}))
    check(after["status"] == "completed", f"after cancel: {after}")
    return report


async def run_http(url: str, mode: str) -> None:
    async with http_client(url, "tok-dana", mode) as dana, http_client(url, "tok-admin", mode) as admin:
        report = await scenario(dana, transport=f"http-{mode}", actor="u_dana", admin_client=admin)

    # An unknown or expired bearer token is refused before any MCP message is read.
    for token in ("tok-expired", "nope"):
        async with httpx2.AsyncClient(timeout=10) as http:
            r = await http.post(
                url,
                headers={
                    "Authorization": f"Bearer {token}",
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                },
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            )
            check(r.status_code == 401, f"{token}: HTTP {r.status_code}")
    emit(event="done", **report)


async def run_defaults(url: str) -> None:
    """A server on default options: no resume tool is listed, and calling it by name is the
    same concealed not-found as any unknown tool."""
    async with http_client(url, "tok-dana", "legacy") as dana:
        tools = await tool_names(dana)
        check("approvals_resume" not in tools, f"resume tool listed by default: {sorted(tools)}")
        resume = await dana.call_tool("approvals_resume", {"approvalId": "apr_x"})
        unknown = await dana.call_tool("no_such_tool", {})
        check(without_execution_id(resume) == without_execution_id(unknown), "resume tool told apart from unknown")
    emit(event="done", tools=sorted(tools))


async def run_stdio(command: list[str]) -> None:
    # The SDK hands the server a minimal environment; pass the fixture's settings on.
    env = {k: v for k, v in os.environ.items() if k.startswith("CAPGATE_")}
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    async with Client(params, mode="legacy", cache=None) as client:
        report = await scenario(client, transport="stdio", actor="svc_agent", admin_client=None)
    emit(event="done", **report)


def main() -> None:
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "http":
        mode = "legacy"
        if "--mode" in args:
            mode = args[args.index("--mode") + 1]
        anyio.run(run_http, args[1], mode)
    elif len(args) == 2 and args[0] == "defaults":
        anyio.run(run_defaults, args[1])
    elif len(args) >= 2 and args[0] == "stdio":
        anyio.run(run_stdio, args[1:])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
