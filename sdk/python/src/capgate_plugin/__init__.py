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


class PolicyRequest:
    """What ``evaluate`` receives. JSON fields are parsed with serde_json's number model.

    ``input``, ``context``, ``config`` and ``actor`` (its attributes) are parsed on first
    read. ``input_value(pointer)``, ``context_value``, ``config_value`` and ``attribute``
    read one value by JSON pointer (``MISSING`` when absent), ``input_text(pointer)`` its JSON
    text (a number's literal as the input spells it): inside the host they ask it
    (``capgate:plugin/request@0.3.0``) instead of parsing the document here; outside (unit
    tests) they read the parsed documents.
    """

    def __init__(self, phase: str, surface: str, capability: CapabilityInfo, actor: Actor, input: Any,
                 has_input: bool, context: Any, execution_id: str, approval: Optional[ApprovalRef], config: Any,
                 raw: Optional[RawJson] = None):
        """A request from parsed values (what unit tests build; the fields of SDK 0.2's
        dataclass, in its order). ``raw`` defaults to the values' JSON texts."""
        self.phase = phase  # discovery | invocation | execution
        self.surface = surface  # direct | aiSdk | mcp | workflow | test
        self.capability = capability
        self.execution_id = execution_id
        self.approval = approval
        self.raw = raw if raw is not None else RawJson(
            dumps(input) if has_input else None, dumps(context), dumps(config), dumps(actor.attributes))
        self._actor_id = actor.id
        self._actor_kind = actor.kind
        self._read = None
        self._parsed = {"input": input if has_input else MISSING, "context": context, "config": config,
                        "attributes": actor.attributes}

    @classmethod
    def from_wire(cls, phase: str, surface: str, capability: CapabilityInfo, actor_id: str, actor_kind: str,
                  execution_id: str, approval: Optional[ApprovalRef], raw: RawJson,
                  read: Any = None) -> "PolicyRequest":
        """A request from the JSON texts the host sent, each parsed on first read; ``read``
        (the host's ``get``, from the glue) answers the pointer helpers without parsing."""
        self = cls.__new__(cls)
        self.phase = phase
        self.surface = surface
        self.capability = capability
        self.execution_id = execution_id
        self.approval = approval
        self.raw = raw
        self._actor_id = actor_id
        self._actor_kind = actor_kind
        self._read = read
        self._parsed = {}
        return self

    def _doc(self, key: str, text: Optional[str], strict: bool = False) -> Any:
        if key not in self._parsed:
            if text is None:
                value = MISSING
            else:
                try:
                    value = parse_json(text)
                except ValueError as e:
                    if strict:
                        raise ValueError(f"invalid plugin config: {e}") from None
                    value = MISSING
            self._parsed[key] = value
        return self._parsed[key]

    @property
    def has_input(self) -> bool:
        """Whether an input came (not in discovery) and parses."""
        return self.raw.input is not None and self._doc("input", self.raw.input) is not MISSING

    @property
    def input(self) -> Any:
        """The validated input (None during discovery or when it does not parse)."""
        v = self._doc("input", self.raw.input)
        return None if v is MISSING else v

    @property
    def context(self) -> Any:
        """The context projection (None when none)."""
        v = self._doc("context", self.raw.context)
        return None if v is MISSING else v

    @property
    def config(self) -> Any:
        """This binding's config (raises ValueError when it does not parse)."""
        return self._doc("config", self.raw.config, strict=True)

    @property
    def actor(self) -> Actor:
        """The actor, its attributes parsed."""
        v = self._doc("attributes", self.raw.attributes)
        return Actor(self._actor_id, self._actor_kind, None if v is MISSING else v)

    def _value(self, doc: str, key: str, text: Optional[str], pointer: str) -> Any:
        if text is None:
            return MISSING
        if self._read is not None:
            return _from_host(self._read(doc, pointer))
        if key == "config":
            return get_pointer(self.config, pointer)
        v = self._doc(key, text)
        return MISSING if v is MISSING else get_pointer(v, pointer)

    def input_value(self, pointer: str) -> Any:
        """One input value by JSON pointer (``MISSING`` when absent or in discovery)."""
        return self._value("input", "input", self.raw.input, pointer)

    def input_text(self, pointer: str) -> Optional[str]:
        """The JSON text of one input value (None when absent)."""
        if self.raw.input is None:
            return None
        if self._read is not None:
            return _host_text(self._read("input", pointer))
        v = self.input_value(pointer)
        return None if v is MISSING else dumps(v)

    def context_value(self, pointer: str) -> Any:
        """One context value by JSON pointer (``MISSING`` when absent)."""
        return self._value("context", "context", self.raw.context, pointer)

    def config_value(self, pointer: str) -> Any:
        """One config value by JSON pointer (``MISSING`` when absent)."""
        return self._value("config", "config", self.raw.config, pointer)

    def attribute(self, pointer: str) -> Any:
        """One actor attribute by JSON pointer (``MISSING`` when absent)."""
        return self._value("actor-attributes", "attributes", self.raw.attributes, pointer)


def _from_host(v: Any) -> Any:
    """The host's ``option<value>`` (a ``(tag, text)`` pair from the glue) as a Python value."""
    if v is None:
        return MISSING
    tag, val = v
    if tag == "null":
        return None
    if tag == "boolean":
        return bool(val)
    if tag == "number":
        # The host spells numbers as serde_json prints them: an integer has no `.` or `e`.
        try:
            return int(val)
        except ValueError:
            return float(val)
    if tag == "json":
        return parse_json(val)
    return val


def _host_text(v: Any) -> Optional[str]:
    if v is None:
        return None
    tag, val = v
    if tag == "null":
        return "null"
    if tag == "boolean":
        return "true" if val else "false"
    if tag in ("number", "json"):
        return val
    return dumps(val)


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
