// Unit tests in plain Node: `npm install && node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";

import "./app.js";
import { testing } from "wharf-sdk";

test("catalog and load", () => {
  assert.deepEqual(testing.catalog().map((s) => s.name), ["commit-message"]);
  assert.match(testing.callTool("skill", { name: "commit-message" }).content, /imperative/);
  assert.throws(() => testing.callTool("skill", { name: "nope" }), { code: "NOT_FOUND" });
});
