"""capgate-py: build a Python capgate plugin into a WebAssembly component (componentize-py).

    capgate-py build path/to/my_policy.py --world policy|redactor|procedure [-o out.wasm]
                     [--wit DIR] [--with-wasi] [--force] [--quiet]
    capgate-py bindings --world policy -o DIR     # the generated wit_world bindings, for editors

The module's directory (and this SDK) go on the Python path; componentize-py imports the
module while pre-initialising the component (its top level runs at build time and is
snapshotted). By default WASI is stubbed out (``--stub-wasi``): the component imports only
``capgate:plugin/host`` (and ``progress`` for procedures) — no files, clocks, sockets or
environment; ``print()`` and ``time.time()`` trap. ``--with-wasi`` keeps the WASI imports (the
host must then provide them).

Rebuilds are skipped when the output exists and its inputs (the module directory's ``.py``
files, this SDK, the WIT, the world, options, the componentize-py version) hash to the value
recorded in ``<out>.inputs``.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SDK_SRC = Path(__file__).resolve().parent.parent  # the directory holding capgate_plugin/

WORLDS = {
    "policy": ("policy-plugin", "Policy = _glue.policy_class(_author)\n"),
    "redactor": ("redactor-plugin", "Redactor = _glue.redactor_class(_author)\n"),
    "procedure": ("procedure-plugin", "Procedure, Health = _glue.procedure_classes(_author)\n"),
}


def find_wit(flag: str | None) -> Path:
    """--wit, $CAPGATE_WIT, the copy inside the package, or the repository's wit/."""
    here = Path(__file__).resolve().parent
    candidates = [flag, os.environ.get("CAPGATE_WIT"), here / "wit", SDK_SRC.parent.parent.parent / "wit"]
    for c in candidates:
        if c and Path(c).exists():
            return Path(c).resolve()
    raise SystemExit(f"capgate-py: capgate WIT not found (tried {[str(c) for c in candidates if c]}); pass --wit DIR")


def componentize_py() -> list[str]:
    exe = Path(sys.executable).parent / "componentize-py"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("componentize-py")
    if found:
        return [found]
    raise SystemExit("capgate-py: componentize-py not found; pip install componentize-py")


def tool_version(cmd: list[str]) -> str:
    return subprocess.run(cmd + ["--version"], capture_output=True, text=True).stdout.strip()


def digest_tree(h, root: Path, suffixes=(".py", ".wit", ".toml")) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in suffixes and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())


CONFIG_SCHEMA_SECTION = "capgate:config-schema"


def declared_config_schema(entry: Path):
    """The JSON Schema of the plugin's `config`, when the module declares one with a
    top-level `CONFIG_SCHEMA = {...}`: a literal (dicts, lists, strings, numbers, booleans,
    None), read from the source without running it. capgate checks every binding's config
    against it at load (`capgate check`), located at the key."""
    tree = ast.parse(entry.read_text(encoding="utf-8"), filename=str(entry))
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == "CONFIG_SCHEMA" for t in targets):
            continue
        try:
            schema = ast.literal_eval(value)
        except ValueError as e:
            raise SystemExit(f"capgate-py: {entry}:{node.lineno}: CONFIG_SCHEMA must be a literal ({e})")
        if not isinstance(schema, (dict, bool)):
            raise SystemExit(f"capgate-py: {entry}:{node.lineno}: CONFIG_SCHEMA must be a JSON Schema (a dict or a bool)")
        try:
            json.dumps(schema, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise SystemExit(f"capgate-py: {entry}:{node.lineno}: CONFIG_SCHEMA is not JSON ({e})")
        return schema
    return None


def with_custom_section(component: bytes, name: str, data: bytes) -> bytes:
    """The component with one more custom section at its end (allowed anywhere after the
    preamble): id 0, size, name, bytes."""

    def leb(n: int) -> bytes:
        out = bytearray()
        while True:
            b = n & 0x7F
            n >>= 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)

    encoded = name.encode()
    payload = leb(len(encoded)) + encoded + data
    return component + b"\x00" + leb(len(payload)) + payload


def build(entry: Path, world: str, out: Path, wit: Path, stub_wasi: bool, force: bool, quiet: bool) -> dict:
    if world not in WORLDS:
        raise SystemExit(f"capgate-py: unknown world {world!r} (policy, redactor, procedure)")
    entry = entry.resolve()
    if entry.suffix != ".py" or not entry.exists():
        raise SystemExit(f"capgate-py: {entry} is not a Python file")
    module = entry.stem
    if not module.isidentifier():
        raise SystemExit(f"capgate-py: {entry.name}: the module name must be a Python identifier")
    world_name, glue = WORLDS[world]
    tool = componentize_py()

    schema = declared_config_schema(entry)
    t0 = time.perf_counter()
    h = hashlib.sha256()
    h.update(f"{world}|{stub_wasi}|{module}|{tool_version(tool)}".encode())
    digest_tree(h, entry.parent)
    digest_tree(h, SDK_SRC / "capgate_plugin")
    digest_tree(h, wit)
    inputs = h.hexdigest()
    stamp = out.with_name(out.name + ".inputs")
    if not force and out.exists() and stamp.exists() and stamp.read_text().strip() == inputs:
        if not quiet:
            print(f"{out}: up to date ({out.stat().st_size / 1048576:.1f} MiB)")
        return {"out": out, "skipped": True, "bytes": out.stat().st_size, "seconds": time.perf_counter() - t0}

    with tempfile.TemporaryDirectory(prefix="capgate-py-") as work:
        work = Path(work)
        (work / "capgate_entry.py").write_text(
            "# generated by capgate-py build\n"
            f"import {module} as _author\n"
            "from capgate_plugin import _glue\n"
            f"{glue}"
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = work / "out.wasm"
        cmd = tool + ["-q", "-d", str(wit), "-w", world_name, "componentize"]
        if stub_wasi:
            cmd.append("--stub-wasi")
        cmd += ["-p", str(work), "-p", str(entry.parent), "-p", str(SDK_SRC), "-o", str(tmp_out), "capgate_entry"]
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        t1 = time.perf_counter()
        r = subprocess.run(cmd, cwd=work, env=env)
        if r.returncode != 0:
            raise SystemExit(f"capgate-py: componentize-py failed ({r.returncode})")
        seconds = time.perf_counter() - t1
        if schema is not None:
            tmp_out.write_bytes(
                with_custom_section(tmp_out.read_bytes(), CONFIG_SCHEMA_SECTION, json.dumps(schema).encode())
            )
        shutil.move(str(tmp_out), out)
    stamp.write_text(inputs + "\n")
    size = out.stat().st_size
    if not quiet:
        print(
            f"{out}: {size / 1048576:.1f} MiB, componentize {seconds:.1f} s "
            f"(world {world_name}, WASI: {'stubbed' if stub_wasi else 'imported'}, "
            f"config schema: {'declared' if schema is not None else 'none declared'})"
        )
    return {"out": out, "skipped": False, "bytes": size, "seconds": time.perf_counter() - t0}


def bindings(world: str, out: Path, wit: Path) -> None:
    world_name, _ = WORLDS[world]
    subprocess.run(componentize_py() + ["-d", str(wit), "-w", world_name, "bindings", str(out)], check=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="capgate-py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build a module into a component")
    b.add_argument("entry", type=Path)
    b.add_argument("--world", "-w", required=True, choices=sorted(WORLDS))
    b.add_argument("-o", "--out", type=Path)
    b.add_argument("--wit")
    b.add_argument("--with-wasi", action="store_true", help="keep WASI imports instead of stubbing them")
    b.add_argument("--force", action="store_true")
    b.add_argument("--quiet", "-q", action="store_true")
    g = sub.add_parser("bindings", help="write the generated wit_world bindings (for editors and type checkers)")
    g.add_argument("--world", "-w", required=True, choices=sorted(WORLDS))
    g.add_argument("-o", "--out", type=Path, required=True)
    g.add_argument("--wit")
    a = ap.parse_args(argv)
    wit = find_wit(a.wit)
    if a.cmd == "build":
        out = a.out or a.entry.resolve().parent / "dist" / f"{a.entry.stem}.wasm"
        build(a.entry, a.world, out.resolve(), wit, not a.with_wasi, a.force, a.quiet)
    else:
        bindings(a.world, a.out, wit)


if __name__ == "__main__":
    main()
