/// <reference path="./capgate-plugin-types.d.ts" />
declare module 'capgate:plugin/policy@0.1.0' {
  /**
   * Decide. `err` is a policy failure: the host fails the whole batch closed
   * (POLICY_FAILED; the capability is left out of discovery).
   */
  export function evaluate(request: PolicyRequest): Decision;
  export type Json = import('capgate:plugin/types@0.1.0').Json;
  export type Surface = import('capgate:plugin/types@0.1.0').Surface;
  export type Actor = import('capgate:plugin/types@0.1.0').Actor;
  export type CapabilityInfo = import('capgate:plugin/types@0.1.0').CapabilityInfo;
  export type Phase = import('capgate:plugin/types@0.1.0').Phase;
  export type ApprovalRef = import('capgate:plugin/types@0.1.0').ApprovalRef;
  /**
   * The question put to a policy.
   */
  export interface PolicyRequest {
    /**
     * Which phase.
     */
    phase: Phase,
    /**
     * The surface of the call.
     */
    surface: Surface,
    /**
     * The capability.
     */
    capability: CapabilityInfo,
    /**
     * The actor.
     */
    actor: Actor,
    /**
     * The validated input (schema defaults applied); `none` during discovery.
     */
    input?: Json,
    /**
     * The application context projection (`null` when none).
     */
    context: Json,
    /**
     * The execution id (empty during discovery).
     */
    executionId: string,
    /**
     * The approval, in the execution phase after a resume.
     */
    approval?: ApprovalRef,
    /**
     * This binding's `config` from the capgate configuration file.
     */
    config: Json,
  }
  /**
   * Hold the call for a human.
   */
  export interface ApprovalRequirement {
    /**
     * Why (required, non-empty), e.g. "Refund of $649 exceeds $500".
     */
    reason: string,
    /**
     * Approval type, e.g. `manager`.
     */
    approvalType?: string,
    /**
     * Expiry; the host uses the minimum over all policies.
     */
    expiresInMs?: bigint,
  }
  /**
   * A refusal.
   */
  export interface Denial {
    /**
     * Private code for audit and logs.
     */
    code?: string,
    /**
     * Public message the model may see.
     */
    message?: string,
  }
  /**
   * A policy's stance. The host combines a batch as deny > hide > require-approval > allow.
   */
  export type Decision = DecisionAllow | DecisionDeny | DecisionHide | DecisionRequireApproval;
  /**
   * Go ahead.
   */
  export interface DecisionAllow {
    tag: 'allow',
  }
  /**
   * Refuse: POLICY_DENIED with the message.
   */
  export interface DecisionDeny {
    tag: 'deny',
    val: Denial,
  }
  /**
   * Conceal: the model is told the capability does not exist.
   */
  export interface DecisionHide {
    tag: 'hide',
  }
  /**
   * Hold for approval.
   */
  export interface DecisionRequireApproval {
    tag: 'require-approval',
    val: ApprovalRequirement,
  }
}
