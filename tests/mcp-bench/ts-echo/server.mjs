// MCP stdio server on the official TypeScript SDK with one tool, `echo
// {text}`, returning `text` as a text content block: the TypeScript MCP
// baseline of `cargo xtask bench` (the same work as the `text` component's
// `echo`). Run: `node server.mjs` after `npm ci`.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "ts-echo", version: "0.1.0" });

server.registerTool(
  "echo",
  { description: "Returns `text` unchanged.", inputSchema: { text: z.string() } },
  async ({ text }) => ({ content: [{ type: "text", text }] }),
);

await server.connect(new StdioServerTransport());
