// Glue between an author's module and the WIT exports. `capgate-js build` generates an entry
// module that imports the author's module and exports `wrapPolicy(author)` as `policy`, etc.
//
// Every failure inside a call becomes the WIT `err` string (a policy failure: the host fails
// closed) instead of a trap, so the instance stays usable and the host gets a reason.

import { policyRequest, capabilityInfo, surfaceName, ProcedureError, requireApproval, deny } from './index.js';

function message(e) {
  if (typeof e === 'string') return e;
  if (e && typeof e.message === 'string') return e.name && e.name !== 'Error' ? `${e.name}: ${e.message}` : e.message;
  try {
    return String(e);
  } catch {
    return 'plugin failed';
  }
}

/** Run `f`; any exception becomes a thrown string (the WIT `err` case). */
function guarded(what, f) {
  try {
    return f();
  } catch (e) {
    throw `${what}: ${message(e)}`;
  }
}

function toJson(value, what) {
  if (value === undefined) throw new TypeError(`${what} returned undefined (return null for JSON null)`);
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`${what} returned a value that is not JSON`);
  return text;
}

/** Check and normalise a decision returned by an author's `evaluate`. */
export function checkDecision(d) {
  if (d === null || typeof d !== 'object' || typeof d.tag !== 'string') {
    throw new TypeError('evaluate must return allow(), deny(...), hide() or requireApproval({...})');
  }
  switch (d.tag) {
    case 'allow':
    case 'hide':
      return { tag: d.tag };
    case 'deny':
      return deny(d.val ?? {});
    case 'require-approval':
      return requireApproval(d.val ?? {});
    default:
      throw new TypeError(`unknown decision "${d.tag}"`);
  }
}

/**
 * The `capgate:plugin/policy` export for an author module with `evaluate(request)`. `read` is
 * the host's `capgate:plugin/request@0.3.0` `get` (the policy world's entry module imports it),
 * which the request's `inputValue`, `configValue`, ... helpers ask instead of parsing.
 */
export function wrapPolicy(author, read) {
  if (author.policy && typeof author.policy.evaluate === 'function') return author.policy;
  const evaluate = author.evaluate ?? author.default?.evaluate ?? (typeof author.default === 'function' ? author.default : undefined);
  if (typeof evaluate !== 'function') throw new Error('a policy module must export function evaluate(request)');
  return {
    evaluate(req) {
      return guarded('policy failed', () => checkDecision(evaluate(policyRequest(req, read))));
    },
  };
}

function parseArg(text, what) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`host sent invalid JSON ${what}: ${message(e)}`);
  }
}

/**
 * The `capgate:plugin/redactor` export for an author module with
 * `redactOutput(capability, output, config)` and/or `redactApprovalInput(capability, input, config)`.
 * A module with only one of them uses it for both.
 */
export function wrapRedactor(author) {
  if (author.redactor && typeof author.redactor.redactOutput === 'function') return author.redactor;
  const out = author.redactOutput ?? author.redactApprovalInput;
  const inp = author.redactApprovalInput ?? author.redactOutput;
  if (typeof out !== 'function') {
    throw new Error('a redactor module must export redactOutput(capability, output, config) and/or redactApprovalInput(...)');
  }
  const run = (f, what) => (capability, value, config) =>
    guarded(`${what} failed`, () => {
      const cfg = config === '' ? null : parseArg(config, 'config');
      return toJson(f(capabilityInfo(capability), parseArg(value, what === 'redact-output' ? 'output' : 'input'), cfg), what);
    });
  return {
    redactOutput: run(out, 'redact-output'),
    redactApprovalInput: run(inp, 'redact-approval-input'),
  };
}

function procedureCall(c) {
  return {
    capability: capabilityInfo(c.capability),
    input: parseArg(c.input, 'input'),
    context: (() => {
      try {
        return JSON.parse(c.context);
      } catch {
        return null;
      }
    })(),
    surface: surfaceName(c.surface),
    actor: { id: c.actor.id, kind: c.actor.kind, attributes: (() => { try { return JSON.parse(c.actor.attributes); } catch { return null; } })() },
    executionId: c.executionId,
    idempotencyKey: c.idempotencyKey,
    attempt: c.attempt,
    approval: c.approval ? { ...c.approval } : undefined,
    config: parseArg(c.config, 'config'),
  };
}

/** Thrown procedure errors -> the WIT `procedure-error` variant (unknown errors are `internal`). */
function procedureError(e) {
  if (e instanceof ProcedureError || (e && typeof e.tag === 'string' && 'val' in e)) return { tag: e.tag, val: e.val };
  return { tag: 'internal', val: message(e) };
}

/**
 * The `capgate:plugin/procedure` and `capgate:plugin/health` exports for an author module with
 * `invoke(call)` (returns any JSON value; throw definedError/unauthorized/forbidden/internal) and
 * optionally `check(config)` (throw to report unhealthy).
 */
export function wrapProcedure(author) {
  const invoke = author.invoke;
  if (!(author.procedure && typeof author.procedure.invoke === 'function') && typeof invoke !== 'function') {
    throw new Error('a procedure module must export function invoke(call)');
  }
  const procedure = author.procedure ?? {
    invoke(c) {
      try {
        return toJson(invoke(procedureCall(c)), 'invoke');
      } catch (e) {
        throw procedureError(e);
      }
    },
  };
  const health = author.health ?? {
    check(config) {
      if (typeof author.check !== 'function') return;
      guarded('unhealthy', () => author.check(parseArg(config, 'config')));
    },
  };
  return { procedure, health };
}
