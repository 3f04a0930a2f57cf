// toAISDKTools against a running `capgate serve`, with the `ai` package's mock model.
//
//   CAPGATE_URL=http://127.0.0.1:8080/capgate CAPGATE_TOKEN=… npm run test:gateway
//
// Optional: CAPGATE_APPROVAL_CALL (JSON `{"tool": "...", "input": {...}}`, default: a
// refund of 649 through `orders_refund`, which the walkthrough's refund-limit policy holds
// for approval) and CAPGATE_EXPECT_ACTOR (an actor id the gateway's approval record must
// name, checked when the gateway exposes the requester through getApproval).
// Run explicitly, this test fails when CAPGATE_URL or CAPGATE_TOKEN is missing: it never
// skips.

import assert from "node:assert/strict";
import { test } from "node:test";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { createCapgateClient, toAISDKTools, type AISDKToolResult } from "../src/index.js";

const url = process.env.CAPGATE_URL;
const token = process.env.CAPGATE_TOKEN;
const call = JSON.parse(
  process.env.CAPGATE_APPROVAL_CALL ?? '{"tool":"orders_refund","input":{"orderId":"ord_42","amount":649}}',
) as { tool: string; input: Record<string, unknown> };

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

test("a mock model's tool call reaches the gateway as the authenticated actor and approval-required flows back", async () => {
  assert.ok(url && token, "set CAPGATE_URL and CAPGATE_TOKEN to a running `capgate serve`");
  const client = createCapgateClient({ url, headers: { Authorization: `Bearer ${token}` } });
  const tools = await toAISDKTools(client, { correlationId: "ts-integration" });
  assert.ok(call.tool in tools, `the gateway does not offer ${call.tool}: ${Object.keys(tools).join(", ")}`);
  for (const t of Object.values(tools)) {
    assert.equal((t as { needsApproval?: unknown }).needsApproval, undefined);
  }

  // The model asserts an identity of its own in the input: it must not become the actor.
  const model = new MockLanguageModelV3({
    doGenerate: [
      {
        content: [{ type: "tool-call", toolCallId: "call-1", toolName: call.tool, input: JSON.stringify(call.input) }],
        finishReason: { unified: "tool-calls", raw: "tool_calls" },
        usage,
        warnings: [],
      },
      {
        content: [{ type: "text", text: "I asked a human to approve the refund." }],
        finishReason: { unified: "stop", raw: "stop" },
        usage,
        warnings: [],
      },
    ],
  });
  const result = await generateText({ model, tools, prompt: "Refund order ord_42.", stopWhen: stepCountIs(2) });
  const out = result.steps.flatMap((s) => s.toolResults)[0]?.output as AISDKToolResult | undefined;
  assert.ok(out, "no tool result");
  assert.equal(out.status, "approval-required", JSON.stringify(out));
  assert.ok(out.status === "approval-required");
  assert.match(out.message, /^Awaiting approval: /);

  // The approval exists for this credential, and its receipt names the invocation.
  const approval = await client.getApproval({ approvalId: out.approvalId });
  assert.ok(approval, "getApproval returned null for the approval just requested");
  assert.equal(approval.status, "pending");
  const receipt = await client.getInvocation({ invocationId: out.invocationId });
  assert.equal(receipt?.approvalId, out.approvalId);
  const expectActor = process.env.CAPGATE_EXPECT_ACTOR;
  const requester = (approval as unknown as { actor?: { id?: string } }).actor?.id;
  if (expectActor && requester !== undefined) assert.equal(requester, expectActor);

  // resumeApproval takes the spec's InvocationOptions: a stale contract digest is refused
  // before anything else, the current one passes.
  const stale = await client.resumeApproval({
    approvalId: out.approvalId,
    invocationId: out.invocationId,
    correlationId: "ts-integration-resume",
    contractDigest: "sha256:stale",
  });
  assert.equal(stale.status, "failed");
  assert.ok(stale.status === "failed");
  assert.equal(stale.error.code, "CONTRACT_MISMATCH");
  const contract = await client.contract();
  const digest = contract.find((d) => d.toolNames.aiSdk === call.tool)?.contractDigest;
  assert.ok(digest, `no contract entry for ${call.tool}`);

  // Resuming before a human decided is refused by the runtime, as a governed outcome.
  const early = await client.resumeApproval({
    approvalId: out.approvalId,
    invocationId: out.invocationId,
    correlationId: "ts-integration-resume",
    contractDigest: digest,
  });
  assert.equal(early.status, "failed");
  assert.ok(early.status === "failed");
  assert.equal(early.error.code, "APPROVAL_PENDING");
});
