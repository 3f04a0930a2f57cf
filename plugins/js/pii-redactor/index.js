// pii-redactor (JavaScript): masks e-mail addresses, phone numbers and Luhn-valid card numbers
// found in any string (or integer) of a value, and drops or masks configured JSON paths.
//
// Config (every field optional, unknown keys are an error):
// {"paths": ["/gatewayRef", "/customer/*/email"], "pathAction": "drop" | "mask",
//  "mask": "[redacted]", "emails": true, "phones": true, "cards": true}.
// Found values become `[email]`, `[phone]` and `[card ••••1111]`. `*` in a path matches any key
// or index. The same rules apply to approval inputs shown to reviewers.
// A line-by-line port of plugins/pii-redactor (Rust); plugins/python/pii-redactor is the third.

import { ALNUM } from './alnum.js';

// The config this plugin takes: capgate-js build embeds it, and `capgate check` refuses a
// binding's config that does not match, at its key, before any call.
export const configSchema = {
  type: ['object', 'null'],
  properties: {
    paths: {
      type: 'array',
      description: 'JSON pointers to drop or mask; `*` matches any key or index.',
      items: { type: 'string', pattern: '^(/([^~/]|~[01])*)+$' },
    },
    pathAction: { enum: ['drop', 'mask'], default: 'drop' },
    mask: { type: 'string' },
    emails: { type: 'boolean', default: true },
    phones: { type: 'boolean', default: true },
    cards: { type: 'boolean', default: true },
  },
  additionalProperties: false,
};

const KEYS = new Set(['paths', 'pathAction', 'mask', 'emails', 'phones', 'cards']);

function readConfig(v) {
  if (v === null || v === undefined) v = {};
  if (typeof v !== 'object' || Array.isArray(v)) throw new Error('invalid pii-redactor config: expected an object');
  for (const k of Object.keys(v)) {
    if (!KEYS.has(k)) throw new Error(`invalid pii-redactor config: unknown field \`${k}\``);
  }
  const c = { paths: [], pathAction: 'drop', mask: '[redacted]', emails: true, phones: true, cards: true };
  if ('paths' in v) {
    if (!Array.isArray(v.paths) || !v.paths.every((p) => typeof p === 'string')) {
      throw new Error('invalid pii-redactor config: paths must be a list of strings');
    }
    c.paths = v.paths;
  }
  if ('pathAction' in v) {
    if (v.pathAction !== 'drop' && v.pathAction !== 'mask') {
      throw new Error('invalid pii-redactor config: pathAction must be "drop" or "mask"');
    }
    c.pathAction = v.pathAction;
  }
  if ('mask' in v) {
    if (typeof v.mask !== 'string') throw new Error('invalid pii-redactor config: mask must be a string');
    c.mask = v.mask;
  }
  for (const k of ['emails', 'phones', 'cards']) {
    if (k in v) {
      if (typeof v[k] !== 'boolean') throw new Error(`invalid pii-redactor config: ${k} must be a boolean`);
      c[k] = v[k];
    }
  }
  return c;
}

export function redactOutput(_capability, output, config) {
  return redact(output, readConfig(config));
}

export function redactApprovalInput(_capability, input, config) {
  return redact(input, readConfig(config));
}

function redact(value, config) {
  for (const path of config.paths) {
    const segments = path
      .split('/')
      .slice(1)
      .map((s) => s.replaceAll('~1', '/').replaceAll('~0', '~'));
    if (segments.length > 0) value = applyPath(value, segments, config);
  }
  return scrub(value, config);
}

// Rust's `usize::from_str`: ASCII digits with an optional leading '+'.
const USIZE = /^\+?[0-9]+$/;

function applyPath(value, segments, config) {
  const [head, ...rest] = segments;
  if (Array.isArray(value)) {
    let indices;
    if (head === '*') indices = [...value.keys()].reverse();
    else indices = USIZE.test(head) && Number(head) < value.length ? [Number(head)] : [];
    for (const i of indices) {
      if (rest.length === 0) {
        if (config.pathAction === 'drop') value.splice(i, 1);
        else value[i] = config.mask;
      } else {
        value[i] = applyPath(value[i], rest, config);
      }
    }
  } else if (value !== null && typeof value === 'object') {
    const keys = head === '*' ? Object.keys(value) : [head];
    for (const k of keys) {
      const has = Object.prototype.hasOwnProperty.call(value, k);
      if (rest.length === 0) {
        if (config.pathAction === 'drop') delete value[k];
        else if (has) value[k] = config.mask;
      } else if (has) {
        value[k] = applyPath(value[k], rest, config);
      }
    }
  }
  return value;
}

function scrub(value, config) {
  if (typeof value === 'string') return scrubText(value, config) ?? value;
  if (typeof value === 'number') {
    // serde_json's `as_u64`: a non-negative integer (exact in JavaScript up to 2^53).
    if (config.cards && Number.isSafeInteger(value) && value >= 0) {
      const digits = String(value);
      if (isCard(digits)) return cardMask(digits);
    }
    return value;
  }
  if (Array.isArray(value)) return value.map((v) => scrub(v, config));
  if (value !== null && typeof value === 'object') {
    for (const k of Object.keys(value)) value[k] = scrub(value[k], config);
  }
  return value;
}

/** The text with every finding replaced, or `undefined` when nothing was found. */
function scrubText(s, config) {
  const emails = config.emails ? replaceEmails(s) : undefined;
  const text = emails ?? s;
  const numbers = config.cards || config.phones ? replaceNumbers(text, config) : undefined;
  return numbers ?? emails;
}

// Rust `char::is_alphanumeric`: Alphabetic or Numeric (Nd, Nl, No). A table, because the
// component's SpiderMonkey has no ICU (no `\p{...}` in regular expressions).
function isAlphanumeric(c) {
  const cp = c.codePointAt(0);
  if (cp < 0x80) return isAsciiAlnum(c);
  let lo = 0;
  let hi = ALNUM.length / 2 - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (cp < ALNUM[2 * mid]) hi = mid - 1;
    else if (cp > ALNUM[2 * mid + 1]) lo = mid + 1;
    else return true;
  }
  return false;
}
const isAsciiDigit = (c) => c >= '0' && c <= '9';
const isAsciiAlpha = (c) => (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
const isAsciiAlnum = (c) => isAsciiDigit(c) || isAsciiAlpha(c);
const isLocal = (c) => isAsciiAlnum(c) || '._%+-'.includes(c);
const isDomain = (c) => isAsciiAlnum(c) || c === '.' || c === '-';

function replaceEmails(s) {
  const chars = Array.from(s); // Unicode scalar values, like Rust's chars()
  let out = '';
  let changed = false;
  let copied = 0;
  let i = 0;
  while (i < chars.length) {
    if (chars[i] === '@') {
      const span = emailSpan(chars, i);
      if (span && span[0] >= copied) {
        out += chars.slice(copied, span[0]).join('') + '[email]';
        copied = span[1];
        changed = true;
        i = span[1];
        continue;
      }
    }
    i += 1;
  }
  out += chars.slice(Math.min(copied, chars.length)).join('');
  return changed ? out : undefined;
}

function replaceNumbers(s, config) {
  const chars = Array.from(s);
  let out = '';
  let changed = false;
  let i = 0;
  while (i < chars.length) {
    const startsNumber = isAsciiDigit(chars[i]) || chars[i] === '+' || chars[i] === '(';
    const boundary = i === 0 || !isAlphanumeric(chars[i - 1]);
    if (startsNumber && boundary) {
      const span = numberSpan(chars, i);
      if (span) {
        const [end, digits] = span;
        const afterOk = end === chars.length || !isAlphanumeric(chars[end]);
        if (afterOk) {
          if (config.cards && isCard(digits)) {
            out += cardMask(digits);
            changed = true;
            i = end;
            continue;
          }
          const plus = chars[i] === '+';
          const n = digits.length;
          if (config.phones && ((plus && n >= 7 && n <= 15) || (n >= 10 && n <= 15))) {
            out += '[phone]';
            changed = true;
            i = end;
            continue;
          }
        }
      }
    }
    out += chars[i];
    i += 1;
  }
  return changed ? out : undefined;
}

/** `[start, end)` of an address around the `@` at `at`. */
function emailSpan(chars, at) {
  let start = at;
  while (start > 0 && isLocal(chars[start - 1])) start -= 1;
  let end = at + 1;
  while (end < chars.length && isDomain(chars[end])) end += 1;
  while (end > at + 1 && (chars[end - 1] === '.' || chars[end - 1] === '-')) end -= 1;
  const domain = chars.slice(at + 1, end).join('');
  const dot = domain.lastIndexOf('.');
  const tldOk = dot >= 0 && dot > 0 && domain.length - dot - 1 >= 2 && [...domain.slice(dot + 1)].every(isAsciiAlpha);
  return start < at && tldOk ? [start, end] : undefined;
}

/** A run of digits with the usual separators, from `i`: its end and its digits. */
function numberSpan(chars, i) {
  let end = i;
  let digits = '';
  let lastDigitEnd = i;
  if (chars[i] === '+' || chars[i] === '(') end += 1;
  while (end < chars.length) {
    const c = chars[end];
    if (isAsciiDigit(c)) {
      digits += c;
      end += 1;
      lastDigitEnd = end;
    } else if (' -.()'.includes(c) && end + 1 < chars.length) {
      end += 1;
    } else {
      break;
    }
    if (digits.length > 19) return undefined;
  }
  return digits.length >= 7 ? [lastDigitEnd, digits] : undefined;
}

function isCard(digits) {
  return digits.length >= 13 && digits.length <= 19 && luhn(digits);
}

function luhn(digits) {
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = digits.charCodeAt(digits.length - 1 - i) - 48;
    if (d < 0 || d > 9) return false;
    if (i % 2 === 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}

function cardMask(digits) {
  return `[card ••••${digits.slice(Math.max(0, digits.length - 4))}]`;
}
