"""Host functions (capgate:plugin/host, capgate:plugin/progress).

Inside a component these call the host; outside (unit tests) they print to stderr, so the
same module runs in both places. Never ``print()`` in a plugin: components are built without
WASI (``--stub-wasi``), where writing to stdout traps.
"""

from __future__ import annotations

import sys
from typing import Any

from .json_util import dumps

_LEVELS = ("trace", "debug", "info", "warn", "error")


def log(level: str, message: str) -> None:
    """Write a log line into the host's tracing (capped in size and rate)."""
    if level not in _LEVELS:
        raise ValueError(f"log level must be one of {_LEVELS}")
    try:
        from wit_world.imports import host as _host  # type: ignore
    except ImportError:
        sys.stderr.write(f"[{level}] {message}\n")
        return
    _host.log(getattr(_host.LogLevel, level.upper()), str(message))


def report(value: Any) -> None:
    """Report progress (procedure-plugin world only): any JSON value."""
    try:
        from wit_world.imports import progress as _progress  # type: ignore
    except ImportError:
        sys.stderr.write(f"[progress] {dumps(value)}\n")
        return
    _progress.report(dumps(value))
