"""refund-limit (Python): require approval when an amount in the input exceeds a maximum.

Config: {"maxAmount": 500, "amountPath": "/amount", "approvalType": "manager",
"expiresInMs": 900000, "label": "Refund"}; only maxAmount is required, unknown keys are an
error. The reason reads "Refund of $649 exceeds $500", numbers printed as the Rust host prints
them. A missing or non-numeric amount is a policy error (fail closed), never an allow.
Same behaviour as plugins/refund-limit (Rust) and plugins/js/refund-limit.
"""

from capgate_plugin import MISSING, Decision, PolicyRequest, allow, format_number, require_approval

# The config this plugin takes: capgate-py build embeds it, and `capgate check` refuses a
# binding's config that does not match, at its key, before any call.
CONFIG_SCHEMA = {
    "type": "object",
    "properties": {
        "maxAmount": {"type": "number", "description": "Above this amount, the call needs approval."},
        "amountPath": {"type": "string", "pattern": "^(/([^~/]|~[01])*)+$", "default": "/amount"},
        "approvalType": {"type": "string", "minLength": 1},
        "expiresInMs": {"type": "integer", "minimum": 0},
        "label": {"type": "string", "default": "Refund"},
    },
    "required": ["maxAmount"],
    "additionalProperties": False,
}

KEYS = {"maxAmount", "amountPath", "approvalType", "expiresInMs", "label"}


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _config(c):
    if not isinstance(c, dict):
        raise ValueError("invalid plugin config: expected an object")
    for k in c:
        if k not in KEYS:
            raise ValueError(f"invalid plugin config: unknown field `{k}`")
    if not _is_number(c.get("maxAmount")):
        raise ValueError("invalid plugin config: maxAmount must be a number")

    def string(k, default):
        if k not in c:
            return default
        if not isinstance(c[k], str):
            raise ValueError(f"invalid plugin config: {k} must be a string")
        return c[k]

    approval_type = c.get("approvalType")
    if approval_type is not None and not isinstance(approval_type, str):
        raise ValueError("invalid plugin config: approvalType must be a string")
    expires = c.get("expiresInMs")
    if expires is not None and (isinstance(expires, bool) or not isinstance(expires, int) or not 0 <= expires < 1 << 64):
        raise ValueError("invalid plugin config: expiresInMs must be a non-negative integer")
    return c["maxAmount"], string("amountPath", "/amount"), string("label", "Refund"), approval_type, expires


# The checked config of the last config text seen: an instance serves one binding, so a
# pooled instance checks its config once, not on every call (a fresh one has no last).
_last = (None, None)


def _checked_config(request: PolicyRequest):
    global _last
    if _last[0] != request.raw.config:
        _last = (request.raw.config, _config(request.config))
    return _last[1]


def evaluate(request: PolicyRequest) -> Decision:
    max_amount, path, label, approval_type, expires = _checked_config(request)
    if request.phase == "discovery":
        return allow()
    # One value, read without parsing the input (the host answers it inside capgate).
    amount = request.input_value(path)
    if amount is MISSING:
        raise ValueError(f"input has no {path}")
    if not _is_number(amount):
        raise ValueError(f"{path} is not a number")
    if not float(amount) > float(max_amount):
        return allow()
    return require_approval(
        f"{label} of ${format_number(amount)} exceeds ${format_number(max_amount)}",
        type=approval_type,
        expires_in_ms=expires,
    )
