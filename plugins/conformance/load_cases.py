"""Load a conformance case file (plugins/conformance/README.md) into normalised cases.

    python3 plugins/conformance/load_cases.py refund-limit.toml   # prints JSON

The reference reading of the format, used by sdk/js/tools/conformance-smoke.mjs: defaults
merged, every JSON value turned into the exact text the host hands a plugin (serde_json's
`to_string`: integers as integers, floats in ryu's layout, keys sorted).
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "sdk" / "python" / "src"))
from capgate_plugin.json_util import format_double, parse_json  # noqa: E402

WORLDS = ("policy", "redactor-output", "redactor-approval-input")
DECISIONS = ("allow", "deny", "hide", "require-approval", "error")
SURFACES = ("direct", "aiSdk", "mcp", "workflow", "test")
PHASES = ("discovery", "invocation", "execution")


def serde_dumps(v) -> str:
    """JSON text as serde_json::to_string prints a Value (BTreeMap: keys sorted)."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("JSON has no NaN or infinity")
        return format_double(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(serde_dumps(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + serde_dumps(v[k]) for k in sorted(v)) + "}"
    raise ValueError(f"not a JSON value: {v!r} (TOML dates and times are not allowed)")


def json_field(table: dict, key: str, where: str):
    """`key` (a TOML value) or `key_json` (JSON text) -> JSON text, or None when neither is given."""
    if key in table and f"{key}_json" in table:
        raise ValueError(f"{where}: both {key} and {key}_json")
    if f"{key}_json" in table:
        return serde_dumps(parse_json(table[f"{key}_json"]))
    if key in table:
        return serde_dumps(table[key])
    return None


def merge(defaults: dict, case: dict) -> dict:
    out = dict(defaults)
    for k, v in case.items():
        base = k[:-5] if k.endswith("_json") else k
        out.pop(base, None)
        out.pop(base + "_json", None)
        out[k] = v
    return out


def load(path: str) -> list:
    doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    defaults = doc.get("defaults", {})
    names = set()
    cases = []
    for i, raw in enumerate(doc.get("case", [])):
        where = f"{path}: case {i + 1}"
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: name is required")
        if name in names:
            raise ValueError(f"{where}: duplicate name {name!r}")
        names.add(name)
        where = f"{path}: {name!r}"
        c = merge({k: v for k, v in defaults.items() if k != "request"}, {k: v for k, v in raw.items() if k not in ("request", "expect")})
        req = merge(defaults.get("request", {}), raw.get("request", {}))
        world = c.get("world", "policy")
        if world not in WORLDS:
            raise ValueError(f"{where}: world must be one of {WORLDS}")
        config = json_field(c, "config", where) or "null"
        expect = raw.get("expect")
        if not isinstance(expect, dict):
            raise ValueError(f"{where}: [case.expect] is required")
        out = {"name": name, "world": world, "config": config}
        cap = req.get("capability", {})
        out["capability"] = {
            "id": cap.get("id", "test.capability"),
            "sideEffect": cap.get("sideEffect", "none"),
            "risk": cap.get("risk", "low"),
            "tags": list(cap.get("tags", [])),
        }
        if world == "policy":
            phase = req.get("phase", "invocation")
            surface = req.get("surface", "test")
            if phase not in PHASES or surface not in SURFACES:
                raise ValueError(f"{where}: bad phase or surface")
            actor = req.get("actor", {"id": "u_test", "kind": "user"})
            approval = req.get("approval")
            out["request"] = {
                "phase": phase,
                "surface": surface,
                "actor": {
                    "id": actor.get("id", "u_test"),
                    "kind": actor.get("kind", "user"),
                    "attributes": json_field(actor, "attributes", where) or "null",
                },
                "input": json_field(req, "input", where),
                "context": json_field(req, "context", where) or "null",
                "executionId": req.get("executionId", "" if phase == "discovery" else "exe_conformance"),
                "approval": approval,
            }
            d = expect.get("decision")
            if d not in DECISIONS:
                raise ValueError(f"{where}: expect.decision must be one of {DECISIONS}")
            out["expect"] = {k: expect[k] for k in ("decision", "reason", "approvalType", "expiresInMs", "message", "code") if k in expect}
        else:
            value = json_field(req, "value", where)
            if value is None:
                raise ValueError(f"{where}: request.value (or value_json) is required")
            out["value"] = value
            if expect.get("error") is True:
                out["expect"] = {"error": True}
            else:
                text = json_field(expect, "output", where)
                if text is None:
                    raise ValueError(f"{where}: expect.output, expect.output_json or expect.error = true")
                out["expect"] = {"output": text}
        cases.append(out)
    return cases


if __name__ == "__main__":
    print(json.dumps(load(sys.argv[1]), ensure_ascii=False))
