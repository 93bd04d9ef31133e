// Unit tests of the JS SDK in plain Node: `node --test test/` in sdk/js.
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  schemaOf, parseArgs, defineTool, definePolicy, defineHook, defineSkills, defineLlm, promptSection,
  ToolError, toToolError, defineConfigValidator, configure, globMatch, normalizePath, config, kv, runProcess, testing, tool, hooks,
  allow, deny, rewrite, reject, text, toolCall, usage, finish, LlmError, inComponent,
  questions,
  QuestionError,
} from "../wharf_sdk.js";

test("runs outside a component", () => {
  assert.equal(inComponent, false);
});

test("schema from a descriptor", () => {
  const s = schemaOf({
    path: { type: "string", description: "The file." },
    limit: { type: "integer", default: 10, minimum: 1 },
    tags: "string[]?",
    mode: { type: "string", enum: ["a", "b"] },
    nested: { properties: { flag: "boolean" } },
    value: "any",
    either: { anyOf: ["string", "number"], optional: true },
  });
  assert.deepEqual(s.required, ["path", "mode", "nested", "value"]);
  assert.equal(s.additionalProperties, false);
  assert.deepEqual(s.properties.path, { type: "string", description: "The file." });
  assert.deepEqual(s.properties.limit, { type: "integer", default: 10, minimum: 1 });
  assert.deepEqual(s.properties.tags, { type: "array", items: { type: "string" } });
  assert.deepEqual(s.properties.nested, {
    type: "object",
    properties: { flag: { type: "boolean" } },
    required: ["flag"],
    additionalProperties: false,
  });
  assert.deepEqual(s.properties.value, {});
  assert.equal(s.properties.either.anyOf.length, 2);
  assert.throws(() => schemaOf({ x: "strin" }), /unknown type/);
});

test("parseArgs checks types and applies defaults", () => {
  const d = { path: "string", limit: { type: "integer", default: 10, maximum: 100 }, tags: "string[]?" };
  assert.deepEqual(parseArgs(d, { path: "a" }), { path: "a", limit: 10 });
  const bad = [
    [{}, /missing required field `path`/],
    [{ path: 1 }, /\/path: expected string, got integer/],
    [{ path: "a", limit: 1.5 }, /\/limit: expected integer/],
    [{ path: "a", limit: 101 }, /\/limit: greater than 100/],
    [{ path: "a", tags: ["x", 2] }, /\/tags\/1: expected string/],
    [{ path: "a", bogus: true }, /unknown field `bogus`/],
  ];
  for (const [args, re] of bad) {
    assert.throws(() => parseArgs(d, args), (e) => e instanceof ToolError && e.code === "INVALID_ARGUMENT" && re.test(e.message));
  }
});

test("tools: registry, results and error mapping", () => {
  defineTool({ name: "t_obj", mode: "exclusive", args: { n: "integer" }, run: ({ n }, ctx) => ({ n, ws: ctx.workspace }) });
  defineTool({ name: "t_out", run: () => ({ content: "hi", details: { a: 1 } }) });
  defineTool({ name: "t_bug", run: () => null.x });
  defineTool({ name: "t_async", run: async () => "x" });
  defineTool({ name: "t_path", run: (_, ctx) => ctx.resolve("a/../b") });
  const specs = tool.listTools();
  const obj = specs.find((s) => s.name === "t_obj");
  assert.equal(obj.mode, "exclusive");
  assert.equal(JSON.parse(obj.inputSchema).properties.n.type, "integer");
  assert.equal(testing.callTool("t_obj", { n: 2 }, { workspace: "/w" }).content, JSON.stringify({ n: 2, ws: "/w" }, null, 2));
  assert.deepEqual(testing.callTool("t_out"), { content: "hi", details: { a: 1 } });
  assert.equal(testing.callTool("t_path", {}, { workspace: "/w" }).content, "/w/b");
  assert.throws(() => testing.callTool("t_bug"), { code: "INTERNAL" });
  assert.throws(() => testing.callTool("t_async"), { code: "INTERNAL" });
  assert.throws(() => testing.callTool("nope"), { code: "UNKNOWN_TOOL" });
  assert.throws(() => testing.callTool("t_obj", "{not json"), { code: "INVALID_ARGUMENT" });
  // The export throws a plain { code, message }, which componentize-js turns into `err`.
  assert.throws(() => tool.call("t_bug", "{}", { sessionId: "s", callId: "c" }), (e) => e.code === "INTERNAL" && !(e instanceof Error));
  assert.throws(() => defineTool({ name: "bad name", run() {} }), /must match/);
  assert.equal(toToolError(new SyntaxError("x")).code, "INVALID_ARGUMENT");
  assert.equal(toToolError("str").code, "INTERNAL");
});

test("config, kv and process fakes", () => {
  testing.reset();
  testing.setConfig({ limit: 3 });
  assert.equal(config.get("limit"), 3);
  assert.equal(config.get("nope", "d"), "d");
  assert.deepEqual(config.load({ limit: "integer", name: { type: "string", default: "x" } }), { limit: 3, name: "x" });
  assert.throws(() => config.load({ limit: "string" }), /invalid plugin config/);
  kv.setJson("a/1", { n: 1 });
  kv.set("a/2", "two");
  assert.deepEqual(kv.getJson("a/1"), { n: 1 });
  assert.equal(kv.getText("a/2"), "two");
  assert.deepEqual(kv.listKeys("a/"), ["a/1", "a/2"]);
  kv.delete("a/1");
  assert.equal(kv.get("a/1"), undefined);
  assert.throws(() => runProcess("ls"), { code: "PERMISSION_DENIED" });
});

test("policies, globs and paths", () => {
  assert.ok(globMatch("secrets/**", "secrets/a/b"));
  assert.ok(globMatch("**/*.pem", "x.pem"));
  assert.ok(globMatch("*.env", "a/b/.env"));
  assert.ok(!globMatch("src/*.rs", "src/a/b.rs"));
  assert.equal(normalizePath("/a/./b/../c"), "/a/c");
  definePolicy((req) => {
    if (req.tool === "boom") throw new Error("bug");
    if (req.paths().some((p) => globMatch("/w/secrets/**", p))) return deny("secret");
    if (req.tool === "fix") return rewrite({ path: "safe" });
    return undefined;
  });
  assert.deepEqual(testing.evaluate("write", { path: "secrets/x" }, { workspace: "/w" }), deny("secret"));
  assert.deepEqual(testing.evaluate("write", { path: "ok" }, { workspace: "/w" }), allow());
  assert.equal(testing.evaluate("boom").tag, "deny");
  assert.deepEqual(testing.evaluate("fix"), { tag: "rewrite", val: '{"path":"safe"}' });
});

test("config validator", () => {
  assert.equal(testing.validateConfig(), undefined);
  defineConfigValidator(() => {
    const n = config.get("n", 0);
    if (n < 0) return "n must not be negative";
    if (n > 10) throw new RangeError("n too large");
  });
  testing.setConfig({ n: 1 });
  assert.equal(testing.validateConfig(), undefined);
  configure.validate();
  testing.setConfig({ n: -1 });
  assert.equal(testing.validateConfig(), "n must not be negative");
  assert.throws(() => configure.validate(), (e) => e === "n must not be negative");
  testing.setConfig({ n: 11 });
  assert.equal(testing.validateConfig(), "RangeError: n too large");
  defineConfigValidator(null);
  testing.reset();
});

test("hooks", () => {
  defineHook("agent/request", (p) => ({ ...p, n: p.n + 1 }), { priority: 5 });
  defineHook("tools/pre-execute", () => reject("no"));
  promptSection("s", 1, "text");
  assert.deepEqual(testing.handle("agent/request", { n: 1 }), { tag: "replace", val: '{"n":2}' });
  assert.deepEqual(testing.handle("tools/pre-execute", {}), { tag: "reject", val: "no" });
  assert.deepEqual(testing.handle("session/event", {}), { tag: "pass" });
  assert.deepEqual(hooks.subscriptions().find((s) => s.point === "agent-request"), { point: "agent-request", priority: 5 });
  assert.deepEqual(hooks.promptSections(), [{ id: "s", order: 1, text: "text" }]);
  assert.throws(() => defineHook("no/such", () => {}), /unknown hook point/);
});

test("skills and llm", () => {
  defineSkills({ catalog: () => [{ name: "a", description: "A" }], load: (n) => ({ a: "text a" })[n] });
  assert.deepEqual(testing.catalog(), [{ name: "a", description: "A" }]);
  assert.equal(testing.loadSkill("a"), "text a");
  assert.throws(() => testing.loadSkill("b"), (e) => typeof e === "string" && /no skill/.test(e));
  defineLlm({
    model: () => ({ model: "m" }),
    *start() {
      yield [text("a"), text("b")];
      yield toolCall("c1", "read", { path: "x" });
      yield usage({ prompt: 1, completion: 2 });
      yield finish("tool-calls");
    },
  });
  const ev = testing.complete();
  assert.equal(ev.length, 5);
  assert.deepEqual(ev[2], { tag: "tool-call", val: { id: "c1", name: "read", arguments: '{"path":"x"}' } });
  assert.equal(ev[3].val.promptTokens, 1n);
  defineLlm({ model: () => ({ model: "m" }), start() { throw new LlmError("rate-limit", "slow down", { retryAfterMs: 5 }); } });
  assert.throws(() => testing.complete(), (e) => e.code === "rate-limit" && e.retryAfterMs === 5n);
});

test("questions are scripted outside a component", () => {
  testing.reset();
  assert.throws(() => questions.ask("Which?", { type: "object", properties: {} }), (e) => e instanceof QuestionError && e.kind === "no-session");
  testing.answerQuestions({ action: "accept", values: { name: "Ada" } }, { action: "decline" });
  assert.deepEqual(questions.ask("Who?", { type: "object" }), { action: "accept", values: { name: "Ada" } });
  assert.deepEqual(questions.askText("Who?", "{}"), { action: "decline", values: {} });
});
