// A tiny stand-in for the capgate HTTP gateway (routes of host/gateway/src/wire.rs), for
// unit tests of the client: it records every request and answers from a handler.

import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface Recorded {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  body: any;
}

export type Answer = { status?: number; body: unknown };

export interface FakeGateway {
  url: string;
  requests: Recorded[];
  close(): Promise<void>;
}

export async function startFakeGateway(answer: (req: Recorded) => Answer | Promise<Answer>): Promise<FakeGateway> {
  const requests: Recorded[] = [];
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString("utf8");
    const recorded: Recorded = {
      method: req.method ?? "",
      path: (req.url ?? "").replace(/^\/capgate/, ""),
      headers: req.headers,
      body: text ? JSON.parse(text) : undefined,
    };
    requests.push(recorded);
    const a = await answer(recorded);
    res.writeHead(a.status ?? 200, { "content-type": "application/json" });
    res.end(JSON.stringify(a.body));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/capgate`,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

export function descriptor(id: string, requiresApproval: boolean): any {
  return {
    version: 1,
    id,
    path: id.split("."),
    description: `The ${id} capability.`,
    inputSchema: {
      type: "object",
      properties: { orderId: { type: "string" }, amount: { type: "number" } },
      required: ["orderId"],
    },
    sideEffect: "write",
    risk: "high",
    tags: [],
    requiresApproval,
    discovery: "discoverable",
    toolNames: { aiSdk: id.replace(/\./g, "_"), mcp: id.replace(/\./g, "_") },
    contractDigest: "sha256:abc",
  };
}
