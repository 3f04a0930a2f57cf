"""state-probe (procedure): answers every call this instance has seen."""

from capgate_plugin import MISSING

# Every marker this instance has been handed; a fresh instance answers
# {"calls": 1, "seen": [its own marker]}.
_seen = []


def _record(marker):
    _seen.append(None if marker is MISSING else marker)
    return {"calls": len(_seen), "seen": list(_seen)}


def invoke(call):
    return _record(call.input.get("marker", MISSING) if isinstance(call.input, dict) else MISSING)
