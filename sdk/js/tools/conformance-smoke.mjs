#!/usr/bin/env node
// Smoke-run conformance cases against components in node (jco transpile), without the capgate
// host. Not a replacement for `capgate plugin test` (no fuel, deadlines or memory caps); a
// check that a build behaves like its Rust twin, usable before the host exists.
//
//   node sdk/js/tools/conformance-smoke.mjs --cases plugins/conformance/refund-limit.toml \
//        plugins/js/dist/refund-limit.wasm plugins/python/dist/refund-limit.wasm [...]
//
// Prints one line per failing case and "N passed, N failed" per component; exits 1 on failure.

import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SDK = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const REPO = resolve(SDK, '..', '..');

// componentize-py output uses extended-const, behind a flag in node 20.
if (!process.execArgv.includes('--experimental-wasm-extended-const') && Number(process.versions.node.split('.')[0]) < 22) {
  const r = spawnSync(process.execPath, ['--experimental-wasm-extended-const', ...process.execArgv, fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit' });
  process.exit(r.status ?? 1);
}

const args = process.argv.slice(2);
const casesPath = args[args.indexOf('--cases') + 1];
const wasms = args.filter((a, i) => a !== '--cases' && args[i - 1] !== '--cases');
if (!casesPath || args.indexOf('--cases') < 0 || wasms.length === 0) {
  console.error('usage: conformance-smoke.mjs --cases FILE.toml PLUGIN.wasm...');
  process.exit(2);
}

const cases = JSON.parse(execFileSync('python3', [join(REPO, 'plugins', 'conformance', 'load_cases.py'), casesPath], { encoding: 'utf8' }));

const CACHE = join(SDK, '.cache', 'transpiled');
const HOST = `export function log(level, message) { if (process.env.CAPGATE_SMOKE_LOG) console.error('[plugin ' + level + '] ' + message); }\n`;
const PROGRESS = `export function report(value) {}\n`;

async function load(wasm) {
  const bytes = readFileSync(wasm);
  const dir = join(CACHE, createHash('sha256').update(bytes).digest('hex').slice(0, 16));
  if (!existsSync(join(dir, 'plugin.js'))) {
    mkdirSync(dir, { recursive: true });
    execFileSync(
      process.execPath,
      [join(SDK, 'node_modules', '@bytecodealliance', 'jco', 'dist', 'jco.js'), 'transpile', resolve(wasm), '-o', dir, '--name', 'plugin', '-q',
        '--map', 'capgate:plugin/host@0.1.0=./host.js', '--map', 'capgate:plugin/progress@0.1.0=./progress.js'],
      { stdio: 'inherit' },
    );
    writeFileSync(join(dir, 'host.js'), HOST);
    writeFileSync(join(dir, 'progress.js'), PROGRESS);
  }
  return import(pathToFileURL(join(dir, 'plugin.js')).href);
}

const WIT_SURFACE = { aiSdk: 'ai-sdk' };

/** JSON equality with numbers compared by value (as doubles). */
function jsonEqual(a, b) {
  if (typeof a === 'number' && typeof b === 'number') return a === b;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return a === b;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  return ka.length === kb.length && ka.every((k, i) => k === kb[i] && jsonEqual(a[k], b[k]));
}

function call(mod, c) {
  try {
    if (c.world === 'policy') {
      const r = c.request;
      const req = {
        phase: r.phase,
        surface: WIT_SURFACE[r.surface] ?? r.surface,
        capability: c.capability,
        actor: r.actor,
        input: r.input ?? undefined,
        context: r.context,
        executionId: r.executionId,
        approval: r.approval ?? undefined,
        config: c.config,
      };
      return { ok: mod.policy.evaluate(req) };
    }
    const f = c.world === 'redactor-output' ? 'redactOutput' : 'redactApprovalInput';
    return { ok: mod.redactor[f](c.capability, c.value, c.config) };
  } catch (e) {
    if (e && e.constructor && e.constructor.name === 'ComponentError') return { err: e.payload };
    return { trap: String(e) };
  }
}

function check(c, got) {
  const e = c.expect;
  if (got.trap) return `trapped: ${got.trap}`;
  if (c.world === 'policy') {
    if (e.decision === 'error') return got.err !== undefined ? null : `expected an error, got ${JSON.stringify(got.ok, big)}`;
    if (got.err !== undefined) return `expected ${e.decision}, got error ${JSON.stringify(got.err)}`;
    const d = got.ok;
    if (d.tag !== e.decision) return `expected ${e.decision}, got ${JSON.stringify(d, big)}`;
    if (d.tag === 'require-approval') {
      if (d.val.reason !== e.reason) return `reason ${JSON.stringify(d.val.reason)} != ${JSON.stringify(e.reason)}`;
      if ((d.val.approvalType ?? null) !== (e.approvalType ?? null)) return `approvalType ${d.val.approvalType} != ${e.approvalType}`;
      const exp = e.expiresInMs === undefined ? null : BigInt(e.expiresInMs);
      if ((d.val.expiresInMs ?? null) !== exp) return `expiresInMs ${d.val.expiresInMs} != ${e.expiresInMs}`;
    }
    if (d.tag === 'deny') {
      if ('message' in e && d.val.message !== e.message) return `message ${d.val.message} != ${e.message}`;
      if ('code' in e && d.val.code !== e.code) return `code ${d.val.code} != ${e.code}`;
    }
    return null;
  }
  if (e.error) return got.err !== undefined ? null : `expected an error, got ${got.ok}`;
  if (got.err !== undefined) return `expected output, got error ${JSON.stringify(got.err)}`;
  let out;
  try {
    out = JSON.parse(got.ok);
  } catch {
    return `output is not JSON: ${got.ok}`;
  }
  return jsonEqual(out, JSON.parse(e.output)) ? null : `output ${got.ok} != ${e.output}`;
}

function big(_k, v) {
  return typeof v === 'bigint' ? Number(v) : v;
}

let failed = 0;
for (const wasm of wasms) {
  const mod = await load(wasm);
  let pass = 0;
  let fail = 0;
  const t0 = performance.now();
  for (const c of cases) {
    // (A trap poisons the instance, so later cases of that component fail too.)
    const m = c.world === 'policy' && !mod.policy ? null : mod;
    const problem = m ? check(c, call(m, c)) : 'component does not export the policy interface';
    if (problem) {
      fail++;
      console.log(`FAIL ${wasm}: ${c.name}: ${problem}`);
    } else pass++;
  }
  const ms = performance.now() - t0;
  console.log(`${wasm}: ${pass} passed, ${fail} failed (${(ms / cases.length).toFixed(2)} ms/case in node)`);
  failed += fail;
}
process.exit(failed ? 1 : 0);
