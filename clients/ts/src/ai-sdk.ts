/**
 * Vercel AI SDK tools over a capgate gateway: one tool per capability the
 * caller may see, whose `execute` calls `invoke` and returns a result object instead of
 * throwing. The adapter never sets the SDK's own `needsApproval`: the runtime stays the
 * only approval authority, and `approval-required` comes back as a tool result.
 */

import { jsonSchema, tool, type ToolSet } from "ai";
import type { CapgateClient, CapabilityOutcome, PortableCapabilityDescriptor, PublicError, Scope } from "./client.js";
import { CapgateError } from "./client.js";

/** What an AI SDK tool returns. */
export type AISDKToolResult =
  | { status: "ok"; data: unknown }
  | {
      status: "approval-required";
      approvalId: string;
      /** "Awaiting approval: …" */
      message: string;
      /** The invocation to resume with `client.resumeApproval` once a human decided. */
      invocationId: string;
      expiresAt: string;
    }
  | { status: "error"; error: PublicError };

/** What an invocation-id or correlation-id function learns about the call. */
export interface ToolCallInfo {
  capabilityId: string;
  toolName: string;
  toolCallId: string;
  input: unknown;
}

/** Options of {@link toAISDKTools}. */
export interface ToAISDKToolsOptions {
  /** Narrow discovery (a convenience, never authorization). */
  scope?: Scope;
  /** Correlation id carried into audit: a constant or one per call. */
  correlationId?: string | ((call: ToolCallInfo) => string | undefined);
  /** The invocation id of a call (default: a random UUID per execution). */
  invocationId?: (call: ToolCallInfo) => string;
  /** Keep only some descriptors. */
  filter?: (descriptor: PortableCapabilityDescriptor) => boolean;
  /** Cancels the describe request. */
  signal?: AbortSignal;
}

/** Appended to the description of a capability whose calls need approval. */
export const REQUIRES_APPROVAL_SUFFIX = " Requires approval.";

function toolResult(outcome: CapabilityOutcome): AISDKToolResult {
  switch (outcome.status) {
    case "completed":
      return { status: "ok", data: outcome.output };
    case "approval-required": {
      const reasons = outcome.approval.reasons.length > 0 ? outcome.approval.reasons.join("; ") : "a human must approve this call";
      return {
        status: "approval-required",
        approvalId: outcome.approval.id,
        message: `Awaiting approval: ${reasons}`,
        invocationId: outcome.invocationId,
        expiresAt: outcome.approval.expiresAt,
      };
    }
    case "failed":
    case "cancelled":
      return { status: "error", error: outcome.error };
    case "outcome-unknown":
      return {
        status: "error",
        error: {
          code: "OUTCOME_UNKNOWN",
          message: "The outcome of the call is not known yet; do not repeat it.",
          retryable: false,
        },
      };
    default:
      return {
        status: "error",
        error: { code: "ADAPTER_ERROR", message: "The gateway answered an unknown status.", retryable: false },
      };
  }
}

function errorResult(e: unknown): AISDKToolResult {
  if (e instanceof CapgateError) return { status: "error", error: e.toPublic() };
  return { status: "error", error: { code: "ADAPTER_ERROR", message: "The adapter failed.", retryable: false } };
}

function randomId(): string {
  return `inv_${globalThis.crypto.randomUUID()}`;
}

/**
 * Describe the capabilities this client's credential may see and turn each into an AI SDK
 * tool named by its `toolNames.aiSdk` (`orders.refund` → `orders_refund`).
 */
export async function toAISDKTools(client: CapgateClient, options: ToAISDKToolsOptions = {}): Promise<ToolSet> {
  const descriptors = await client.describe(options.scope ? { scope: options.scope } : {}, { signal: options.signal });
  const tools: ToolSet = {};
  for (const d of descriptors) {
    // Contextual capabilities are presented by a UI in context, never offered to a model.
    if (d.discovery === "contextual") continue;
    if (options.filter && !options.filter(d)) continue;
    const toolName = d.toolNames.aiSdk;
    const schema = typeof d.inputSchema === "object" && d.inputSchema !== null ? d.inputSchema : { type: "object" };
    tools[toolName] = tool({
      description: d.requiresApproval ? `${d.description}${REQUIRES_APPROVAL_SUFFIX}` : d.description,
      // Not validated here: the runtime validates against the real contract.
      inputSchema: jsonSchema<unknown>(schema as Parameters<typeof jsonSchema>[0]),
      execute: async (input: unknown, { toolCallId, abortSignal }): Promise<AISDKToolResult> => {
        try {
          const call: ToolCallInfo = { capabilityId: d.id, toolName, toolCallId, input };
          const correlationId =
            typeof options.correlationId === "function" ? options.correlationId(call) : options.correlationId;
          const outcome = await client.invoke(
            {
              capabilityId: d.id,
              input,
              invocationId: options.invocationId ? options.invocationId(call) : randomId(),
              ...(correlationId !== undefined ? { correlationId } : {}),
              contractDigest: d.contractDigest,
            },
            { signal: abortSignal },
          );
          return toolResult(outcome);
        } catch (e) {
          return errorResult(e);
        }
      },
    });
  }
  return tools;
}
