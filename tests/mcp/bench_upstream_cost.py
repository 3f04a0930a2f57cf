"""What an MCP upstream behind capgate adds per call, measured side by side in one run.

    tests/mcp/.venv/bin/python tests/mcp/bench_upstream_cost.py CAPGATE_BINARY [--calls N]

`cargo xtask bench-mcp` builds the release binary and runs this. One client, the official
MCP Python SDK, one call in flight, the `echo` tool of `@modelcontextprotocol/server-everything`,
each path warmed up then timed call by call (nearest-rank percentiles):

- stdio:  the client starts the server itself (direct), against the client starting
          `capgate mcp --stdio` whose upstream is the same server over stdio (governed);
- http:   the client calls the server's streamable HTTP endpoint (direct), against the
          client calling capgate's `/mcp` whose upstream is that endpoint (governed).

The client transport is the same on both sides of each pair, so the difference is what
capgate adds: its pipeline (exposure, schema, actor, policies, audit to SQLite) and the second
hop. Prints one table and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ROOT / "tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
TOKEN = "bench-agent-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", int(url.split(":")[2].split("/")[0])), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens at {url}")


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    rank = max(1, int(-(-p * len(ordered) // 100)))
    return ordered[rank - 1]


async def timed(client: Client, tool: str, calls: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        await client.call_tool(tool, {"message": "warm"})
    out = []
    for i in range(calls):
        start = time.perf_counter()
        result = await client.call_tool(tool, {"message": f"m{i}"})
        out.append((time.perf_counter() - start) * 1000)
        if result.is_error:
            raise SystemExit(f"{tool} failed: {result}")
    return out


def config(dir: Path, upstream: str) -> Path:
    digest = subprocess.run(
        ["sha256sum"], input=TOKEN.encode(), capture_output=True, check=True
    ).stdout.split()[0].decode()
    text = f"""revision = "bench"
[store]
url = "sqlite://{dir}/bench.db"
[gateway]
listen = "127.0.0.1:0"
authorize = "authenticated"
[[gateway.apiKeys]]
sha256 = "{digest}"
namespace = "bench"
surfaces = ["mcp"]
actor = {{ id = "u_bench", kind = "user" }}
[mcp]
stdioActor = {{ id = "svc_bench", kind = "service" }}
stdioNamespace = "bench"
{upstream}
"""
    path = dir / "capgate.toml"
    path.write_text(text)
    return path


def import_echo(binary: str, path: Path) -> None:
    entry = subprocess.run(
        [binary, "import", "mcp", "--config", str(path), "--upstream", "everything", "--tool", "echo"],
        capture_output=True, text=True, check=True,
    ).stdout.replace("expose = {}", "expose = { mcp = true }")
    path.write_text(path.read_text() + "\n" + entry)


async def run(binary: str, calls: int, warmup: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    node = "node"
    with tempfile.TemporaryDirectory() as tmp:
        dir = Path(tmp)
        # stdio, direct.
        params = StdioServerParameters(command=node, args=[str(EVERYTHING), "stdio"])
        async with Client(params, mode="legacy", cache=None) as c:
            results["stdio direct"] = await timed(c, "echo", calls, warmup)
        # stdio, through `capgate mcp --stdio`.
        path = config(dir, f'[upstreams.mcp.everything]\ncommand = ["{node}", "{EVERYTHING}", "stdio"]\ninheritEnv = ["PATH"]\n')
        import_echo(binary, path)
        params = StdioServerParameters(command=binary, args=["mcp", "--stdio", "--config", str(path)], env={"PATH": os.environ["PATH"]})
        async with Client(params, mode="legacy", cache=None) as c:
            results["stdio via capgate"] = await timed(c, "everything_echo", calls, warmup)
        # HTTP: the server on its own port.
        port = free_port()
        server = subprocess.Popen(
            [node, str(EVERYTHING), "streamableHttp"],
            env={**os.environ, "PORT": str(port)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        capgate = None
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            wait_http(url)
            async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=30)), mode="legacy", cache=None) as c:
                results["http direct"] = await timed(c, "echo", calls, warmup)
            (dir / "bench.db").unlink(missing_ok=True)
            path = config(dir, f'[upstreams.mcp.everything]\nurl = "{url}"\n')
            import_echo(binary, path)
            capgate = subprocess.Popen(
                [binary, "serve", "--config", str(path)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )
            listen = None
            for line in capgate.stdout:
                if "listening on http://" in line:
                    listen = line.split("listening on ")[1].strip()
                    break
            if listen is None:
                raise SystemExit("capgate serve did not start")
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
            async with Client(streamable_http_client(f"{listen}/mcp", http_client=http), mode="legacy", cache=None) as c:
                results["http via capgate"] = await timed(c, "everything_echo", calls, warmup)
        finally:
            if capgate is not None:
                capgate.terminate()
                capgate.wait(10)
            server.terminate()
            server.wait(10)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capgate")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    results = anyio.run(run, args.capgate, args.calls, args.warmup)
    print(f"{'path':<20} {'p50 ms':>8} {'p99 ms':>8}   ({args.calls} calls each, one in flight)")
    stats = {}
    for name, samples in results.items():
        stats[name] = (percentile(samples, 50), percentile(samples, 99))
        print(f"{name:<20} {stats[name][0]:>8.3f} {stats[name][1]:>8.3f}")
    for transport in ("stdio", "http"):
        d, g = stats[f"{transport} direct"], stats[f"{transport} via capgate"]
        print(
            f"{transport}: capgate adds {g[0] - d[0]:.3f} ms at p50 ({g[0] / d[0]:.2f}x), "
            f"{g[1] - d[1]:.3f} ms at p99 ({g[1] / d[1]:.2f}x)"
        )
    print(json.dumps({k: {"p50": v[0], "p99": v[1]} for k, v in stats.items()}))


if __name__ == "__main__":
    main()
