"""pii-redactor (Python): masks e-mail addresses, phone numbers and Luhn-valid card numbers
found in any string (or integer) of a value, and drops or masks configured JSON paths.

Config (every field optional, unknown keys are an error):
{"paths": ["/gatewayRef", "/customer/*/email"], "pathAction": "drop" | "mask",
 "mask": "[redacted]", "emails": true, "phones": true, "cards": true}.
Found values become ``[email]``, ``[phone]`` and ``[card ••••1111]``. ``*`` in a path matches any
key or index. The same rules apply to approval inputs shown to reviewers.
A line-by-line port of plugins/pii-redactor (Rust); plugins/js/pii-redactor is the third.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, List, Optional, Tuple

from alnum import ALNUM

# The config this plugin takes: capgate-py build embeds it, and `capgate check` refuses a
# binding's config that does not match, at its key, before any call.
CONFIG_SCHEMA = {
    "type": ["object", "null"],
    "properties": {
        "paths": {
            "type": "array",
            "description": "JSON pointers to drop or mask; `*` matches any key or index.",
            "items": {"type": "string", "pattern": "^(/([^~/]|~[01])*)+$"},
        },
        "pathAction": {"enum": ["drop", "mask"], "default": "drop"},
        "mask": {"type": "string"},
        "emails": {"type": "boolean", "default": True},
        "phones": {"type": "boolean", "default": True},
        "cards": {"type": "boolean", "default": True},
    },
    "additionalProperties": False,
}

KEYS = {"paths", "pathAction", "mask", "emails", "phones", "cards"}


class Config:
    def __init__(self, v: Any):
        if v is None:
            v = {}
        if not isinstance(v, dict):
            raise ValueError("invalid pii-redactor config: expected an object")
        for k in v:
            if k not in KEYS:
                raise ValueError(f"invalid pii-redactor config: unknown field `{k}`")
        self.paths: List[str] = v.get("paths", [])
        if not isinstance(self.paths, list) or not all(isinstance(p, str) for p in self.paths):
            raise ValueError("invalid pii-redactor config: paths must be a list of strings")
        self.path_action = v.get("pathAction", "drop")
        if self.path_action not in ("drop", "mask") or not isinstance(self.path_action, str):
            raise ValueError('invalid pii-redactor config: pathAction must be "drop" or "mask"')
        self.mask = v.get("mask", "[redacted]")
        if not isinstance(self.mask, str):
            raise ValueError("invalid pii-redactor config: mask must be a string")
        for k in ("emails", "phones", "cards"):
            val = v.get(k, True)
            if not isinstance(val, bool):
                raise ValueError(f"invalid pii-redactor config: {k} must be a boolean")
            setattr(self, k, val)


def redact_output(capability, output: Any, config: Any) -> Any:
    return redact(output, Config(config))


def redact_approval_input(capability, input: Any, config: Any) -> Any:
    return redact(input, Config(config))


def redact(value: Any, config: Config) -> Any:
    for path in config.paths:
        segments = [s.replace("~1", "/").replace("~0", "~") for s in path.split("/")[1:]]
        if segments:
            value = apply_path(value, segments, config)
    return scrub(value, config)


def _usize(s: str) -> Optional[int]:
    # Rust's usize::from_str: ASCII digits with an optional leading '+'.
    body = s[1:] if s.startswith("+") else s
    if body and all("0" <= c <= "9" for c in body):
        return int(body)
    return None


def apply_path(value: Any, segments: List[str], config: Config) -> Any:
    head, rest = segments[0], segments[1:]
    if isinstance(value, dict):
        keys = list(value.keys()) if head == "*" else [head]
        for k in keys:
            if not rest:
                if config.path_action == "drop":
                    value.pop(k, None)
                elif k in value:
                    value[k] = config.mask
            elif k in value:
                value[k] = apply_path(value[k], rest, config)
    elif isinstance(value, list):
        if head == "*":
            indices = list(range(len(value) - 1, -1, -1))
        else:
            i = _usize(head)
            indices = [i] if i is not None and i < len(value) else []
        for i in indices:
            if not rest:
                if config.path_action == "drop":
                    del value[i]
                else:
                    value[i] = config.mask
            else:
                value[i] = apply_path(value[i], rest, config)
    return value


def scrub(value: Any, config: Config) -> Any:
    if isinstance(value, str):
        clean = scrub_text(value, config)
        return value if clean is None else clean
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        # serde_json's as_u64: a non-negative integer literal within u64.
        if config.cards and 0 <= value < 1 << 64:
            digits = str(value)
            if is_card(digits):
                return card_mask(digits)
        return value
    if isinstance(value, list):
        return [scrub(v, config) for v in value]
    if isinstance(value, dict):
        return {k: scrub(v, config) for k, v in value.items()}
    return value


def scrub_text(s: str, config: Config) -> Optional[str]:
    """The text with every finding replaced, or ``None`` when nothing was found."""
    emails = replace_emails(s) if config.emails else None
    text = s if emails is None else emails
    numbers = replace_numbers(text, config) if (config.cards or config.phones) else None
    return numbers if numbers is not None else emails


def _alnum(c: str) -> bool:
    """Rust char::is_alphanumeric (str.isalnum() misses Other_Alphabetic marks: use the table)."""
    cp = ord(c)
    if cp < 0x80:
        return c.isascii() and c.isalnum()
    i = bisect_right(ALNUM, cp)
    # ALNUM is a flat list of inclusive [start, end] pairs: inside a pair when i is odd, or on an end.
    return i % 2 == 1 or (i > 0 and ALNUM[i - 1] == cp)


def _ascii_digit(c: str) -> bool:
    return "0" <= c <= "9"


def _ascii_alpha(c: str) -> bool:
    return "a" <= c <= "z" or "A" <= c <= "Z"


def _is_local(c: str) -> bool:
    return _ascii_digit(c) or _ascii_alpha(c) or c in "._%+-"


def _is_domain(c: str) -> bool:
    return _ascii_digit(c) or _ascii_alpha(c) or c in ".-"


def replace_emails(s: str) -> Optional[str]:
    chars = s  # Python strings index by code point, like Rust's chars()
    out: List[str] = []
    changed = False
    copied = 0
    i = 0
    while i < len(chars):
        if chars[i] == "@":
            span = email_span(chars, i)
            if span is not None and span[0] >= copied:
                out.append(chars[copied:span[0]])
                out.append("[email]")
                copied = span[1]
                changed = True
                i = span[1]
                continue
        i += 1
    out.append(chars[min(copied, len(chars)):])
    return "".join(out) if changed else None


def replace_numbers(s: str, config: Config) -> Optional[str]:
    chars = s
    out: List[str] = []
    changed = False
    i = 0
    while i < len(chars):
        starts_number = _ascii_digit(chars[i]) or chars[i] in "+("
        boundary = i == 0 or not _alnum(chars[i - 1])
        if starts_number and boundary:
            span = number_span(chars, i)
            if span is not None:
                end, digits = span
                after_ok = end == len(chars) or not _alnum(chars[end])
                if after_ok:
                    if config.cards and is_card(digits):
                        out.append(card_mask(digits))
                        changed = True
                        i = end
                        continue
                    plus = chars[i] == "+"
                    n = len(digits)
                    if config.phones and ((plus and 7 <= n <= 15) or 10 <= n <= 15):
                        out.append("[phone]")
                        changed = True
                        i = end
                        continue
        out.append(chars[i])
        i += 1
    return "".join(out) if changed else None


def email_span(chars: str, at: int) -> Optional[Tuple[int, int]]:
    """``[start, end)`` of an address around the ``@`` at ``at``."""
    start = at
    while start > 0 and _is_local(chars[start - 1]):
        start -= 1
    end = at + 1
    while end < len(chars) and _is_domain(chars[end]):
        end += 1
    while end > at + 1 and chars[end - 1] in ".-":
        end -= 1
    domain = chars[at + 1:end]
    host, dot, tld = domain.rpartition(".")
    tld_ok = bool(dot) and host != "" and len(tld) >= 2 and all(_ascii_alpha(c) for c in tld)
    return (start, end) if start < at and tld_ok else None


def number_span(chars: str, i: int) -> Optional[Tuple[int, str]]:
    """A run of digits with the usual separators, from ``i``: its end and its digits."""
    end = i
    digits: List[str] = []
    last_digit_end = i
    if chars[i] in "+(":
        end += 1
    while end < len(chars):
        c = chars[end]
        if _ascii_digit(c):
            digits.append(c)
            end += 1
            last_digit_end = end
        elif c in " -.()" and end + 1 < len(chars):
            end += 1
        else:
            break
        if len(digits) > 19:
            return None
    return (last_digit_end, "".join(digits)) if len(digits) >= 7 else None


def is_card(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and luhn(digits)


def luhn(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        if not _ascii_digit(c):
            return False
        d = ord(c) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def card_mask(digits: str) -> str:
    return f"[card ••••{digits[max(0, len(digits) - 4):]}]"
