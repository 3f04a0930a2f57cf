/// <reference path="./interfaces/capgate-plugin-host.d.ts" />
/// <reference path="./interfaces/capgate-plugin-redactor.d.ts" />
/// <reference path="./interfaces/capgate-plugin-types.d.ts" />
declare module 'capgate:plugin/redactor-plugin@0.1.0' {
  export type * as CapgatePluginHost010 from 'capgate:plugin/host@0.1.0'; // import capgate:plugin/host@0.1.0
  export type * as CapgatePluginTypes010 from 'capgate:plugin/types@0.1.0'; // import capgate:plugin/types@0.1.0
  export * as redactor from 'capgate:plugin/redactor@0.1.0'; // export capgate:plugin/redactor@0.1.0
}
