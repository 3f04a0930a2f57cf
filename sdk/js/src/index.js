// @capgate/plugin-sdk: helpers for capgate plugins written in JavaScript or TypeScript.
//
// This module is plain JavaScript with no WIT imports, so plugin logic can be unit-tested
// in node. Host functions live in `@capgate/plugin-sdk/host` (log) and
// `@capgate/plugin-sdk/progress` (report), which only resolve inside a component.

import { getPointer, rawJsonAt } from './json.js';

export { parseJson, getPointer, rawJsonAt, pointerTokens, formatJsonNumber, formatDouble } from './json.js';

// ---- policy decisions -------------------------------------------------------------------

/** Go ahead. */
export function allow() {
  return { tag: 'allow' };
}

/**
 * Refuse (POLICY_DENIED). `deny("Not your order")` or
 * `deny({ message: "Not your order", code: "ORG_MISMATCH" })`: the message is public (the model
 * may see it), the code is private (audit and logs).
 */
export function deny(messageOrDenial) {
  const d = typeof messageOrDenial === 'object' && messageOrDenial !== null ? messageOrDenial : { message: messageOrDenial };
  const val = {};
  if (d.message !== undefined && d.message !== null) val.message = String(d.message);
  if (d.code !== undefined && d.code !== null) val.code = String(d.code);
  return { tag: 'deny', val };
}

/** Conceal: the model is told the capability does not exist. */
export function hide() {
  return { tag: 'hide' };
}

/**
 * Hold the call for a human.
 * `requireApproval({ reason: "Refund of $649 exceeds $500", type: "manager", expiresInMs: 900000 })`;
 * `reason` is required and non-empty; `expiresInMs` is a non-negative integer (number or bigint).
 */
export function requireApproval({ reason, type, approvalType, expiresInMs } = {}) {
  if (typeof reason !== 'string' || reason.length === 0) {
    throw new TypeError('requireApproval: reason must be a non-empty string');
  }
  const val = { reason };
  const t = type ?? approvalType;
  if (t !== undefined && t !== null) val.approvalType = String(t);
  if (expiresInMs !== undefined && expiresInMs !== null) val.expiresInMs = toU64(expiresInMs, 'expiresInMs');
  return { tag: 'require-approval', val };
}

function toU64(v, what) {
  if (typeof v === 'bigint') {
    if (v >= 0n && v < 1n << 64n) return v;
  } else if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) {
    return BigInt(v);
  }
  throw new TypeError(`${what} must be a non-negative integer`);
}

// ---- procedure errors -------------------------------------------------------------------

/** Thrown by a procedure: carries one case of the WIT `procedure-error` variant. */
export class ProcedureError extends Error {
  constructor(tag, val, message) {
    super(message);
    this.name = 'ProcedureError';
    this.tag = tag;
    this.val = val;
  }
}

/** An intentional, contract-level failure the model may act on: `throw definedError({...})`. */
export function definedError({ code, message, data, retryable = false }) {
  const val = { code: String(code), message: String(message), retryable: Boolean(retryable) };
  if (data !== undefined) val.data = JSON.stringify(data);
  return new ProcedureError('defined', val, message);
}

/** UNAUTHENTICATED. */
export function unauthorized(message) {
  return new ProcedureError('unauthorized', String(message), message);
}

/** FORBIDDEN. */
export function forbidden(message) {
  return new ProcedureError('forbidden', String(message), message);
}

/** EXECUTION_FAILED, hidden from the model. */
export function internal(message) {
  return new ProcedureError('internal', String(message), message);
}

// ---- WIT values <-> friendly values -----------------------------------------------------

const SURFACES = { direct: 'direct', 'ai-sdk': 'aiSdk', mcp: 'mcp', workflow: 'workflow', test: 'test' };

/** WIT surface (`ai-sdk`) -> the spec's spelling (`aiSdk`). */
export function surfaceName(witSurface) {
  return SURFACES[witSurface] ?? witSurface;
}

/** The WIT capability-info record, as is (`{ id, sideEffect, risk, tags }`). */
export function capabilityInfo(c) {
  return { id: c.id, sideEffect: c.sideEffect, risk: c.risk, tags: [...(c.tags ?? [])] };
}

/**
 * Turn the WIT `policy-request` into the object a policy's `evaluate` receives: JSON fields
 * parsed on first read (`input` is `undefined` in discovery or when unparsable, `context` and
 * `actor.attributes` are `null` when absent or unparsable; reading an unparsable `config`
 * throws), the surface in the spec's spelling, and the original JSON texts under `raw`.
 *
 * `inputValue(pointer)`, `contextValue`, `configValue` and `attribute` read one value by JSON
 * pointer, and `inputText(pointer)` its JSON text (a number's literal exactly as the input
 * spells it). Inside the host they ask it (`capgate:plugin/request@0.3.0`, passed as `read`
 * by the component glue) instead of parsing the whole document; in node they read the parsed
 * documents, so the same plugin logic runs in unit tests.
 */
export function policyRequest(req, read) {
  return new PolicyRequest(req, read);
}

/** The WIT `request.document` of each document. */
const HOST_DOCS = { input: 'input', context: 'context', attributes: 'actor-attributes', config: 'config' };

const NOT_PARSED = Symbol('not parsed');

/**
 * A policy request. The documents and the capability are built on first read, through getters
 * on the prototype, so a call that reads one value pays for nothing else: in a component this
 * code runs in an interpreter, where every property defined per call costs.
 */
class PolicyRequest {
  constructor(req, read) {
    this.phase = req.phase;
    this.surface = surfaceName(req.surface);
    this.executionId = req.executionId;
    this.approval = req.approval ? { ...req.approval } : undefined;
    this.raw = {
      input: req.input ?? undefined,
      context: req.context,
      config: req.config,
      attributes: req.actor.attributes,
    };
    this._req = req;
    this._read = read;
    this._input = NOT_PARSED;
    this._context = NOT_PARSED;
    this._config = NOT_PARSED;
    this._actor = undefined;
    this._capability = undefined;
    // The host's last answer, so `inputText` after `inputValue` at one pointer asks once.
    this._lastPointer = undefined;
    this._lastAnswer = undefined;
  }

  get capability() {
    return (this._capability ??= capabilityInfo(this._req.capability));
  }

  get actor() {
    if (this._actor === undefined) {
      const a = this._req.actor;
      let attributes = NOT_PARSED;
      const raw = this.raw;
      this._actor = {
        id: a.id,
        kind: a.kind,
        get attributes() {
          if (attributes === NOT_PARSED) attributes = parseJsonOrNull(raw.attributes);
          return attributes;
        },
      };
    }
    return this._actor;
  }

  get input() {
    if (this._input === NOT_PARSED) {
      this._input = this.raw.input === undefined ? undefined : parseJsonOr(this.raw.input, undefined);
    }
    return this._input;
  }

  get context() {
    if (this._context === NOT_PARSED) this._context = parseJsonOrNull(this.raw.context);
    return this._context;
  }

  get config() {
    if (this._config === NOT_PARSED) {
      try {
        this._config = JSON.parse(this.raw.config);
      } catch (e) {
        throw `invalid plugin config: ${e && e.message ? e.message : e}`;
      }
    }
    return this._config;
  }

  _ask(doc, pointer) {
    if (doc === 'input') {
      if (this._lastPointer === pointer) return this._lastAnswer;
      const answer = this._read('input', pointer);
      this._lastPointer = pointer;
      this._lastAnswer = answer;
      return answer;
    }
    return this._read(HOST_DOCS[doc], pointer);
  }

  // Inside a component every helper asks the host. Measured there (pooled refund-limit, one
  // sitting): a host read costs ~14 µs; parsing a 40-byte input with JSON.parse ~2 µs, but
  // the pointer walk and the literal scan (getPointer, rawJsonAt) run in the interpreter and
  // together cost more than the host read, and JSON.parse grows to ~8 µs at 1 KiB, ~31 µs
  // at 4 KiB.
  _value(doc, pointer) {
    if (this._read) return fromHost(this._ask(doc, pointer));
    const d = doc === 'attributes' ? this.actor.attributes : this[doc];
    return d === undefined ? undefined : getPointer(d, pointer);
  }

  inputValue(pointer) {
    return this.raw.input === undefined ? undefined : this._value('input', pointer);
  }

  inputText(pointer) {
    if (this.raw.input === undefined) return undefined;
    if (this._read) return hostText(this._ask('input', pointer));
    return rawJsonAt(this.raw.input, pointer);
  }

  contextValue(pointer) {
    return this._value('context', pointer);
  }

  configValue(pointer) {
    return this._value('config', pointer);
  }

  attribute(pointer) {
    return this._value('attributes', pointer);
  }

  /** The request as plain data (parsing every document), e.g. for `JSON.stringify`. */
  toJSON() {
    return {
      phase: this.phase,
      surface: this.surface,
      capability: this.capability,
      actor: { id: this.actor.id, kind: this.actor.kind, attributes: this.actor.attributes },
      input: this.input,
      context: this.context,
      executionId: this.executionId,
      approval: this.approval,
      config: this.config,
    };
  }
}

/** The host's `option<value>` as a JS value (`undefined` when nothing is there). */
function fromHost(v) {
  if (v === undefined || v === null) return undefined;
  switch (v.tag) {
    case 'null':
      return null;
    case 'boolean':
      return v.val;
    case 'number':
      return Number(v.val);
    case 'text':
      return v.val;
    case 'json':
      return JSON.parse(v.val);
    default:
      return undefined;
  }
}

/** The host's `option<value>` as JSON text (a number as its literal). */
function hostText(v) {
  if (v === undefined || v === null) return undefined;
  switch (v.tag) {
    case 'null':
      return 'null';
    case 'boolean':
      return v.val ? 'true' : 'false';
    case 'number':
    case 'json':
      return v.val;
    case 'text':
      return JSON.stringify(v.val);
    default:
      return undefined;
  }
}

function parseJsonOr(text, fallback) {
  try {
    return JSON.parse(text);
  } catch {
    return fallback;
  }
}

function parseJsonOrNull(text) {
  return parseJsonOr(text, null);
}
