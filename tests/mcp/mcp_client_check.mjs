// Drive a capgate MCP server with the official TypeScript MCP SDK
// (npm `@modelcontextprotocol/sdk`, pinned in tests/mcp/package-lock.json).
//
//   node mcp_client_check.mjs URL
//
// Run by host/gateway/tests/all/mcp_typescript.rs, with the same line protocol as
// mcp_client_check.py: one JSON object per stdout line; `approval` and `cancelled` events
// are answered with one stdin line; `done` ends the run. A failed check exits non-zero.

import assert from "node:assert/strict";
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = process.argv[2];
if (!url) {
  console.error("usage: node mcp_client_check.mjs URL");
  process.exit(2);
}

const parentLines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);
async function readParentLine() {
  const { value, done } = await parentLines.next();
  assert.ok(!done, "the parent closed stdin");
  return value.trim();
}

async function connect(token) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "capgate-ts-check", version: "0.0.0" });
  await client.connect(transport);
  return client;
}

function envelope(result) {
  const structured = result.structuredContent;
  assert.equal(typeof structured, "object", `structuredContent: ${JSON.stringify(result)}`);
  const texts = result.content.filter((c) => c.type === "text");
  assert.equal(texts.length, 1);
  assert.deepEqual(JSON.parse(texts[0].text), structured);
  return structured;
}

const byName = (tools) => Object.fromEntries(tools.map((t) => [t.name, t]));

const dana = await connect("tok-dana");
const admin = await connect("tok-admin");
assert.equal(dana.getServerVersion()?.name, "capgate");

// tools/list for two principals: the discovery policy differs.
const tools = byName((await dana.listTools()).tools);
const adminTools = byName((await admin.listTools()).tools);
for (const absent of ["internal_export", "vault_read", "orders_purge"]) {
  assert.ok(!(absent in tools), `${absent} listed for u_dana`);
}
assert.ok("orders_purge" in adminTools, "admin must see orders_purge");
assert.equal(adminTools.orders_purge.annotations.destructiveHint, true);
assert.deepEqual(tools.orders_refund.inputSchema.required, ["orderId", "amount"]);
assert.equal(tools.orders_refund.annotations.readOnlyHint, false);
assert.equal(tools.orders_lookup.annotations.readOnlyHint, true);
assert.equal(tools.orders_lookup.annotations.idempotentHint, true);

// tools/call: success as the authenticated actor.
const ok = await dana.callTool({ name: "orders_lookup", arguments: { orderId: "ord_1" } });
assert.notEqual(ok.isError, true);
assert.deepEqual(envelope(ok).output, { orderId: "ord_1", status: "shipped", actor: "u_dana" });

// INPUT_INVALID is an isError tool result.
const bad = await dana.callTool({ name: "orders_refund", arguments: { orderId: "ord_1" } });
assert.equal(bad.isError, true);
assert.equal(envelope(bad).error.code, "INPUT_INVALID");

// Approval required above 500, resumed after a human decision.
const held = envelope(
  await dana.callTool({ name: "orders_refund", arguments: { orderId: "ord_7", amount: 900 } }),
);
assert.equal(held.status, "approval-required");
assert.match(held.message, /^Awaiting approval: /);
emit({ event: "approval", approvalId: held.approvalId });
assert.equal(await readParentLine(), "approved");
const resumed = envelope(
  await dana.callTool({ name: "approvals_resume", arguments: { approvalId: held.approvalId } }),
);
assert.equal(resumed.status, "completed");
assert.equal(resumed.output.refundId, "ref_ord_7");

// The admin cannot resume u_dana's approval (the session actor is the guard).
const stolen = envelope(
  await admin.callTool({ name: "approvals_resume", arguments: { approvalId: held.approvalId } }),
);
assert.equal(stolen.status, "failed");

// Cancelled mid-flight: abort after the first progress notification.
const controller = new AbortController();
let progressSeen = 0;
const slow = dana
  .callTool({ name: "jobs_wait", arguments: { seconds: 30 } }, undefined, {
    signal: controller.signal,
    onprogress: () => {
      progressSeen += 1;
      controller.abort();
    },
  })
  .then(
    () => "finished",
    () => "aborted",
  );
assert.equal(await slow, "aborted");
assert.ok(progressSeen >= 1);
emit({ event: "cancelled", tool: "jobs_wait" });
assert.equal(await readParentLine(), "audited");

await dana.close();
await admin.close();
emit({
  event: "done",
  transport: "http-ts",
  tools: Object.keys(tools).sort(),
  adminTools: Object.keys(adminTools).sort(),
});
process.exit(0);
