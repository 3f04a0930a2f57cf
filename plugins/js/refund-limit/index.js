// refund-limit (JavaScript): require approval when an amount in the input exceeds a maximum.
//
// Config: {"maxAmount": 500, "amountPath": "/amount", "approvalType": "manager",
// "expiresInMs": 900000, "label": "Refund"}; only maxAmount is required, unknown keys are an
// error. The reason reads "Refund of $649 exceeds $500", numbers printed as the Rust host
// prints them. A missing or non-numeric amount is a policy error (fail closed), never an allow.
// Same behaviour as plugins/refund-limit (Rust) and plugins/python/refund-limit.

import { allow, requireApproval, getPointer, rawJsonAt, formatJsonNumber } from '@capgate/plugin-sdk';

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

export function evaluate(request) {
  const c = readConfig(request.config, request.raw.config);
  if (request.phase === 'discovery') return allow();
  const amount = request.input === undefined ? undefined : getPointer(request.input, c.amountPath);
  if (amount === undefined) throw new Error(`input has no ${c.amountPath}`);
  if (typeof amount !== 'number') throw new Error(`${c.amountPath} is not a number`);
  if (!(amount > c.max)) return allow();
  const amountText = formatJsonNumber(rawJsonAt(request.raw.input, c.amountPath));
  return requireApproval({
    reason: `${c.label} of $${amountText} exceeds $${c.maxText}`,
    type: c.approvalType,
    expiresInMs: c.expiresInMs,
  });
}
