// refund-limit (JavaScript): require approval when an amount in the input exceeds a maximum.
//
// Config: {"maxAmount": 500, "amountPath": "/amount", "approvalType": "manager",
// "expiresInMs": 900000, "label": "Refund"}; only maxAmount is required, unknown keys are an
// error. The reason reads "Refund of $649 exceeds $500", numbers printed as the Rust host
// prints them. A missing or non-numeric amount is a policy error (fail closed), never an allow.
// Same behaviour as plugins/refund-limit (Rust) and plugins/python/refund-limit.

import { allow, requireApproval, rawJsonAt, formatJsonNumber } from '@capgate/plugin-sdk';

// The config this plugin takes: capgate-js build embeds it, and `capgate check` refuses a
// binding's config that does not match, at its key, before any call.
export const configSchema = {
  type: 'object',
  properties: {
    maxAmount: { type: 'number', description: 'Above this amount, the call needs approval.' },
    amountPath: { type: 'string', pattern: '^(/([^~/]|~[01])*)+$', default: '/amount' },
    approvalType: { type: 'string', minLength: 1 },
    expiresInMs: { type: 'integer', minimum: 0 },
    label: { type: 'string', default: 'Refund' },
  },
  required: ['maxAmount'],
  additionalProperties: false,
};

const KEYS = new Set(['maxAmount', 'amountPath', 'approvalType', 'expiresInMs', 'label']);

function readConfig(config, rawConfig) {
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw new Error('invalid plugin config: expected an object');
  }
  for (const k of Object.keys(config)) {
    if (!KEYS.has(k)) throw new Error(`invalid plugin config: unknown field \`${k}\``);
  }
  if (typeof config.maxAmount !== 'number') throw new Error('invalid plugin config: maxAmount must be a number');
  const str = (k, dflt) => {
    if (!(k in config)) return dflt;
    if (typeof config[k] !== 'string') throw new Error(`invalid plugin config: ${k} must be a string`);
    return config[k];
  };
  const amountPath = str('amountPath', '/amount');
  const label = str('label', 'Refund');
  let approvalType;
  if (config.approvalType !== undefined && config.approvalType !== null) approvalType = str('approvalType');
  let expiresInMs;
  if (config.expiresInMs !== undefined && config.expiresInMs !== null) {
    const lit = rawJsonAt(rawConfig, '/expiresInMs') ?? '';
    if (!/^[0-9]+$/.test(lit) || BigInt(lit) >= 1n << 64n) {
      throw new Error('invalid plugin config: expiresInMs must be a non-negative integer');
    }
    expiresInMs = BigInt(lit);
  }
  return {
    max: config.maxAmount,
    maxText: formatJsonNumber(rawJsonAt(rawConfig, '/maxAmount')),
    amountPath,
    label,
    approvalType,
    expiresInMs,
  };
}

// The checked config of the last config text seen: an instance serves one binding, so a
// pooled instance checks its config once, not on every call (a fresh one has no last).
let last = { raw: undefined, config: undefined };

function checkedConfig(request) {
  if (last.raw !== request.raw.config) last = { raw: request.raw.config, config: readConfig(request.config, request.raw.config) };
  return last.config;
}

export function evaluate(request) {
  const c = checkedConfig(request);
  if (request.phase === 'discovery') return allow();
  // One value, read without parsing the input (the host answers it inside capgate).
  const amount = request.inputValue(c.amountPath);
  if (amount === undefined) throw new Error(`input has no ${c.amountPath}`);
  if (typeof amount !== 'number') throw new Error(`${c.amountPath} is not a number`);
  if (!(amount > c.max)) return allow();
  const amountText = formatJsonNumber(request.inputText(c.amountPath));
  return requireApproval({
    reason: `${c.label} of $${amountText} exceeds $${c.maxText}`,
    type: c.approvalType,
    expiresInMs: c.expiresInMs,
  });
}
