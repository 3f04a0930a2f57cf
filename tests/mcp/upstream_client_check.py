"""Talk to capgate's `/mcp` door with the official MCP Python client (PyPI `mcp`), one
request per line from the parent.

Run by host/cli/tests/all/mcp_upstream_e2e.rs, which owns `capgate serve`, the MCP
upstreams behind it and every assertion:

    python upstream_client_check.py URL API_KEY

The script connects once (streamable HTTP, bearer API_KEY), prints `{"event": "ready", ...}`
and then answers each JSON line it reads on stdin with one JSON line on stdout:

    {"op": "list"}                                 -> {"tools": [{"name", "description"}, ...]}
    {"op": "call", "name": N, "arguments": {...}}  -> {"isError", "structured", "texts", "raw"}
    {"op": "quit"}                                 -> {"event": "done"} and exit

`raw` is the whole tool result as the client received it (serialized by the SDK), so the
parent can check that nothing of an upstream's error text reached the model. A client-side
failure is answered `{"error": "..."}`; the session stays usable.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


async def read_line() -> str:
    return await anyio.to_thread.run_sync(sys.stdin.readline)


async def answer(client: Client, request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    if op == "list":
        listed = await client.list_tools()
        return {"tools": [{"name": t.name, "description": t.description} for t in listed.tools]}
    if op == "call":
        result = await client.call_tool(request["name"], request.get("arguments") or {})
        texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
        return {
            "isError": result.is_error is True,
            "structured": result.structured_content,
            "texts": texts,
            "raw": result.model_dump_json(by_alias=True),
        }
    return {"error": f"unknown op {op!r}"}


async def run(url: str, key: str) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None) as client:
        server = client.server_info.name if client.server_info is not None else None
        emit(event="ready", serverName=server, protocolVersion=client.protocol_version)
        while True:
            line = await read_line()
            if line == "":
                return
            request = json.loads(line)
            if request.get("op") == "quit":
                emit(event="done")
                return
            try:
                reply = await answer(client, request)
            except Exception as e:  # reported to the parent, which decides what it means
                reply = {"error": f"{type(e).__name__}: {e}"}
            print(json.dumps(reply), flush=True)


def main() -> None:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    anyio.run(run, sys.argv[1], sys.argv[2])


if __name__ == "__main__":
    main()
