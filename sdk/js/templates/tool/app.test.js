// Unit tests in plain Node: `npm install && node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";

import "./app.js";
import { testing } from "wharf-sdk";

test("greets", () => {
  assert.equal(testing.callTool("{{ident}}", { name: "Wharf" }).content, "Hello, Wharf!");
});

test("bad arguments are tool errors", () => {
  assert.throws(() => testing.callTool("{{ident}}", { name: "x", times: 0 }), { code: "INVALID_ARGUMENT" });
  assert.throws(() => testing.callTool("{{ident}}", {}), { code: "INVALID_ARGUMENT" });
});

test("schema", () => {
  assert.deepEqual(testing.tools()["{{ident}}"].inputSchema.required, ["name"]);
});
