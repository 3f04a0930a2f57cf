export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error';
/** Write a log line into the host's tracing (capped in size and rate). */
export function log(level: LogLevel, message: string): void;
