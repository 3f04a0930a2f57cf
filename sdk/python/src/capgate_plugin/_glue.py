"""Glue between an author's module and the WIT exports (generated bindings ``wit_world``).

``capgate-py build`` generates an entry module that calls these at import time, which
componentize-py runs while pre-initialising the component (the author's module is imported
and snapshotted then). Every failure inside a call becomes the WIT ``err`` string, so the
host fails closed with a reason and the instance stays usable.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

from . import (
    Actor, Allow, ApprovalRef, CapabilityInfo, Deny, Hide, PolicyRequest, ProcedureCall, ProcedureError,
    RawJson, RequireApproval, require_approval,
)
from .json_util import MISSING, dumps, parse_json

_SURFACES = {"DIRECT": "direct", "AI_SDK": "aiSdk", "MCP": "mcp", "WORKFLOW": "workflow", "TEST": "test"}


def _name(e: Any) -> str:
    return e.name.lower()


def _message(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _capability(c: Any) -> CapabilityInfo:
    return CapabilityInfo(c.id, _name(c.side_effect), _name(c.risk), list(c.tags))


def _or_none(text: str) -> Any:
    try:
        return parse_json(text)
    except ValueError:
        return None


def _actor(a: Any) -> Actor:
    return Actor(a.id, _name(a.kind), _or_none(a.attributes))


def _approval(a: Any):
    return None if a is None else ApprovalRef(a.id, a.approver_id, _name(a.approver_kind))


def policy_request(r: Any, read: Any = None) -> PolicyRequest:
    """WIT ``policy-request`` -> `PolicyRequest` (documents parsed on first read; ``read``,
    when given, answers the pointer helpers from the host)."""
    return PolicyRequest.from_wire(
        phase=_name(r.phase),
        surface=_SURFACES.get(r.surface.name, _name(r.surface)),
        capability=_capability(r.capability),
        actor_id=r.actor.id,
        actor_kind=_name(r.actor.kind),
        execution_id=r.execution_id,
        approval=_approval(r.approval),
        raw=RawJson(r.input, r.context, r.config, r.actor.attributes),
        read=read,
    )


def host_reader():
    """The host's ``capgate:plugin/request@0.3.0`` ``get`` as ``read(document, pointer)`` ->
    ``None`` or ``(tag, value)``; ``None`` when the component does not import it."""
    try:
        from wit_world.imports import request as _r  # type: ignore
    except ImportError:
        return None
    docs = {
        "input": _r.Document.INPUT,
        "context": _r.Document.CONTEXT,
        "actor-attributes": _r.Document.ACTOR_ATTRIBUTES,
        "config": _r.Document.CONFIG,
    }
    tags = {
        _r.Value_Null: "null",
        _r.Value_Boolean: "boolean",
        _r.Value_Number: "number",
        _r.Value_Text: "text",
        _r.Value_Json: "json",
    }

    def read(document: str, pointer: str):
        v = _r.get(docs[document], pointer)
        if v is None:
            return None
        return (tags[type(v)], getattr(v, "value", None))

    return read


def _find(author: Any, *names: str) -> Callable:
    for n in names:
        f = getattr(author, n, None)
        if callable(f):
            return f
    return None


def policy_class(author: Any):
    """The ``Policy`` export class for a module with ``evaluate(request)``."""
    from componentize_py_types import Err  # type: ignore
    from wit_world import exports  # type: ignore
    from wit_world.exports import policy as p  # type: ignore

    if hasattr(author, "Policy"):
        return author.Policy
    evaluate = _find(author, "evaluate")
    if evaluate is None:
        raise TypeError("a policy module must define evaluate(request)")

    def to_wit(d: Any):
        if isinstance(d, Allow):
            return p.Decision_Allow()
        if isinstance(d, Hide):
            return p.Decision_Hide()
        if isinstance(d, Deny):
            return p.Decision_Deny(p.Denial(code=d.code, message=d.message))
        if isinstance(d, RequireApproval):
            d = require_approval(d.reason, d.approval_type, d.expires_in_ms)  # re-validate
            return p.Decision_RequireApproval(
                p.ApprovalRequirement(reason=d.reason, approval_type=d.approval_type, expires_in_ms=d.expires_in_ms)
            )
        raise TypeError("evaluate must return allow(), deny(...), hide() or require_approval(...)")

    read = host_reader()

    class Policy(exports.Policy):
        def evaluate(self, request):
            try:
                return to_wit(evaluate(policy_request(request, read)))
            except Exception as e:  # noqa: BLE001 - every failure fails closed
                raise Err(f"policy failed: {_message(e)}")

    return Policy


def _parse_arg(text: str, what: str) -> Any:
    try:
        return parse_json(text)
    except ValueError as e:
        raise ValueError(f"host sent invalid JSON {what}: {e}") from None


def redactor_class(author: Any):
    """The ``Redactor`` export class for a module with ``redact_output`` and/or ``redact_approval_input``."""
    from componentize_py_types import Err  # type: ignore
    from wit_world import exports  # type: ignore

    if hasattr(author, "Redactor"):
        return author.Redactor
    out = _find(author, "redact_output", "redact_approval_input")
    inp = _find(author, "redact_approval_input", "redact_output")
    if out is None:
        raise TypeError("a redactor module must define redact_output(capability, output, config) and/or redact_approval_input(...)")

    def run(f: Callable, what: str, capability: Any, value: str, config: str) -> str:
        try:
            cfg = _parse_arg(config, "config")
            return dumps(f(_capability(capability), _parse_arg(value, "output" if what == "redact-output" else "input"), cfg))
        except Exception as e:  # noqa: BLE001
            raise Err(f"{what} failed: {_message(e)}")

    class Redactor(exports.Redactor):
        def redact_output(self, capability, output, config):
            return run(out, "redact-output", capability, output, config)

        def redact_approval_input(self, capability, input, config):
            return run(inp, "redact-approval-input", capability, input, config)

    return Redactor


def procedure_classes(author: Any):
    """The ``Procedure`` and ``Health`` export classes for a module with ``invoke(call)`` [+ ``check(config)``]."""
    from componentize_py_types import Err  # type: ignore
    from wit_world import exports  # type: ignore
    from wit_world.exports import procedure as pr  # type: ignore

    invoke = _find(author, "invoke")
    check = _find(author, "check")
    if invoke is None and not hasattr(author, "Procedure"):
        raise TypeError("a procedure module must define invoke(call)")

    def to_err(e: BaseException):
        if isinstance(e, ProcedureError):
            if e.kind == "defined":
                data = None if e.data is MISSING else dumps(e.data)
                return pr.ProcedureError_Defined(pr.DefinedError(e.code or "", e.message, data, e.retryable))
            if e.kind == "unauthorized":
                return pr.ProcedureError_Unauthorized(e.message)
            if e.kind == "forbidden":
                return pr.ProcedureError_Forbidden(e.message)
        return pr.ProcedureError_Internal(_message(e) if not isinstance(e, ProcedureError) else e.message)

    class Procedure(exports.Procedure):
        def invoke(self, call):
            try:
                c = ProcedureCall(
                    capability=_capability(call.capability),
                    input=_parse_arg(call.input, "input"),
                    context=_or_none(call.context),
                    surface=_SURFACES.get(call.surface.name, _name(call.surface)),
                    actor=_actor(call.actor),
                    execution_id=call.execution_id,
                    idempotency_key=call.idempotency_key,
                    attempt=call.attempt,
                    approval=_approval(call.approval),
                    config=_parse_arg(call.config, "config"),
                )
                return dumps(invoke(c))
            except Exception as e:  # noqa: BLE001
                raise Err(to_err(e))

    class Health(exports.Health):
        def check(self, config):
            if check is None:
                return None
            try:
                check(_parse_arg(config, "config"))
            except Exception as e:  # noqa: BLE001
                raise Err(f"unhealthy: {_message(e)}")
            return None

    return getattr(author, "Procedure", Procedure), getattr(author, "Health", Health)


def format_traceback() -> str:  # pragma: no cover - debugging aid
    return traceback.format_exc()
