declare module 'capgate:plugin/types@0.1.0' {
  /**
   * JSON text (RFC 8259). Always a complete JSON document.
   */
  export type Json = string;
  /**
   * The door a call came through. Fixed by the host's adapter, never by a model.
   * # Variants
   * 
   * ## `"direct"`
   * 
   * ## `"ai-sdk"`
   * 
   * ## `"mcp"`
   * 
   * ## `"workflow"`
   * 
   * ## `"test"`
   */
  export type Surface = 'direct' | 'ai-sdk' | 'mcp' | 'workflow' | 'test';
  /**
   * The kind of authenticated principal.
   * # Variants
   * 
   * ## `"user"`
   * 
   * ## `"service"`
   * 
   * ## `"agent"`
   * 
   * ## `"anonymous"`
   */
  export type ActorKind = 'user' | 'service' | 'agent' | 'anonymous';
  /**
   * What a capability does to the world.
   * # Variants
   * 
   * ## `"none"`
   * 
   * ## `"read"`
   * 
   * ## `"write"`
   * 
   * ## `"destructive"`
   * 
   * ## `"external"`
   */
  export type SideEffect = 'none' | 'read' | 'write' | 'destructive' | 'external';
  /**
   * How much harm a wrong call could do.
   * # Variants
   * 
   * ## `"low"`
   * 
   * ## `"medium"`
   * 
   * ## `"high"`
   * 
   * ## `"critical"`
   */
  export type Risk = 'low' | 'medium' | 'high' | 'critical';
  /**
   * When a policy runs: building tool lists (no input), before approval (stage 7), or
   * right before execution (stage 9, after any approval).
   * # Variants
   * 
   * ## `"discovery"`
   * 
   * ## `"invocation"`
   * 
   * ## `"execution"`
   */
  export type Phase = 'discovery' | 'invocation' | 'execution';
  /**
   * The authenticated principal a call runs as. Built by the host from credentials,
   * never from model output.
   */
  export interface Actor {
    /**
     * Stable id, e.g. `u_dana`.
     */
    id: string,
    /**
     * What kind of principal.
     */
    kind: ActorKind,
    /**
     * Application attributes (org, permissions, ...) as a JSON value (`null` when none).
     */
    attributes: Json,
  }
  /**
   * What a plugin may know about the capability being called.
   */
  export interface CapabilityInfo {
    /**
     * Canonical id, e.g. `orders.refund`.
     */
    id: string,
    /**
     * Its side effect.
     */
    sideEffect: SideEffect,
    /**
     * Its risk.
     */
    risk: Risk,
    /**
     * Its tags.
     */
    tags: Array<string>,
  }
  /**
   * The approval a resumed execution runs under.
   */
  export interface ApprovalRef {
    /**
     * `apr_…`
     */
    id: string,
    /**
     * Who approved.
     */
    approverId: string,
    /**
     * Their kind.
     */
    approverKind: ActorKind,
  }
}
