/// <reference path="./interfaces/capgate-plugin-health.d.ts" />
/// <reference path="./interfaces/capgate-plugin-host.d.ts" />
/// <reference path="./interfaces/capgate-plugin-procedure.d.ts" />
/// <reference path="./interfaces/capgate-plugin-progress.d.ts" />
/// <reference path="./interfaces/capgate-plugin-types.d.ts" />
declare module 'capgate:plugin/procedure-plugin@0.1.0' {
  export type * as CapgatePluginHost010 from 'capgate:plugin/host@0.1.0'; // import capgate:plugin/host@0.1.0
  export type * as CapgatePluginProgress010 from 'capgate:plugin/progress@0.1.0'; // import capgate:plugin/progress@0.1.0
  export type * as CapgatePluginTypes010 from 'capgate:plugin/types@0.1.0'; // import capgate:plugin/types@0.1.0
  export * as procedure from 'capgate:plugin/procedure@0.1.0'; // export capgate:plugin/procedure@0.1.0
  export * as health from 'capgate:plugin/health@0.1.0'; // export capgate:plugin/health@0.1.0
}
