/// <reference path="./capgate-plugin-types.d.ts" />
declare module 'capgate:plugin/health@0.1.0' {
  /**
   * `ok` when the provider can serve; `err` with a reason when it cannot.
   */
  export function check(config: Json): void;
  export type Json = import('capgate:plugin/types@0.1.0').Json;
}
