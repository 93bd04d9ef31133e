// Unit tests of json_diff in plain Node: `node --test` (after `npm install`).
// They run the tool as the component does (argument checking, error
// mapping); `wharf plugin call` tests the built component.
import { test } from "node:test";
import assert from "node:assert/strict";

import "./app.js";
import { testing, ToolError } from "wharf-sdk";

/** Applies an RFC 6902 patch (add/remove/replace) to a deep copy. */
function apply(doc, patch) {
  let root = structuredClone(doc);
  for (const op of patch) {
    const parts = op.path.split("/").slice(1).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
    if (parts.length === 0) {
      root = op.op === "remove" ? undefined : structuredClone(op.value);
      continue;
    }
    const last = parts.pop();
    let parent = root;
    for (const p of parts) parent = parent[p];
    if (Array.isArray(parent)) {
      const i = last === "-" ? parent.length : Number(last);
      if (op.op === "add") parent.splice(i, 0, structuredClone(op.value));
      else if (op.op === "remove") parent.splice(i, 1);
      else parent[i] = structuredClone(op.value);
    } else if (op.op === "remove") delete parent[last];
    else parent[last] = structuredClone(op.value);
  }
  return root;
}

const before = { name: "wharf", tags: ["a", "b", "c"], deps: [{ id: 1, v: "1.0" }, { id: 2, v: "2.0" }], meta: { at: 1 } };
const after = { name: "wharf2", tags: ["a", "c"], deps: [{ id: 2, v: "2.1" }, { id: 3, v: "0.1" }], meta: { at: 2 }, new: true };

test("schema lists the arguments", () => {
  const s = testing.tools().json_diff.inputSchema;
  assert.deepEqual(s.required, ["before", "after"]);
  assert.deepEqual(s.properties.array_mode.enum, ["index", "set", "key"]);
  assert.equal(s.additionalProperties, false);
});

for (const mode of ["index", "set", "key"]) {
  test(`patch turns before into after (${mode})`, () => {
    const out = testing.callTool("json_diff", { before, after, array_mode: mode });
    assert.deepEqual(apply(before, out.details.patch), after);
    assert.match(out.content, /^\d+ change\(s\)/);
  });
}

test("readable lines and ignore globs", () => {
  const out = testing.callTool("json_diff", { before, after, array_mode: "key", ignore: ["/meta/*"] });
  assert.match(out.content, /~ \/name: "wharf" → "wharf2"/);
  assert.match(out.content, /\+ \/new: true/);
  assert.match(out.content, /~ \/deps\/1\/v: "2.0" → "2.1"/);
  assert.doesNotMatch(out.content, /meta/);
});

test("key mode falls back to positions for unkeyed arrays", () => {
  const out = testing.callTool("json_diff", { before: [1, 2], after: [1, 3], array_mode: "key" });
  assert.match(out.content, /~ \/1: 2 → 3/);
});

test("equal values and parsed strings", () => {
  assert.equal(testing.callTool("json_diff", { before: [1, { a: 2 }], after: [1, { a: 2 }] }).content, "No differences.");
  const out = testing.callTool("json_diff", { before: '{"a":1}', after: '{"a":2}', parse_strings: true });
  assert.match(out.content, /~ \/a: 1 → 2/);
});

test("errors are clean tool errors", () => {
  assert.throws(() => testing.callTool("json_diff", { before: 1 }), (e) => e instanceof ToolError && e.code === "INVALID_ARGUMENT" && /after/.test(e.message));
  assert.throws(() => testing.callTool("json_diff", { before: "{", after: "1", parse_strings: true }), (e) => e.code === "INVALID_ARGUMENT");
  assert.throws(() => testing.callTool("json_diff", { before: 1, after: 2, max_changes: 0 }), (e) => e.code === "INVALID_ARGUMENT");
});
