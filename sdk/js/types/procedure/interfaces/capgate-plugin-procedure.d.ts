/// <reference path="./capgate-plugin-types.d.ts" />
declare module 'capgate:plugin/procedure@0.1.0' {
  /**
   * Run one attempt. Must return a JSON document on success.
   */
  export function invoke(call: Call): Json;
  export type Json = import('capgate:plugin/types@0.1.0').Json;
  export type Surface = import('capgate:plugin/types@0.1.0').Surface;
  export type Actor = import('capgate:plugin/types@0.1.0').Actor;
  export type CapabilityInfo = import('capgate:plugin/types@0.1.0').CapabilityInfo;
  export type ApprovalRef = import('capgate:plugin/types@0.1.0').ApprovalRef;
  /**
   * One attempt of a governed call.
   */
  export interface Call {
    /**
     * The capability.
     */
    capability: CapabilityInfo,
    /**
     * The validated input.
     */
    input: Json,
    /**
     * The application context (`null` when none).
     */
    context: Json,
    /**
     * The surface.
     */
    surface: Surface,
    /**
     * The actor the call runs as (the original requester after a resume).
     */
    actor: Actor,
    /**
     * This execution.
     */
    executionId: string,
    /**
     * Stable across runtime retries: pass it to downstream systems.
     */
    idempotencyKey: string,
    /**
     * 1-based attempt number.
     */
    attempt: number,
    /**
     * The approval, after a resume.
     */
    approval?: ApprovalRef,
    /**
     * This binding's `config`.
     */
    config: Json,
  }
  /**
   * An intentional, contract-level failure the model may act on.
   */
  export interface DefinedError {
    /**
     * Application error code (private).
     */
    code: string,
    /**
     * Public message.
     */
    message: string,
    /**
     * Extra data (private).
     */
    data?: Json,
    /**
     * Whether retrying may help.
     */
    retryable: boolean,
  }
  /**
   * How a procedure fails; the host keeps the spec's mapping apart.
   */
  export type ProcedureError = ProcedureErrorDefined | ProcedureErrorUnauthorized | ProcedureErrorForbidden | ProcedureErrorInternal;
  /**
   * EXECUTION_FAILED, shown to the model with its message.
   */
  export interface ProcedureErrorDefined {
    tag: 'defined',
    val: DefinedError,
  }
  /**
   * UNAUTHENTICATED.
   */
  export interface ProcedureErrorUnauthorized {
    tag: 'unauthorized',
    val: string,
  }
  /**
   * FORBIDDEN.
   */
  export interface ProcedureErrorForbidden {
    tag: 'forbidden',
    val: string,
  }
  /**
   * EXECUTION_FAILED, hidden from the model ("The operation failed.").
   */
  export interface ProcedureErrorInternal {
    tag: 'internal',
    val: string,
  }
}
