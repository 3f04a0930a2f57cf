/**
 * @capgate/client: a client for the capgate HTTP capability gateway and Vercel AI SDK
 * tools over it.
 */
export {
  CapgateError,
  createCapgateClient,
  type CallOptions,
  type CapabilityOutcome,
  type CapgateClient,
  type CapgateClientOptions,
  type HeadersInput,
  type InvocationReceipt,
  type InvokeInput,
  type PortableApproval,
  type PortableCapabilityDescriptor,
  type PublicError,
  type ResumeApprovalInput,
  type Scope,
} from "./client.js";
export {
  REQUIRES_APPROVAL_SUFFIX,
  toAISDKTools,
  type AISDKToolResult,
  type ToAISDKToolsOptions,
  type ToolCallInfo,
} from "./ai-sdk.js";
