/**
 * A small client for the capgate HTTP capability gateway (host/gateway/src/wire.rs):
 * `POST {url}/describe|invoke|getInvocation|getApproval|resumeApproval` and
 * `GET {url}/contract`, authenticated with whatever headers the caller supplies
 * (typically `Authorization: Bearer <token>`). The identity of every call is the
 * credential's, never anything in the request body.
 */

/** Narrows discovery (a convenience, never an authorization check). */
export interface Scope {
  tags?: string[];
  ids?: string[];
}

/** The model-safe error shape (SI-9). */
export interface PublicError {
  code: string;
  message: string;
  retryable: boolean;
  details?: { issues: Array<{ path: string; message: string }> };
}

/** What a human must decide (no stored input, no actor record). */
export interface PortableApproval {
  id: string;
  capabilityId: string;
  status: "pending" | "approved" | "rejected" | "expired" | "cancelled" | "consumed";
  reasons: string[];
  types: string[];
  requestedAt: string;
  expiresAt: string;
}

/** The result of `invoke` and `resumeApproval`. */
export type CapabilityOutcome =
  | { status: "completed"; invocationId: string; executionId: string; output: unknown }
  | {
      status: "approval-required";
      invocationId: string;
      executionId: string;
      approval: PortableApproval;
    }
  | { status: "failed"; invocationId: string; executionId: string; error: PublicError }
  | { status: "cancelled"; invocationId: string; executionId: string; error: PublicError }
  | { status: "outcome-unknown"; invocationId: string };

/** One capability of the portable contract (version 1). */
export interface PortableCapabilityDescriptor {
  version: number;
  id: string;
  path: string[];
  description: string;
  inputSchema: Record<string, unknown> | boolean;
  sideEffect: "none" | "read" | "write" | "destructive" | "external";
  risk: "low" | "medium" | "high" | "critical";
  tags: string[];
  requiresApproval: boolean;
  /** `contextual` entries are left out of model tool lists (a UI presents them). */
  discovery: "discoverable" | "contextual";
  toolNames: { aiSdk: string; mcp: string };
  contractDigest: string;
}

/** A receipt of an invocation. */
export interface InvocationReceipt {
  invocationId: string;
  capabilityId: string;
  contractDigest: string;
  correlationId?: string;
  approvalId?: string;
  state: "pending" | "settled";
  outcome?: CapabilityOutcome;
  createdAt: string;
  updatedAt: string;
}

/** `invoke` request. */
export interface InvokeInput {
  capabilityId: string;
  input: unknown;
  /** Stable identity of this call, chosen before dispatch (retries reuse it). */
  invocationId: string;
  correlationId?: string;
  contractDigest?: string;
}

/** `resumeApproval` request. */
export interface ResumeApprovalInput {
  approvalId: string;
  /** The ORIGINAL invocation id of the call that asked for approval. */
  invocationId: string;
  /** Carried into the resumed execution and its audit events. */
  correlationId?: string;
  /** Checked as on invoke: a stale digest is `CONTRACT_MISMATCH` and nothing runs. */
  contractDigest?: string;
}

/** Per-call options. */
export interface CallOptions {
  signal?: AbortSignal;
}

/** Headers, or a function producing them per request (e.g. to refresh a token). */
export type HeadersInput =
  | Record<string, string>
  | (() => Record<string, string> | Promise<Record<string, string>>);

/** Options of {@link createCapgateClient}. */
export interface CapgateClientOptions {
  /** The gateway mount, e.g. `https://api.example.com/capgate`. */
  url: string;
  /** Sent with every request, e.g. `{ Authorization: "Bearer …" }`. */
  headers?: HeadersInput;
  /** A fetch implementation (default: the global one). */
  fetch?: typeof fetch;
}

/** A gateway-level failure (bad request, authentication, transport). */
export class CapgateError extends Error {
  readonly code: string;
  readonly status: number | undefined;
  readonly retryable: boolean;

  constructor(code: string, message: string, options: { status?: number; retryable?: boolean; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = "CapgateError";
    this.code = code;
    this.status = options.status;
    this.retryable = options.retryable ?? false;
  }

  /** The model-safe shape of this error. */
  toPublic(): PublicError {
    return { code: this.code, message: this.message, retryable: this.retryable };
  }
}

/** The gateway's five operations and its contract. */
export interface CapgateClient {
  /** The capabilities this caller may see. */
  describe(input?: { scope?: Scope }, options?: CallOptions): Promise<PortableCapabilityDescriptor[]>;
  /** One governed call. */
  invoke(input: InvokeInput, options?: CallOptions): Promise<CapabilityOutcome>;
  /** The receipt of an invocation, or null. */
  getInvocation(input: { invocationId: string }, options?: CallOptions): Promise<InvocationReceipt | null>;
  /** An approval, or null. */
  getApproval(input: { approvalId: string }, options?: CallOptions): Promise<PortableApproval | null>;
  /** Continue a call after a human approved it. */
  resumeApproval(input: ResumeApprovalInput, options?: CallOptions): Promise<CapabilityOutcome>;
  /** The portable contract. */
  contract(options?: CallOptions): Promise<PortableCapabilityDescriptor[]>;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Create a client over the gateway mounted at `options.url`. */
export function createCapgateClient(options: CapgateClientOptions): CapgateClient {
  const base = options.url.replace(/\/+$/, "");
  const doFetch = options.fetch ?? globalThis.fetch;
  if (typeof doFetch !== "function") {
    throw new CapgateError("ADAPTER_ERROR", "no fetch implementation is available");
  }

  async function headers(): Promise<Record<string, string>> {
    const h = typeof options.headers === "function" ? await options.headers() : options.headers;
    return { ...(h ?? {}) };
  }

  async function request<T>(method: "GET" | "POST", op: string, body: unknown, call?: CallOptions): Promise<T> {
    const h = await headers();
    h["accept"] = "application/json";
    if (method === "POST") h["content-type"] = "application/json";
    let response: Response;
    try {
      response = await doFetch(`${base}/${op}`, {
        method,
        headers: h,
        body: method === "POST" ? JSON.stringify(body ?? {}) : undefined,
        signal: call?.signal,
      });
    } catch (cause) {
      if (call?.signal?.aborted) {
        throw new CapgateError("CANCELLED", "The request was cancelled.", { cause });
      }
      throw new CapgateError("NETWORK_ERROR", `The gateway could not be reached: ${String(cause)}`, {
        retryable: true,
        cause,
      });
    }
    const text = await response.text();
    let parsed: unknown = undefined;
    if (text.length > 0) {
      try {
        parsed = JSON.parse(text);
      } catch (cause) {
        throw new CapgateError("BAD_RESPONSE", `The gateway answered HTTP ${response.status} with non-JSON`, {
          status: response.status,
          cause,
        });
      }
    }
    if (!response.ok) {
      const e = isObject(parsed) && isObject(parsed.error) ? parsed.error : {};
      throw new CapgateError(
        typeof e.code === "string" ? e.code : `HTTP_${response.status}`,
        typeof e.message === "string" ? e.message : `The gateway answered HTTP ${response.status}`,
        {
          status: response.status,
          retryable: typeof e.retryable === "boolean" ? e.retryable : response.status >= 500,
        },
      );
    }
    return (parsed ?? null) as T;
  }

  return {
    describe: (input = {}, call) => request("POST", "describe", input, call),
    invoke: (input, call) => request("POST", "invoke", input, call),
    getInvocation: (input, call) => request("POST", "getInvocation", input, call),
    getApproval: (input, call) => request("POST", "getApproval", input, call),
    resumeApproval: (input, call) => request("POST", "resumeApproval", input, call),
    contract: (call) => request("GET", "contract", undefined, call),
  };
}
