"""state-probe (policy): denies with a code holding every call this instance has seen."""

from capgate_plugin import MISSING, deny, dumps

# Every marker this instance has been handed; a fresh instance answers
# {"calls": 1, "seen": [its own marker]}.
_seen = []


def _record(marker):
    _seen.append(None if marker is MISSING else marker)
    return {"calls": len(_seen), "seen": list(_seen)}


def evaluate(request):
    return deny("probe", code=dumps(_record(request.input_value("/marker"))))
