// Unit tests in plain Node: `npm install && node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";

import "./app.js";
import { testing } from "wharf-sdk";

test("decides by tool", () => {
  testing.setConfig({ blocked_tools: ["write"], ask_tools: ["edit"] });
  assert.equal(testing.evaluate("write", { path: "a" }).tag, "deny");
  assert.equal(testing.evaluate("edit", { path: "a" }).tag, "ask");
  assert.equal(testing.evaluate("read", { path: "a" }).tag, "allow");
});

test("bad config is refused at load and denies", () => {
  testing.setConfig({ blocked_tools: "write" });
  assert.match(testing.validateConfig(), /invalid plugin config/);
  assert.equal(testing.evaluate("read").tag, "deny");
});
