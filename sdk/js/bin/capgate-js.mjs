#!/usr/bin/env node
// capgate-js: build a JavaScript/TypeScript capgate plugin into a WebAssembly component.
//
//   capgate-js build <entry.js|ts> --world policy|redactor|procedure [-o out.wasm]
//                    [--wit DIR] [--enable stdio,clocks,random,http] [--force] [--quiet]
//   capgate-js gen-types [--wit DIR] [-o DIR]
//
// `build` bundles the entry (and what it imports, npm packages included) with rolldown into one
// ES module, wraps its functions in the WIT glue (src/glue.js), and runs componentize-js, which
// pre-initialises the SpiderMonkey engine and the module's top level with Wizer. By default the
// component imports no WASI at all ("pure"): only capgate:plugin/host (and progress for
// procedures). `--enable` adds WASI features back (stdio for console.*, clocks for Date/timers,
// random for Math.random/crypto, http for fetch) — the capgate host must then provide them.
//
// Rebuilds are skipped when the output exists and its inputs (bundled code, WIT, world, options,
// tool versions) hash to the value recorded in `<out>.inputs`.

import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createRequire } from 'node:module';

const SDK = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);

const WORLDS = {
  policy: {
    world: 'policy-plugin',
    // The policy world imports the host's lazy reader (capgate:plugin/request@0.3.0).
    glue: "import { get as __read } from 'capgate:plugin/request@0.3.0';\nexport const policy = wrapPolicy(author, __read);",
    fn: 'wrapPolicy',
  },
  redactor: { world: 'redactor-plugin', glue: 'export const redactor = wrapRedactor(author);', fn: 'wrapRedactor' },
  procedure: {
    world: 'procedure-plugin',
    glue: 'const __p = wrapProcedure(author);\nexport const procedure = __p.procedure;\nexport const health = __p.health;',
    fn: 'wrapProcedure',
  },
};
const FEATURES = ['stdio', 'random', 'clocks', 'http', 'fetch-event'];

function usage(code = 2) {
  console.error(`usage:
  capgate-js build <entry> --world policy|redactor|procedure [-o out.wasm] [--wit DIR] [--enable FEATURES] [--force] [--quiet]
  capgate-js gen-types [--wit DIR] [-o DIR]`);
  process.exit(code);
}

function parseArgs(argv) {
  const opts = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => argv[++i] ?? usage();
    if (a === '--world' || a === '-w') opts.world = next();
    else if (a === '-o' || a === '--out') opts.out = next();
    else if (a === '--wit') opts.wit = next();
    else if (a === '--enable') opts.enable = next().split(',').filter(Boolean);
    else if (a === '--force') opts.force = true;
    else if (a === '--quiet' || a === '-q') opts.quiet = true;
    else if (a === '-h' || a === '--help') usage(0);
    else if (a.startsWith('-')) usage();
    else opts._.push(a);
  }
  return opts;
}

/** --wit, $CAPGATE_WIT, the copy packed into the npm package, or the repository's wit/. */
function findWit(flag) {
  const candidates = [flag, process.env.CAPGATE_WIT, join(SDK, 'wit'), join(SDK, '..', '..', 'wit')].filter(Boolean);
  for (const c of candidates) {
    if (existsSync(c)) return resolve(c);
  }
  throw new Error(`capgate WIT not found (tried ${candidates.join(', ')}); pass --wit DIR`);
}

function witDigest(witPath) {
  const h = createHash('sha256');
  const walk = (p) => {
    if (statSync(p).isDirectory()) {
      for (const e of readdirSync(p).sort()) walk(join(p, e));
    } else if (p.endsWith('.wit')) {
      h.update(p.slice(witPath.length)).update(readFileSync(p));
    }
  };
  walk(witPath);
  return h.digest('hex');
}

function version(pkg) {
  for (let dir = SDK; ; dir = dirname(dir)) {
    const p = join(dir, 'node_modules', pkg, 'package.json');
    if (existsSync(p)) return JSON.parse(readFileSync(p, 'utf8')).version;
    if (dirname(dir) === dir) return 'unknown';
  }
}

async function bundle(entry, kind, work) {
  const { rolldown } = await import('rolldown');
  const gluePath = join(work, 'capgate-entry.js');
  writeFileSync(
    gluePath,
    `import * as author from ${JSON.stringify(pathToFileURL(entry).pathname)};\n` +
      `import { ${WORLDS[kind].fn} } from ${JSON.stringify(join(SDK, 'src', 'glue.js'))};\n` +
      `${WORLDS[kind].glue}\n`,
  );
  const build = await rolldown({
    input: gluePath,
    platform: 'neutral',
    external: [/^capgate:/, /^wasi:/],
    resolve: {
      alias: {
        '@capgate/plugin-sdk/host': join(SDK, 'src', 'host.js'),
        '@capgate/plugin-sdk/progress': join(SDK, 'src', 'progress.js'),
        '@capgate/plugin-sdk/glue': join(SDK, 'src', 'glue.js'),
        '@capgate/plugin-sdk': join(SDK, 'src', 'index.js'),
      },
      mainFields: ['module', 'main'],
      conditionNames: ['import', 'default'],
    },
    logLevel: 'warn',
  });
  const { output } = await build.generate({ format: 'esm', minify: false });
  await build.close();
  if (output.length !== 1) throw new Error(`bundling produced ${output.length} chunks; avoid dynamic import()`);
  return output[0].code;
}

// The JSON Schema of the plugin's `config`, when the entry declares one with
// `export const configSchema = { ... }`: a literal (objects, arrays, strings, numbers,
// booleans, null), read from the source without running it. capgate checks every binding's
// config against it at load (`capgate check`), located at the key.
async function declaredConfigSchema(entry) {
  const { parseAst } = await import('rolldown/parseAst');
  const source = readFileSync(entry, 'utf8');
  const ast = parseAst(source, null, entry);
  const at = (node) => {
    const line = source.slice(0, node.start).split('\n').length;
    return `${entry}:${line}`;
  };
  const literal = (node) => {
    switch (node.type) {
      case 'ObjectExpression': {
        const out = {};
        for (const p of node.properties) {
          if (p.type !== 'Property' || p.computed || p.kind !== 'init' || p.method) {
            throw new Error(`${at(p)}: configSchema must be a literal (no spreads, computed keys or methods)`);
          }
          const key = p.key.type === 'Identifier' ? p.key.name : p.key.type === 'Literal' ? String(p.key.value) : undefined;
          if (key === undefined) throw new Error(`${at(p)}: configSchema key is not a name or a string`);
          out[key] = literal(p.value);
        }
        return out;
      }
      case 'ArrayExpression':
        return node.elements.map((e) => {
          if (e === null || e.type === 'SpreadElement') throw new Error(`${at(node)}: configSchema arrays hold literals only`);
          return literal(e);
        });
      case 'Literal':
        if (node.regex || node.bigint !== undefined) throw new Error(`${at(node)}: configSchema holds JSON values only`);
        return node.value;
      case 'UnaryExpression':
        if (node.operator === '-' && node.argument.type === 'Literal' && typeof node.argument.value === 'number') {
          return -node.argument.value;
        }
        break;
      case 'TemplateLiteral':
        if (node.expressions.length === 0) return node.quasis[0].value.cooked;
        break;
      case 'TSAsExpression':
      case 'TSSatisfiesExpression':
      case 'ParenthesizedExpression':
        return literal(node.expression);
    }
    throw new Error(`${at(node)}: configSchema must be a JSON literal (found ${node.type})`);
  };
  for (const node of ast.body) {
    if (node.type !== 'ExportNamedDeclaration' || node.declaration?.type !== 'VariableDeclaration') continue;
    for (const d of node.declaration.declarations) {
      if (d.id.type === 'Identifier' && d.id.name === 'configSchema') {
        if (!d.init) throw new Error(`${at(d)}: configSchema has no value`);
        const schema = literal(d.init);
        if (schema === null || (typeof schema !== 'object' && typeof schema !== 'boolean') || Array.isArray(schema)) {
          throw new Error(`${at(d)}: configSchema must be a JSON Schema (an object or a boolean)`);
        }
        return schema;
      }
    }
  }
  return undefined;
}

// A component with one more custom section at its end (the component format allows custom
// sections anywhere after the preamble): id 0, size, name, bytes.
function withCustomSection(component, name, data) {
  const leb = (n) => {
    const out = [];
    do {
      let b = n & 0x7f;
      n >>>= 7;
      if (n) b |= 0x80;
      out.push(b);
    } while (n);
    return Buffer.from(out);
  };
  const nameBytes = Buffer.from(name, 'utf8');
  const payload = Buffer.concat([leb(nameBytes.length), nameBytes, Buffer.from(data)]);
  return Buffer.concat([Buffer.from(component), Buffer.from([0]), leb(payload.length), payload]);
}

async function cmdBuild(opts) {
  const [entryArg] = opts._;
  if (!entryArg || !opts.world) usage();
  const kind = opts.world.replace(/-plugin$/, '');
  if (!WORLDS[kind]) throw new Error(`unknown world "${opts.world}" (policy, redactor, procedure)`);
  const entry = resolve(entryArg);
  const out = resolve(opts.out ?? join(dirname(entry), 'dist', `${basename(entry, extname(entry))}.wasm`));
  const enable = opts.enable ?? [];
  for (const f of enable) if (!FEATURES.includes(f)) throw new Error(`unknown feature "${f}" (${FEATURES.join(', ')})`);
  const disableFeatures = FEATURES.filter((f) => !enable.includes(f));
  const wit = findWit(opts.wit);

  const t0 = performance.now();
  // A stable work directory: its path ends up in the bundle, which is part of the inputs hash.
  const work = join(tmpdir(), 'capgate-js', createHash('sha256').update(out).digest('hex').slice(0, 16));
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  try {
    const code = await bundle(entry, kind, work);
    const schema = await declaredConfigSchema(entry);
    const schemaText = schema === undefined ? undefined : JSON.stringify(schema);
    const tBundle = performance.now() - t0;
    const inputs = createHash('sha256')
      .update(JSON.stringify({ kind, disableFeatures, cjs: version('@bytecodealliance/componentize-js'), sdk: JSON.parse(readFileSync(join(SDK, 'package.json'), 'utf8')).version }))
      .update(witDigest(wit))
      .update(code)
      .update(schemaText ?? '')
      .digest('hex');
    const stamp = `${out}.inputs`;
    if (!opts.force && existsSync(out) && existsSync(stamp) && readFileSync(stamp, 'utf8').trim() === inputs) {
      if (!opts.quiet) console.log(`${out}: up to date (${(statSync(out).size / 1048576).toFixed(1)} MiB)`);
      return { out, skipped: true, bytes: statSync(out).size, ms: performance.now() - t0 };
    }
    const sourcePath = join(work, 'plugin.js');
    writeFileSync(sourcePath, code);
    const { componentize } = await import('@bytecodealliance/componentize-js');
    const t1 = performance.now();
    const built = await componentize({ sourcePath, witPath: wit, worldName: WORLDS[kind].world, disableFeatures });
    const component =
      schemaText === undefined ? built.component : withCustomSection(built.component, 'capgate:config-schema', Buffer.from(schemaText));
    const tComp = performance.now() - t1;
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, component);
    writeFileSync(stamp, inputs + '\n');
    const ms = performance.now() - t0;
    if (!opts.quiet) {
      console.log(
        `${out}: ${(component.length / 1048576).toFixed(1)} MiB, bundle ${tBundle.toFixed(0)} ms, componentize ${(tComp / 1000).toFixed(1)} s` +
          ` (world ${WORLDS[kind].world}, WASI: ${enable.length ? enable.join(',') : 'none'}, config schema: ${schemaText === undefined ? 'none declared' : 'declared'})`,
      );
    }
    return { out, skipped: false, bytes: component.length, ms };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

async function cmdGenTypes(opts) {
  const wit = findWit(opts.wit);
  const outDir = resolve(opts.out ?? join(SDK, 'types'));
  const { execFileSync } = await import('node:child_process');
  const jcoDir = dirname(dirname(fileURLToPath(import.meta.resolve('@bytecodealliance/jco'))));
  const jcoBin = JSON.parse(readFileSync(join(jcoDir, 'package.json'), 'utf8')).bin;
  const bin = join(jcoDir, typeof jcoBin === 'string' ? jcoBin : jcoBin.jco);
  for (const kind of Object.keys(WORLDS)) {
    const dir = join(outDir, kind);
    rmSync(dir, { recursive: true, force: true });
    execFileSync(process.execPath, [bin, 'guest-types', wit, '-n', WORLDS[kind].world, '-o', dir, '-q'], { stdio: 'inherit' });
  }
  console.log(`types written to ${outDir}`);
}

const opts = parseArgs(process.argv.slice(3));
const cmd = process.argv[2];
try {
  if (cmd === 'build') await cmdBuild(opts);
  else if (cmd === 'gen-types') await cmdGenTypes(opts);
  else usage();
} catch (e) {
  console.error(`capgate-js: ${e && e.message ? e.message : e}`);
  process.exit(1);
}
