// Unit tests in plain Node: `npm install && node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";

import "./app.js";
import { testing } from "wharf-sdk";

test("echoes the last user message", () => {
  const events = testing.complete({ messages: [{ role: "user", content: "hi" }] });
  assert.deepEqual(events, [{ tag: "text", val: "echo: hi" }, { tag: "finish", val: "stop" }]);
});
