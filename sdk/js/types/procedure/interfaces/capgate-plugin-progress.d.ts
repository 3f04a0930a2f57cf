/// <reference path="./capgate-plugin-types.d.ts" />
declare module 'capgate:plugin/progress@0.1.0' {
  /**
   * Report progress. Resets the host's stall watchdog and becomes an MCP progress
   * notification.
   */
  export function report(value: Json): void;
  export type Json = import('capgate:plugin/types@0.1.0').Json;
}
