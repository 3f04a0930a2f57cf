import { test } from 'node:test';
import assert from 'node:assert/strict';
import { allow, deny, hide, requireApproval, formatJsonNumber, rawJsonAt, getPointer } from '../src/index.js';
import { wrapPolicy, wrapRedactor } from '../src/glue.js';

test('decision helpers', () => {
  assert.deepEqual(allow(), { tag: 'allow' });
  assert.deepEqual(hide(), { tag: 'hide' });
  assert.deepEqual(deny('no'), { tag: 'deny', val: { message: 'no' } });
  assert.deepEqual(requireApproval({ reason: 'r', type: 'manager', expiresInMs: 5 }), {
    tag: 'require-approval',
    val: { reason: 'r', approvalType: 'manager', expiresInMs: 5n },
  });
  assert.throws(() => requireApproval({ reason: '' }));
  assert.throws(() => requireApproval({ reason: 'r', expiresInMs: -1 }));
});

test('numbers print as serde_json prints them', () => {
  const cases = { '649': '649', '649.0': '649.0', '1e300': '1e+300', '1e-7': '1e-7', '1e-5': '0.00001', '1e15': '1000000000000000.0',
    '1e16': '1e+16', '18446744073709551615': '18446744073709551615', '18446744073709551616': '1.8446744073709552e+19', '-0': '-0.0' };
  for (const [lit, want] of Object.entries(cases)) assert.equal(formatJsonNumber(lit), want, lit);
});

test('raw literals and pointers', () => {
  const t = '{"a": [1, {"b": 649.0}], "a/b": "x", "c": 1, "c": 2.50}';
  assert.equal(rawJsonAt(t, '/a/1/b'), '649.0');
  assert.equal(rawJsonAt(t, '/a~1b'), '"x"');
  assert.equal(rawJsonAt(t, '/c'), '2.50');
  assert.equal(rawJsonAt(t, '/nope'), undefined);
  assert.equal(rawJsonAt('{bad', ''), undefined);
  assert.equal(getPointer({ a: [1, 2] }, '/a/01'), undefined);
  assert.equal(getPointer({ a: [1, 2] }, '/a/1'), 2);
  assert.equal(getPointer({ a: 1 }, 'a'), undefined);
});

const request = (input) => ({
  phase: 'invocation', surface: 'ai-sdk', capability: { id: 'x', sideEffect: 'write', risk: 'high', tags: [] },
  actor: { id: 'u', kind: 'user', attributes: 'null' }, input, context: 'null', executionId: 'e', config: '{"max": 1}',
});

test('policy glue: parsed request, errors become strings', () => {
  const p = wrapPolicy({ evaluate: (r) => (r.input.n > r.config.max ? requireApproval({ reason: `n=${r.input.n} ${r.surface}` }) : allow()) });
  assert.deepEqual(p.evaluate(request('{"n": 2}')), { tag: 'require-approval', val: { reason: 'n=2 aiSdk' } });
  assert.deepEqual(p.evaluate(request('{"n": 0}')), { tag: 'allow' });
  assert.throws(() => p.evaluate(request(undefined)), (e) => typeof e === 'string' && e.startsWith('policy failed'));
  const bad = wrapPolicy({ evaluate: () => 'allow' });
  assert.throws(() => bad.evaluate(request('{}')), (e) => typeof e === 'string');
});

test('redactor glue', () => {
  const r = wrapRedactor({ redactOutput: (_c, v, cfg) => ({ ...v, secret: cfg.mask }) });
  const cap = { id: 'x', sideEffect: 'read', risk: 'low', tags: [] };
  assert.equal(r.redactOutput(cap, '{"a":1,"secret":"s"}', '{"mask":"*"}'), '{"a":1,"secret":"*"}');
  assert.equal(r.redactApprovalInput(cap, '{"secret":"s"}', '{"mask":"#"}'), '{"secret":"#"}');
  assert.throws(() => r.redactOutput(cap, 'not json', '{}'), (e) => typeof e === 'string');
});

test('policy request: documents parse on first read; pointer helpers ask the host when it lends a reader', async () => {
  const { policyRequest } = await import('../src/index.js');
  const req = {
    phase: 'invocation', surface: 'ai-sdk', capability: { id: 'orders.refund', sideEffect: 'write', risk: 'high', tags: [] },
    actor: { id: 'u_dana', kind: 'user', attributes: '{"orgId":"org_1"}' },
    input: '{"amount": 649.0, "order": {"id": "o_1"}}', context: '{"region":"eu"}', executionId: 'exec_1', config: '{"maxAmount":500}',
  };
  // In node (no reader): the parsed documents answer.
  const plain = policyRequest(req);
  assert.equal(plain.inputValue('/amount'), 649);
  assert.equal(plain.inputText('/amount'), '649.0');
  assert.equal(plain.configValue('/maxAmount'), 500);
  assert.equal(plain.attribute('/orgId'), 'org_1');
  assert.equal(plain.contextValue('/region'), 'eu');
  assert.deepEqual(plain.input, { amount: 649, order: { id: 'o_1' } });
  assert.equal(plain.surface, 'aiSdk');
  assert.deepEqual(plain.capability, { id: 'orders.refund', sideEffect: 'write', risk: 'high', tags: [] });
  assert.deepEqual(plain.actor.attributes, { orgId: 'org_1' });
  assert.equal(JSON.parse(JSON.stringify(plain)).config.maxAmount, 500);
  // With the host's reader: every helper asks it, and no document is parsed.
  const asked = [];
  const host = { input: { '/amount': { tag: 'number', val: '649.0' }, '/order': { tag: 'json', val: '{"id":"o_1"}' } },
    config: { '/maxAmount': { tag: 'number', val: '500' } }, 'actor-attributes': { '/orgId': { tag: 'text', val: 'org_1' } }, context: {} };
  const read = (doc, pointer) => { asked.push(`${doc} ${pointer}`); return host[doc][pointer]; };
  const broken = { ...req, input: '{not json', config: '{not json', context: '{', actor: { ...req.actor, attributes: '{' } };
  const lazy = policyRequest(broken, read);
  assert.equal(lazy.inputValue('/amount'), 649);
  assert.equal(lazy.inputText('/amount'), '649.0');
  assert.deepEqual(lazy.inputValue('/order'), { id: 'o_1' });
  assert.equal(lazy.inputValue('/missing'), undefined);
  assert.equal(lazy.configValue('/maxAmount'), 500);
  assert.equal(lazy.attribute('/orgId'), 'org_1');
  assert.equal(lazy.contextValue('/region'), undefined);
  // inputText after inputValue at the same pointer asks once.
  assert.deepEqual(asked, ['input /amount', 'input /order', 'input /missing', 'config /maxAmount', 'actor-attributes /orgId', 'context /region']);
  // The documents themselves still parse on read (and an unparsable config still throws).
  assert.equal(lazy.input, undefined);
  assert.throws(() => lazy.config);
  // Discovery: no input, so the helpers do not ask.
  const discovery = policyRequest({ ...req, input: undefined }, read);
  assert.equal(discovery.inputValue('/amount'), undefined);
  assert.equal(discovery.inputText('/amount'), undefined);
});
