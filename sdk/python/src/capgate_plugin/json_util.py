"""JSON helpers that behave like the Rust host (serde_json).

`parse_json` yields the same value model as serde_json: integers that fit i64/u64 stay ``int``,
every other number (fractions, exponents, larger integers, ``-0``) is a ``float``; ``NaN`` and
``Infinity`` are rejected. `format_number` prints a number the way serde_json's ``Display``
does (``649``, ``649.0``, ``1e+300``), so reasons read the same in every language.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Optional

__all__ = ["parse_json", "dumps", "get_pointer", "pointer_tokens", "format_number", "format_double", "MISSING"]

_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


#: Returned by `get_pointer` when nothing is at the pointer (distinct from JSON ``null``).
MISSING: Any = _Missing()


def _parse_int(s: str):
    v = int(s)
    if s.startswith("-") and v == 0:
        return -0.0
    if _I64_MIN <= v <= _U64_MAX:
        return v
    return float(s)


def _reject_constant(name: str):
    raise ValueError(f"invalid JSON number {name}")


def parse_json(text: Optional[str]) -> Any:
    """Parse JSON text with serde_json's number model. Raises ``ValueError`` on invalid JSON."""
    if text is None:
        raise ValueError("no JSON text")
    return json.loads(text, parse_int=_parse_int, parse_constant=_reject_constant)


def dumps(value: Any) -> str:
    """Compact JSON text (UTF-8, no NaN)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def pointer_tokens(pointer: str) -> Optional[list]:
    """Split an RFC 6901 pointer into unescaped tokens; ``None`` when it is not a pointer."""
    if pointer == "":
        return []
    if not isinstance(pointer, str) or not pointer.startswith("/"):
        return None
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(token: str) -> Optional[int]:
    # serde_json: ASCII digits only, no sign, no leading zero.
    if not token or not all("0" <= c <= "9" for c in token):
        return None
    if token.startswith("0") and len(token) != 1:
        return None
    return int(token)


def get_pointer(value: Any, pointer: str) -> Any:
    """The value at a JSON pointer (``""`` is the whole document), or `MISSING`.

    Same semantics as serde_json's ``Value::pointer``.
    """
    tokens = pointer_tokens(pointer)
    if tokens is None:
        return MISSING
    cur = value
    for t in tokens:
        if isinstance(cur, list):
            i = _index(t)
            if i is None or i >= len(cur):
                return MISSING
            cur = cur[i]
        elif isinstance(cur, dict):
            if t not in cur:
                return MISSING
            cur = cur[t]
        else:
            return MISSING
    return cur


def format_number(n: Any) -> str:
    """A number printed as the Rust host prints it (serde_json ``Display``)."""
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        raise TypeError(f"not a JSON number: {n!r}")
    if isinstance(n, int):
        if _I64_MIN <= n <= _U64_MAX:
            return str(n)
        n = float(n)
    return format_double(n)


def format_double(x: float) -> str:
    """A double as serde_json prints it: plain for 1e-5 <= |x| < 1e16 (always with a fraction),
    else ``e+N`` / ``e-N``: ``649.0``, ``0.001``, ``1e+300``, ``1.5e-7``."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    sign = "-" if x < 0 else ""
    # repr() gives the shortest round-trip digits (nearest), as ryu does.
    _, digit_tuple, exponent = Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    length = len(digits)
    k = exponent
    kk = length + k  # 10^(kk-1) <= v < 10^kk
    if 0 <= k and kk <= 16:
        out = digits + "0" * k + ".0"
    elif 0 < kk <= 16:
        out = digits[:kk] + "." + digits[kk:]
    elif -5 < kk <= 0:
        out = "0." + "0" * (-kk) + digits
    else:
        e = kk - 1
        out = (digits if length == 1 else f"{digits[0]}.{digits[1:]}") + ("e" if e < 0 else "e+") + str(e)
    return sign + out
