"""capgate-plugin: write capgate policies, redactors and procedure adapters in Python.

Plain Python with no WIT imports, so plugin logic can be unit-tested with the ordinary
interpreter. ``capgate-py build`` (``capgate_plugin.build``) turns a module into a
WebAssembly component with componentize-py; ``capgate_plugin.host.log`` reaches the host's
tracing from inside a component.

A policy module defines ``evaluate(request: PolicyRequest) -> Decision``; a redactor module
``redact_output(capability, output, config)`` and/or ``redact_approval_input(...)``; a
procedure module ``invoke(call: ProcedureCall)`` and optionally ``check(config)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Union

from .json_util import MISSING, dumps, format_double, format_number, get_pointer, parse_json, pointer_tokens

__all__ = [
    "Allow", "Deny", "Hide", "RequireApproval", "Decision",
    "allow", "deny", "hide", "require_approval",
    "Actor", "CapabilityInfo", "ApprovalRef", "PolicyRequest", "RawJson", "ProcedureCall",
    "ProcedureError", "defined_error", "unauthorized", "forbidden", "internal",
    "parse_json", "dumps", "get_pointer", "pointer_tokens", "format_number", "format_double", "MISSING",
]

# ---- decisions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Allow:
    """Go ahead."""


@dataclass(frozen=True)
class Deny:
    """Refuse (POLICY_DENIED). ``message`` is public, ``code`` private (audit, logs)."""

    message: Optional[str] = None
    code: Optional[str] = None


@dataclass(frozen=True)
class Hide:
    """Conceal: the model is told the capability does not exist."""


@dataclass(frozen=True)
class RequireApproval:
    """Hold the call for a human."""

    reason: str
    approval_type: Optional[str] = None
    expires_in_ms: Optional[int] = None


Decision = Union[Allow, Deny, Hide, RequireApproval]


def allow() -> Allow:
    return Allow()


def deny(message: Optional[str] = None, code: Optional[str] = None) -> Deny:
    return Deny(None if message is None else str(message), None if code is None else str(code))


def hide() -> Hide:
    return Hide()


def require_approval(reason: str, type: Optional[str] = None, expires_in_ms: Optional[int] = None) -> RequireApproval:
    """``require_approval("Refund of $649 exceeds $500", type="manager", expires_in_ms=900_000)``."""
    if not isinstance(reason, str) or not reason:
        raise ValueError("require_approval: reason must be a non-empty string")
    if expires_in_ms is not None and (
        isinstance(expires_in_ms, bool) or not isinstance(expires_in_ms, int) or not 0 <= expires_in_ms < 1 << 64
    ):
        raise ValueError("require_approval: expires_in_ms must be a non-negative integer")
    return RequireApproval(reason, None if type is None else str(type), expires_in_ms)


# ---- requests -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CapabilityInfo:
    id: str
    side_effect: str  # none | read | write | destructive | external
    risk: str  # low | medium | high | critical
    tags: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class Actor:
    id: str
    kind: str  # user | service | agent | anonymous
    attributes: Any = None  # parsed JSON; None when none


@dataclass(frozen=True)
class ApprovalRef:
    id: str
    approver_id: str
    approver_kind: str


@dataclass(frozen=True)
class RawJson:
    """The JSON texts as the host sent them."""

    input: Optional[str]
    context: str
    config: str
    attributes: str


@dataclass(frozen=True)
class PolicyRequest:
    """What ``evaluate`` receives. JSON fields are parsed with serde_json's number model."""

    phase: str  # discovery | invocation | execution
    surface: str  # direct | aiSdk | mcp | workflow | test
    capability: CapabilityInfo
    actor: Actor
    input: Any  # None during discovery (see has_input)
    has_input: bool
    context: Any
    execution_id: str
    approval: Optional[ApprovalRef]
    config: Any
    raw: RawJson


@dataclass(frozen=True)
class ProcedureCall:
    capability: CapabilityInfo
    input: Any
    context: Any
    surface: str
    actor: Actor
    execution_id: str
    idempotency_key: str  # stable across runtime retries: pass it downstream
    attempt: int  # 1-based
    approval: Optional[ApprovalRef]
    config: Any


# ---- procedure errors ---------------------------------------------------------------------


class ProcedureError(Exception):
    """Raised by a procedure: one case of the WIT ``procedure-error`` variant."""

    def __init__(self, kind: str, message: str, code: Optional[str] = None, data: Any = MISSING, retryable: bool = False):
        super().__init__(message)
        self.kind = kind  # defined | unauthorized | forbidden | internal
        self.message = message
        self.code = code
        self.data = data
        self.retryable = retryable


def defined_error(code: str, message: str, data: Any = MISSING, retryable: bool = False) -> ProcedureError:
    """An intentional, contract-level failure the model may act on: ``raise defined_error(...)``."""
    return ProcedureError("defined", str(message), str(code), data, bool(retryable))


def unauthorized(message: str) -> ProcedureError:
    return ProcedureError("unauthorized", str(message))


def forbidden(message: str) -> ProcedureError:
    return ProcedureError("forbidden", str(message))


def internal(message: str) -> ProcedureError:
    return ProcedureError("internal", str(message))
