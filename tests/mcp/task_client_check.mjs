// Drive capgate's MCP tasks with the official TypeScript MCP SDK (npm
// `@modelcontextprotocol/sdk`, pinned in tests/mcp/package-lock.json).
//
//   node task_client_check.mjs URL
//
// The SDK (1.32) implements the 2025-11-25 experimental tasks, not the 2026-07-28 tasks
// extension (SEP-2663), so this client declares the extension in its capabilities (the
// SDK's `extensions` map) and sends the extension's requests through the SDK's own
// `client.request`, checking each answer against the extension's shapes. Run by
// host/gateway/tests/all/mcp_typescript.rs with mcp_client_check.mjs's line protocol: an
// `approval` event is answered (the parent approved through the approvals API) with one
// stdin line; `done` ends the run. A failed check exits non-zero.

import assert from "node:assert/strict";
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, ResultSchema } from "@modelcontextprotocol/sdk/types.js";

const TASKS = "io.modelcontextprotocol/tasks";
const url = process.argv[2];
if (!url) {
  console.error("usage: node task_client_check.mjs URL");
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
  const client = new Client(
    { name: "capgate-ts-tasks", version: "0.0.0" },
    { capabilities: { extensions: { [TASKS]: {} } } },
  );
  await client.connect(transport);
  return client;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// SEP-2663's CreateTaskResult: `resultType: "task"` beside the task's fields.
function checkCreated(created) {
  assert.equal(created.resultType, "task", JSON.stringify(created));
  assert.equal(created.status, "working");
  for (const key of ["taskId", "createdAt", "lastUpdatedAt", "statusMessage"]) {
    assert.equal(typeof created[key], "string", `${key} in ${JSON.stringify(created)}`);
  }
  assert.equal(typeof created.pollIntervalMs, "number");
}

// SEP-2663's DetailedTask, as tasks/get answers it.
function checkDetailed(task, taskId) {
  assert.equal(task.taskId, taskId);
  assert.ok(["working", "input_required", "completed", "failed", "cancelled"].includes(task.status));
  if (task.status === "completed") CallToolResultSchema.parse(task.result);
  if (task.status === "failed") assert.equal(typeof task.error.code, "number");
}

async function untilEnded(client, taskId, interval) {
  const seen = new Set();
  for (;;) {
    const task = await client.request({ method: "tasks/get", params: { taskId } }, ResultSchema);
    checkDetailed(task, taskId);
    seen.add(task.status);
    if (!["working", "input_required"].includes(task.status)) return { task, seen: [...seen].sort() };
    await sleep(interval);
  }
}

const call = (client, amount) =>
  client.request(
    { method: "tools/call", params: { name: "orders_refund", arguments: { orderId: "ord_9", amount } } },
    ResultSchema,
  );

const dana = await connect("tok-dana");
const admin = await connect("tok-admin");

// Held: a task, polled until the human approved and the refund ran.
const created = await call(dana, 649);
checkCreated(created);
const approvalId = created._meta?.["capgate/approval"]?.id;
assert.ok(approvalId?.startsWith("apr_"), JSON.stringify(created));
assert.ok(!JSON.stringify(created).includes("ord_9"), "the input stays out of the task");
// Another principal: as an unknown task.
await assert.rejects(
  admin.request({ method: "tasks/get", params: { taskId: created.taskId } }, ResultSchema),
  (e) => e.code === -32602,
);
emit({ event: "approval", approvalId });
assert.equal(await readParentLine(), "approved");
const approved = await untilEnded(dana, created.taskId, created.pollIntervalMs);
assert.equal(approved.task.status, "completed");
assert.equal(approved.task.result.structuredContent.output.approvedBy, "u_manager");

// Cancelled before anyone decided: the task ends cancelled.
const second = await call(dana, 700);
checkCreated(second);
await dana.request({ method: "tasks/cancel", params: { taskId: second.taskId } }, ResultSchema);
const cancelled = await untilEnded(dana, second.taskId, second.pollIntervalMs);
assert.equal(cancelled.task.status, "cancelled");

emit({
  event: "done",
  approvedStatuses: approved.seen,
  cancelledApproval: second._meta?.["capgate/approval"]?.id,
});
await dana.close();
await admin.close();
process.exit(0);
