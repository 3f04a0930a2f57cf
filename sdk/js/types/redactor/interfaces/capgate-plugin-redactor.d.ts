/// <reference path="./capgate-plugin-types.d.ts" />
declare module 'capgate:plugin/redactor@0.1.0' {
  /**
   * Map a validated output to what the model may see. `err` withholds the output.
   */
  export function redactOutput(capability: CapabilityInfo, output: Json, config: Json): Json;
  /**
   * Map a stored approval input to what a human reviewer sees. `err` withholds the input.
   */
  export function redactApprovalInput(capability: CapabilityInfo, input: Json, config: Json): Json;
  export type Json = import('capgate:plugin/types@0.1.0').Json;
  export type CapabilityInfo = import('capgate:plugin/types@0.1.0').CapabilityInfo;
}
