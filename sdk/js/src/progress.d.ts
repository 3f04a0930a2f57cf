/** Report progress (a JSON text): resets the stall watchdog and becomes an MCP progress notification. */
export function report(value: string): void;
