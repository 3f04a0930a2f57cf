// JSON helpers that behave like the Rust host (serde_json), so that a plugin written in
// JavaScript reads and prints values exactly as its Rust twin does.
//
// Pure JavaScript: usable in node (unit tests) and inside the component.

/** Parse JSON text; `fallback` (default `undefined`) when the text is absent or invalid. */
export function parseJson(text, fallback = undefined) {
  if (typeof text !== 'string') return fallback;
  try {
    return JSON.parse(text);
  } catch {
    return fallback;
  }
}

/** Split an RFC 6901 pointer into unescaped tokens; `null` when it is not a pointer. */
export function pointerTokens(pointer) {
  if (pointer === '') return [];
  if (typeof pointer !== 'string' || !pointer.startsWith('/')) return null;
  return pointer
    .slice(1)
    .split('/')
    .map((t) => t.replaceAll('~1', '/').replaceAll('~0', '~'));
}

// serde_json's array index rule: digits only, no sign, no leading zero.
const INDEX = /^(0|[1-9][0-9]*)$/;

/**
 * The value at an RFC 6901 JSON pointer (`""` is the whole document), or `undefined`.
 * Same semantics as serde_json's `Value::pointer`.
 */
export function getPointer(value, pointer) {
  const tokens = pointerTokens(pointer);
  if (tokens === null) return undefined;
  let cur = value;
  for (const t of tokens) {
    if (Array.isArray(cur)) {
      if (!INDEX.test(t)) return undefined;
      const i = Number(t);
      if (i >= cur.length) return undefined;
      cur = cur[i];
    } else if (cur !== null && typeof cur === 'object') {
      if (!Object.prototype.hasOwnProperty.call(cur, t)) return undefined;
      cur = cur[t];
    } else {
      return undefined;
    }
  }
  return cur;
}

/**
 * The raw text of the JSON value at `pointer` inside the JSON document `text` (e.g. `"649.0"`),
 * or `undefined` when there is none or the text is not valid JSON. Use it where the literal
 * matters: numbers beyond 2^53, `649` versus `649.0`.
 */
export function rawJsonAt(text, pointer) {
  const tokens = pointerTokens(pointer);
  if (tokens === null || typeof text !== 'string') return undefined;
  let found;
  try {
    const end = scan(text, skipWs(text, 0), tokens, 0, (s, e) => (found = text.slice(s, e)));
    if (skipWs(text, end) !== text.length) return undefined;
  } catch {
    return undefined;
  }
  return found;
}

function skipWs(s, i) {
  while (i < s.length && (s[i] === ' ' || s[i] === '\n' || s[i] === '\r' || s[i] === '\t')) i++;
  return i;
}

function fail() {
  throw new SyntaxError('invalid JSON');
}

const NUMBER = /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;

// Scan one value at i; when tokens[depth..] is empty, report its span. Returns the end index.
function scan(s, i, tokens, depth, report) {
  const here = depth === tokens.length;
  const start = i;
  const c = s[i];
  let end;
  if (c === '{') {
    i = skipWs(s, i + 1);
    if (s[i] === '}') end = i + 1;
    while (end === undefined) {
      STRING.lastIndex = i;
      const m = STRING.exec(s) || fail();
      const key = JSON.parse(m[0]);
      i = skipWs(s, i + m[0].length);
      if (s[i] !== ':') fail();
      i = skipWs(s, i + 1);
      const descend = !here && tokens[depth] === key;
      i = skipWs(s, scan(s, i, tokens, descend ? depth + 1 : -1, report));
      if (s[i] === ',') i = skipWs(s, i + 1);
      else if (s[i] === '}') end = i + 1;
      else fail();
    }
  } else if (c === '[') {
    i = skipWs(s, i + 1);
    let index = 0;
    if (s[i] === ']') end = i + 1;
    while (end === undefined) {
      const descend = !here && depth >= 0 && INDEX.test(tokens[depth]) && Number(tokens[depth]) === index;
      i = skipWs(s, scan(s, i, tokens, descend ? depth + 1 : -1, report));
      index++;
      if (s[i] === ',') i = skipWs(s, i + 1);
      else if (s[i] === ']') end = i + 1;
      else fail();
    }
  } else if (c === '"') {
    STRING.lastIndex = i;
    const m = STRING.exec(s) || fail();
    end = i + m[0].length;
  } else if (s.startsWith('true', i)) end = i + 4;
  else if (s.startsWith('false', i)) end = i + 5;
  else if (s.startsWith('null', i)) end = i + 4;
  else {
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(s);
    if (!m || m[0].length === 0) fail();
    end = i + m[0].length;
  }
  if (here) report(start, end);
  return end;
}

const U64_MAX = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);

/**
 * Print a JSON number literal the way the Rust host prints it (serde_json's `Display`):
 * integers that fit u64/i64 as integers (`649`), every other number as the shortest
 * round-trip double in serde_json's layout (`649.0`, `1e+300`, `1.5e-7`, `0.001`).
 */
export function formatJsonNumber(literal) {
  const raw = String(literal).trim();
  // The common case, a small non-negative integer, is printed as written.
  if (/^(0|[1-9][0-9]{0,14})$/.test(raw)) return raw;
  if (/^-?[0-9]+$/.test(raw)) {
    const v = BigInt(raw);
    const negative = raw.startsWith('-');
    if (!negative && v <= U64_MAX) return v.toString();
    if (negative && v < 0n && v >= I64_MIN) return v.toString();
  }
  return formatDouble(Number(raw));
}

/**
 * A double as serde_json prints it: ryu's thresholds (plain notation for 1e-5 <= |x| < 1e16,
 * always with a fraction or exponent), `e+N` / `e-N` exponents: `649.0`, `1e+300`, `1.5e-7`.
 */
export function formatDouble(x) {
  if (!Number.isFinite(x)) return x > 0 ? 'inf' : x < 0 ? '-inf' : 'NaN';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const sign = x < 0 ? '-' : '';
  // Shortest round-trip digits from ECMAScript's Number::toString (nearest, like ryu).
  let s = String(Math.abs(x));
  let exp = 0;
  const e = s.indexOf('e');
  if (e >= 0) {
    exp = Number(s.slice(e + 1));
    s = s.slice(0, e);
  }
  const dot = s.indexOf('.');
  let digits = dot >= 0 ? s.slice(0, dot) + s.slice(dot + 1) : s;
  let pointPos = (dot >= 0 ? dot : s.length) + exp; // value = 0.digits * 10^pointPos
  const lead = digits.match(/^0*/)[0].length;
  digits = digits.slice(lead);
  pointPos -= lead;
  digits = digits.replace(/0+$/, '');
  const length = digits.length;
  const kk = pointPos; // 10^(kk-1) <= v < 10^kk
  const k = kk - length;
  let out;
  if (k >= 0 && kk <= 16) out = digits + '0'.repeat(k) + '.0';
  else if (kk > 0 && kk <= 16) out = digits.slice(0, kk) + '.' + digits.slice(kk);
  else if (kk > -5 && kk <= 0) out = '0.' + '0'.repeat(-kk) + digits;
  else {
    const e = kk - 1;
    out = (length === 1 ? digits : digits[0] + '.' + digits.slice(1)) + (e < 0 ? 'e' : 'e+') + e;
  }
  return sign + out;
}
