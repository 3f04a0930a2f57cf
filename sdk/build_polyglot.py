"""Build every JavaScript and Python plugin into a component (called by sdk/build-polyglot.sh).

    python3 sdk/build_polyglot.py [--jobs N] [--force] [--only NAME]

JavaScript plugins: each directory under plugins/js/ with a package.json holding
``"capgate": {"world": ...}`` -> plugins/js/dist/<dir name>.wasm (entry: package.json "main").
Python plugins: each directory under plugins/python/ with a pyproject.toml holding
``[tool.capgate] module/world`` -> plugins/python/dist/<dir name>.wasm.

Unchanged plugins are skipped (each build records its inputs' hash in ``<out>.inputs``).
Writes plugins/{js,python}/dist/build-report.json (size, seconds, skipped) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE = os.environ.get("NODE", "node")
PYTHON = ROOT / "sdk" / "python" / ".venv" / "bin" / "python"


def discover() -> list[dict]:
    jobs = []
    for pkg in sorted((ROOT / "plugins" / "js").rglob("package.json")):
        if "node_modules" in pkg.parts or "dist" in pkg.parts:
            continue
        meta = json.loads(pkg.read_text())
        world = (meta.get("capgate") or {}).get("world")
        if not world:
            continue
        d = pkg.parent
        out = ROOT / "plugins" / "js" / "dist" / f"{d.name}.wasm"
        cmd = [NODE, str(ROOT / "sdk" / "js" / "bin" / "capgate-js.mjs"), "build", str(d / meta.get("main", "index.js")),
               "--world", world, "-o", str(out)]
        jobs.append({"lang": "js", "name": d.name, "dir": d, "world": world, "out": out, "cmd": cmd, "env": {}})
    for proj in sorted((ROOT / "plugins" / "python").rglob("pyproject.toml")):
        if ".venv" in proj.parts or "dist" in proj.parts:
            continue
        tool = tomllib.loads(proj.read_text()).get("tool", {}).get("capgate")
        if not tool:
            continue
        d = proj.parent
        out = ROOT / "plugins" / "python" / "dist" / f"{d.name}.wasm"
        cmd = [str(PYTHON), "-m", "capgate_plugin.build", "build", str(d / f"{tool['module']}.py"),
               "--world", tool["world"], "-o", str(out)]
        env = {"PYTHONPATH": str(ROOT / "sdk" / "python" / "src")}
        jobs.append({"lang": "python", "name": d.name, "dir": d, "world": tool["world"], "out": out, "cmd": cmd, "env": env})
    return jobs


def run(job: dict, force: bool) -> dict:
    cmd = job["cmd"] + (["--force"] if force else []) + ["--quiet"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env={**os.environ, **job["env"]}, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        return {**job, "ok": False, "log": r.stdout + r.stderr, "seconds": seconds}
    out = job["out"]
    stamp_mtime = out.with_name(out.name + ".inputs").stat().st_mtime
    skipped = stamp_mtime < t0_wall
    return {**job, "ok": True, "bytes": out.stat().st_size, "seconds": seconds, "skipped": skipped}


t0_wall = time.time()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", "-j", type=int, default=int(os.environ.get("CAPGATE_POLYGLOT_JOBS", "1")))
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--only", action="append", help="build only plugins with this directory name")
    a = ap.parse_args()
    jobs = [j for j in discover() if not a.only or j["name"] in a.only]
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = list(pool.map(lambda j: run(j, a.force), jobs))
    failed = [r for r in results if not r["ok"]]
    for r in failed:
        sys.stderr.write(f"\n--- {r['lang']} {r['name']} failed:\n{r['log']}\n")
    w = max([len("plugin")] + [len(r["name"]) for r in results])
    print(f"{'lang':<7} {'plugin':<{w}} {'world':<10} {'size':>9} {'build':>8}")
    for r in results:
        if r["ok"]:
            took = "cached" if r["skipped"] else f"{r['seconds']:.1f} s"
            print(f"{r['lang']:<7} {r['name']:<{w}} {r['world']:<10} {r['bytes'] / 1048576:>6.1f} MiB {took:>8}")
    for lang in ("js", "python"):
        rows = [
            {"plugin": r["name"], "world": r["world"], "bytes": r["bytes"], "seconds": round(r["seconds"], 2), "skipped": r["skipped"],
             "path": str(r["out"].relative_to(ROOT))}
            for r in results if r["ok"] and r["lang"] == lang
        ]
        if rows:
            (ROOT / "plugins" / lang / "dist" / "build-report.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
