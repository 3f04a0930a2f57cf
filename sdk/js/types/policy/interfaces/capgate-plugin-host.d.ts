declare module 'capgate:plugin/host@0.1.0' {
  /**
   * Write a log line into the host's tracing. Lines are capped in size and rate.
   */
  export function log(level: LogLevel, message: string): void;
  /**
   * Severity of a log line.
   * # Variants
   * 
   * ## `"trace"`
   * 
   * ## `"debug"`
   * 
   * ## `"info"`
   * 
   * ## `"warn"`
   * 
   * ## `"error"`
   */
  export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error';
}
