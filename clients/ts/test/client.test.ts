import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { CapgateError, createCapgateClient, toAISDKTools, type AISDKToolResult } from "../src/index.js";
import { descriptor, startFakeGateway, type FakeGateway, type Recorded } from "./fake-gateway.js";

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** A model that calls one tool, then answers with text. */
function modelCalling(toolName: string, input: unknown): MockLanguageModelV3 {
  return new MockLanguageModelV3({
    doGenerate: [
      {
        content: [{ type: "tool-call", toolCallId: "call-1", toolName, input: JSON.stringify(input) }],
        finishReason: { unified: "tool-calls", raw: "tool_calls" },
        usage,
        warnings: [],
      },
      {
        content: [{ type: "text", text: "done" }],
        finishReason: { unified: "stop", raw: "stop" },
        usage,
        warnings: [],
      },
    ],
  });
}

function answer(req: Recorded) {
  if (req.path === "/describe") {
    return { body: [descriptor("orders.refund", true), descriptor("orders.lookup", false)] };
  }
  if (req.path === "/invoke") {
    if (req.body.capabilityId === "orders.lookup") {
      return { status: 503, body: { error: { code: "TIMEOUT", message: "busy", retryable: true } } };
    }
    if (req.body.input.amount > 500) {
      return {
        body: {
          status: "approval-required",
          invocationId: req.body.invocationId,
          executionId: "exe_1",
          approval: {
            id: "apr_1",
            capabilityId: "orders.refund",
            status: "pending",
            reasons: ["Refund of $649 exceeds $500"],
            types: [],
            requestedAt: "2026-01-01T00:00:00Z",
            expiresAt: "2026-01-01T00:15:00Z",
          },
        },
      };
    }
    return {
      body: {
        status: "completed",
        invocationId: req.body.invocationId,
        executionId: "exe_2",
        output: { refundId: "ref_1" },
      },
    };
  }
  if (req.path === "/getApproval") return { body: null };
  return { status: 404, body: { error: { code: "NOT_FOUND", message: "no route", retryable: false } } };
}

describe("createCapgateClient", () => {
  let gw: FakeGateway;
  before(async () => {
    gw = await startFakeGateway(answer);
  });
  after(() => gw.close());

  test("posts JSON with the caller's headers to {url}/{operation}", async () => {
    const client = createCapgateClient({ url: gw.url, headers: { Authorization: "Bearer tok-dana" } });
    const out = await client.invoke({ capabilityId: "orders.refund", input: { orderId: "o", amount: 5 }, invocationId: "inv_a" });
    assert.equal(out.status, "completed");
    const req = gw.requests.at(-1)!;
    assert.equal(req.method, "POST");
    assert.equal(req.path, "/invoke");
    assert.equal(req.headers.authorization, "Bearer tok-dana");
    assert.match(String(req.headers["content-type"]), /application\/json/);
    assert.deepEqual(req.body, { capabilityId: "orders.refund", input: { orderId: "o", amount: 5 }, invocationId: "inv_a" });
    assert.equal(await client.getApproval({ approvalId: "apr_x" }), null);
  });

  test("header functions are called per request", async () => {
    let n = 0;
    const client = createCapgateClient({ url: `${gw.url}/`, headers: async () => ({ Authorization: `Bearer t${++n}` }) });
    await client.describe();
    await client.describe();
    assert.equal(gw.requests.at(-1)!.headers.authorization, "Bearer t2");
  });

  test("gateway errors become CapgateError with the gateway's code", async () => {
    const client = createCapgateClient({ url: gw.url });
    await assert.rejects(client.contract(), (e: unknown) => {
      assert.ok(e instanceof CapgateError);
      assert.equal(e.code, "NOT_FOUND");
      assert.equal(e.status, 404);
      return true;
    });
  });

  test("an unreachable gateway is a retryable NETWORK_ERROR", async () => {
    const client = createCapgateClient({ url: "http://127.0.0.1:9/capgate" });
    await assert.rejects(client.describe(), (e: unknown) => e instanceof CapgateError && e.code === "NETWORK_ERROR" && e.retryable);
  });
});

describe("toAISDKTools", () => {
  let gw: FakeGateway;
  before(async () => {
    gw = await startFakeGateway(answer);
  });
  after(() => gw.close());

  const client = () => createCapgateClient({ url: gw.url, headers: { Authorization: "Bearer tok-dana" } });

  test("names tools by toolNames.aiSdk, flags approval in the description, never sets needsApproval", async () => {
    const tools = await toAISDKTools(client(), { scope: { tags: ["orders"] } });
    assert.deepEqual(Object.keys(tools).sort(), ["orders_lookup", "orders_refund"]);
    assert.equal(tools.orders_refund.description, "The orders.refund capability. Requires approval.");
    assert.equal(tools.orders_lookup.description, "The orders.lookup capability.");
    for (const t of Object.values(tools)) assert.equal((t as { needsApproval?: unknown }).needsApproval, undefined);
    const describe = gw.requests.find((r) => r.path === "/describe" && r.body.scope);
    assert.deepEqual(describe?.body, { scope: { tags: ["orders"] } });
  });

  test("generateText: the model's tool call becomes an invoke with the credential's identity", async () => {
    const tools = await toAISDKTools(client(), {
      correlationId: "conv_1",
      invocationId: (c) => `inv_${c.toolCallId}`,
    });
    // The model tries to pass an actor: it is just input, the identity is the bearer token.
    const result = await generateText({
      model: modelCalling("orders_refund", { orderId: "ord_1", amount: 20 }),
      tools,
      prompt: "refund ord_1",
      stopWhen: stepCountIs(2),
    });
    const invoke = gw.requests.filter((r) => r.path === "/invoke").at(-1)!;
    assert.equal(invoke.headers.authorization, "Bearer tok-dana");
    assert.deepEqual(invoke.body, {
      capabilityId: "orders.refund",
      input: { orderId: "ord_1", amount: 20 },
      invocationId: "inv_call-1",
      correlationId: "conv_1",
      contractDigest: "sha256:abc",
    });
    const toolResults = result.steps.flatMap((s) => s.toolResults);
    assert.equal(toolResults.length, 1);
    assert.deepEqual(toolResults[0].output, { status: "ok", data: { refundId: "ref_1" } });
    assert.equal(result.text, "done");
  });

  test("approval-required flows back as a tool result, not an SDK approval request", async () => {
    const tools = await toAISDKTools(client());
    const result = await generateText({
      model: modelCalling("orders_refund", { orderId: "ord_42", amount: 649 }),
      tools,
      prompt: "refund ord_42",
      stopWhen: stepCountIs(2),
    });
    const out = result.steps.flatMap((s) => s.toolResults)[0].output as AISDKToolResult;
    assert.equal(out.status, "approval-required");
    assert.ok(out.status === "approval-required");
    assert.equal(out.approvalId, "apr_1");
    assert.equal(out.message, "Awaiting approval: Refund of $649 exceeds $500");
    assert.match(out.invocationId, /^inv_/);
    const approvalRequests = result.steps.flatMap((s) => s.content).filter((c) => c.type === "tool-approval-request");
    assert.equal(approvalRequests.length, 0);
  });

  test("gateway failures come back as {status: error}, never thrown", async () => {
    const tools = await toAISDKTools(client());
    const result = await generateText({
      model: modelCalling("orders_lookup", { orderId: "ord_1" }),
      tools,
      prompt: "look up",
      stopWhen: stepCountIs(2),
    });
    const out = result.steps.flatMap((s) => s.toolResults)[0].output;
    assert.deepEqual(out, { status: "error", error: { code: "TIMEOUT", message: "busy", retryable: true } });
  });
});
