"""state-probe (redactor): replaces the output by every call this instance has seen."""

from capgate_plugin import MISSING

# Every marker this instance has been handed; a fresh instance answers
# {"calls": 1, "seen": [its own marker]}.
_seen = []


def _record(marker):
    _seen.append(None if marker is MISSING else marker)
    return {"calls": len(_seen), "seen": list(_seen)}


def redact_output(capability, output, config):
    return _record(output.get("marker", MISSING) if isinstance(output, dict) else MISSING)
