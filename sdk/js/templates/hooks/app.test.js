// Unit tests in plain Node: `npm install && node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";

import "./app.js";
import { testing } from "wharf-sdk";

test("rejects dangerous calls", () => {
  assert.equal(testing.handle("tools/pre-execute", { arguments: { command: "rm -rf /" } }).tag, "reject");
  assert.equal(testing.handle("tools/pre-execute", { arguments: { command: "ls" } }).tag, "pass");
});
