// wharf-sdk: write Wharf plugins in JavaScript, built with componentize-js.
//
// A Wharf plugin is a WebAssembly component implementing the WIT contract
// `wharf:plugin@0.1.0`. componentize-js turns an ES module into such a
// component; this module turns the contract into a few `define*` calls and
// plain JavaScript values:
//
//   import { definePlugin, defineTool } from "wharf-sdk";
//   definePlugin({ name: "shout", version: "0.1.0", description: "Upper-cases text." });
//   defineTool({
//     name: "shout",
//     description: "Returns the text in upper case.",
//     args: { text: { type: "string", description: "The text to shout." } },
//     run: ({ text }) => text.toUpperCase(),
//   });
//   export { plugin, tool } from "wharf-sdk"; // the exports of world `tool-plugin`
//
// `wharf plugin build` bundles the module (esbuild, with the
// `wharf-component` condition so the host imports are the real ones) and
// runs componentize-js on the bundle. In plain Node the same code runs with
// fake host imports, so plugin logic can be unit-tested with `node --test`.
//
// Exports by kind (re-export the names the world needs):
//   tool    defineTool                          tool-plugin:   plugin, tool
//   policy  definePolicy, defineConfigValidator policy-plugin: plugin, policy, configure
//   hooks   defineHook, promptSection           hooks-plugin:  plugin, hooks
//   skills  defineSkills + defineTool           skills-plugin: plugin, skills, tool
//   llm     defineLlm                           llm-plugin:    plugin, llm
//
// A tool or a policy may ask the session's user a question while it runs
// (`questions.ask(message, schema)`): set `"questions": true` under `"wharf"`
// in package.json (the build then targets `tool-questions-plugin` or
// `policy-questions-plugin`); the operator grants `questions = true`.

import * as host from "#host";
import { askImport } from "#questions";

/** The WIT package this SDK targets. */
export const WIT_PACKAGE = "wharf:plugin@0.1.0";
/** This SDK's version. */
export const SDK_VERSION = "0.1.0";
/** Whether the code runs inside a component (else plain Node). */
export const inComponent = host.inComponent;

// ---------------------------------------------------------------------------
// Self-description
// ---------------------------------------------------------------------------

const FS_ACCESS = ["none", "read-only", "read-write"];
let info = { name: "plugin", version: "0.1.0", description: "", requests: grantRequest({}) };

function grantRequest({ filesystem = "none", hosts = [], env = [], process = false, memoryMb = undefined }) {
  if (!FS_ACCESS.includes(filesystem)) {
    throw new Error(`filesystem must be one of ${FS_ACCESS.join(", ")}, not ${filesystem}`);
  }
  return { filesystem, hosts: [...hosts], env: [...env], process: Boolean(process), memoryMb };
}

/**
 * Declares the plugin's self-description and what it asks to be granted:
 * `filesystem` ("none" | "read-only" | "read-write"), `hosts` (outbound HTTP
 * host patterns), `env` (variable names), `process`, `memoryMb`. The
 * effective grant is this request intersected with the operator's.
 */
export function definePlugin({ name, version = "0.1.0", description = "", ...requests }) {
  info = { name, version, description, requests: grantRequest(requests) };
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/** A failed tool call the model should see and repair. */
export class ToolError extends Error {
  /** @param {string} code stable SCREAMING_SNAKE_CASE id @param {string} message for the model */
  constructor(code, message) {
    super(message);
    this.name = "ToolError";
    this.code = code;
  }
  static invalidArgument(message) {
    return new ToolError("INVALID_ARGUMENT", message);
  }
  static notFound(message) {
    return new ToolError("NOT_FOUND", message);
  }
  static permissionDenied(message) {
    return new ToolError("PERMISSION_DENIED", message);
  }
  static unknownTool(name) {
    return new ToolError("UNKNOWN_TOOL", `this plugin has no tool named \`${name}\``);
  }
  static internal(message) {
    return new ToolError("INTERNAL", message);
  }
}

/**
 * Maps a thrown value to a clean tool error: a ToolError as it is; a
 * SyntaxError (bad JSON) or RangeError → INVALID_ARGUMENT; any other Error →
 * INTERNAL with its name and message; a thrown non-error → INTERNAL.
 */
export function toToolError(e) {
  if (e instanceof ToolError) return e;
  if (e instanceof SyntaxError || e instanceof RangeError) {
    return new ToolError("INVALID_ARGUMENT", e.message);
  }
  if (e instanceof Error) return new ToolError("INTERNAL", `${e.name}: ${e.message}`);
  if (e && typeof e === "object" && typeof e.code === "string" && typeof e.message === "string") {
    return new ToolError(e.code, e.message);
  }
  return new ToolError("INTERNAL", `thrown: ${String(e)}`);
}

// ---------------------------------------------------------------------------
// Typed arguments: a plain descriptor object -> JSON Schema + checking
// ---------------------------------------------------------------------------

const SCALARS = ["string", "number", "integer", "boolean", "null", "any", "object", "array"];
const PASSTHROUGH = [
  "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
  "minLength", "maxLength", "pattern", "format", "minItems", "maxItems", "uniqueItems",
  "minProperties", "maxProperties", "examples", "const",
];

/**
 * Normalizes a field descriptor. Accepted forms:
 *   "string" | "number" | "integer" | "boolean" | "any" | "object" | "array"
 *   with suffixes "[]" (array of) and "?" (optional): "string[]?"
 *   { type, description, optional, default, enum, items, properties,
 *     additionalProperties, minimum, maxLength, … } (JSON Schema keywords pass through)
 *   { anyOf: [descriptor, …] }
 */
function norm(d) {
  if (typeof d === "string") {
    let s = d.trim();
    let optional = false;
    if (s.endsWith("?")) {
      optional = true;
      s = s.slice(0, -1);
    }
    if (s.endsWith("[]")) return { type: "array", items: norm(s.slice(0, -2)), optional };
    if (!SCALARS.includes(s)) throw new Error(`wharf-sdk: unknown type "${s}" in an args descriptor`);
    return { type: s, optional };
  }
  if (d === null || typeof d !== "object" || Array.isArray(d)) {
    throw new Error(`wharf-sdk: bad args descriptor ${JSON.stringify(d)}`);
  }
  const out = { ...d };
  if (out.type === undefined && out.enum === undefined && out.anyOf === undefined) {
    out.type = out.properties ? "object" : "any";
  }
  if (out.items !== undefined) out.items = norm(out.items);
  if (out.properties !== undefined) {
    out.properties = Object.fromEntries(Object.entries(out.properties).map(([k, v]) => [k, norm(v)]));
  }
  if (out.anyOf !== undefined) out.anyOf = out.anyOf.map(norm);
  if (out.additionalProperties && typeof out.additionalProperties === "object") {
    out.additionalProperties = norm(out.additionalProperties);
  }
  if (out.default !== undefined) out.optional = true;
  return out;
}

function fieldSchema(n) {
  const s = {};
  if (n.anyOf) s.anyOf = n.anyOf.map(fieldSchema);
  if (n.type && n.type !== "any") s.type = n.type;
  if (n.description) s.description = n.description;
  if (n.enum) s.enum = [...n.enum];
  if (n.default !== undefined) s.default = n.default;
  for (const k of PASSTHROUGH) if (n[k] !== undefined) s[k] = n[k];
  if (n.type === "array" && n.items) s.items = fieldSchema(n.items);
  if (n.type === "object" && n.properties) Object.assign(s, objectSchema(n.properties, n.additionalProperties));
  else if (n.type === "object" && n.additionalProperties !== undefined) {
    s.additionalProperties =
      typeof n.additionalProperties === "object" ? fieldSchema(n.additionalProperties) : n.additionalProperties;
  }
  return s;
}

function objectSchema(props, additional = false) {
  const properties = {};
  const required = [];
  for (const [k, n] of Object.entries(props)) {
    properties[k] = fieldSchema(n);
    if (!n.optional) required.push(k);
  }
  const s = { type: "object", properties };
  if (required.length) s.required = required;
  s.additionalProperties = typeof additional === "object" ? fieldSchema(additional) : additional;
  return s;
}

/** The JSON Schema of an args descriptor (an object of field descriptors). */
export function schemaOf(args = {}) {
  const props = Object.fromEntries(Object.entries(args).map(([k, v]) => [k, norm(v)]));
  return objectSchema(props);
}

function jsonType(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (Number.isInteger(v)) return "integer";
  return typeof v;
}

function where(path) {
  return path || "/";
}

function check(n, v, path) {
  if (n.anyOf) {
    const errs = [];
    for (const alt of n.anyOf) {
      try {
        return check(alt, v, path);
      } catch (e) {
        errs.push(e.message);
      }
    }
    throw new ToolError("INVALID_ARGUMENT", `${where(path)}: matches none of: ${errs.join("; ")}`);
  }
  const bad = (what) => new ToolError("INVALID_ARGUMENT", `${where(path)}: expected ${what}, got ${jsonType(v)}`);
  switch (n.type) {
    case "string":
      if (typeof v !== "string") throw bad("string");
      if (n.minLength !== undefined && [...v].length < n.minLength) throw ToolError.invalidArgument(`${where(path)}: shorter than ${n.minLength}`);
      if (n.maxLength !== undefined && [...v].length > n.maxLength) throw ToolError.invalidArgument(`${where(path)}: longer than ${n.maxLength}`);
      break;
    case "integer":
      if (!Number.isInteger(v)) throw bad("integer");
      break;
    case "number":
      if (typeof v !== "number") throw bad("number");
      break;
    case "boolean":
      if (typeof v !== "boolean") throw bad("boolean");
      break;
    case "null":
      if (v !== null) throw bad("null");
      break;
    case "array":
      if (!Array.isArray(v)) throw bad("array");
      if (n.minItems !== undefined && v.length < n.minItems) throw ToolError.invalidArgument(`${where(path)}: fewer than ${n.minItems} items`);
      if (n.maxItems !== undefined && v.length > n.maxItems) throw ToolError.invalidArgument(`${where(path)}: more than ${n.maxItems} items`);
      if (n.items) v = v.map((x, i) => check(n.items, x, `${path}/${i}`));
      break;
    case "object":
      if (v === null || typeof v !== "object" || Array.isArray(v)) throw bad("object");
      if (n.properties) v = checkObject(n.properties, v, path, n.additionalProperties ?? false);
      break;
    default:
      break;
  }
  if (typeof v === "number") {
    if (n.minimum !== undefined && v < n.minimum) throw ToolError.invalidArgument(`${where(path)}: less than ${n.minimum}`);
    if (n.maximum !== undefined && v > n.maximum) throw ToolError.invalidArgument(`${where(path)}: greater than ${n.maximum}`);
  }
  if (n.enum && !n.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) {
    throw ToolError.invalidArgument(`${where(path)}: expected one of ${n.enum.map((e) => JSON.stringify(e)).join(", ")}, got ${JSON.stringify(v)}`);
  }
  return v;
}

function checkObject(props, v, path, additional) {
  const out = {};
  for (const [k, n] of Object.entries(props)) {
    if (v[k] === undefined) {
      if (n.default !== undefined) out[k] = structuredClone(n.default);
      else if (!n.optional) throw ToolError.invalidArgument(`${where(path)}: missing required field \`${k}\``);
      continue;
    }
    out[k] = check(n, v[k], `${path}/${k}`);
  }
  for (const k of Object.keys(v)) {
    if (k in props) continue;
    if (additional === false) {
      throw ToolError.invalidArgument(`${where(path)}: unknown field \`${k}\`; expected ${Object.keys(props).join(", ")}`);
    }
    out[k] = typeof additional === "object" ? check(additional, v[k], `${path}/${k}`) : v[k];
  }
  return out;
}

/**
 * Checks decoded JSON against an args descriptor and applies defaults; a
 * mismatch throws ToolError INVALID_ARGUMENT naming the JSON Pointer.
 */
export function parseArgs(args, value) {
  const props = Object.fromEntries(Object.entries(args).map(([k, v]) => [k, norm(v)]));
  return checkObject(props, value ?? {}, "", false);
}

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

const TOOLS = new Map();
const NAME_RE = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * Registers a tool: `{ name, description, mode = "parallel", args, run }`.
 * `args` is a descriptor object (see `schemaOf`) or `{ schema }` for a
 * hand-written JSON Schema; `run(args, ctx)` gets the checked arguments
 * (with defaults) and `{ sessionId, callId, workspace, resolve(path) }`, and
 * returns a string, `{ content, details }`, or any JSON value (sent as JSON
 * text). `run` must be synchronous. Throw ToolError for failures.
 */
export function defineTool({ name, description = "", mode = "parallel", args = {}, schema, run }) {
  if (!NAME_RE.test(name)) throw new Error(`tool name "${name}" must match [a-zA-Z0-9_-]{1,64}`);
  if (mode !== "parallel" && mode !== "exclusive") throw new Error(`mode must be "parallel" or "exclusive"`);
  if (typeof run !== "function") throw new Error(`tool "${name}": run must be a function`);
  const inputSchema = schema ?? schemaOf(args);
  TOOLS.set(name, { name, description, mode, args: schema ? null : args, inputSchema, run });
}

function makeContext(c) {
  const workspace = c?.workspace ?? undefined;
  return {
    sessionId: c?.sessionId ?? "test",
    callId: c?.callId ?? "call_0",
    workspace,
    /** `path` made absolute against the workspace, `..` removed lexically. */
    resolve(path) {
      let p = path;
      if (!p.startsWith("/")) {
        if (!workspace) throw ToolError.invalidArgument(`\`${path}\` is relative but the session has no workspace`);
        p = `${workspace}/${p}`;
      }
      return normalizePath(p);
    },
  };
}

/** Lexical normalization of an absolute POSIX path. */
export function normalizePath(p) {
  const out = [];
  for (const seg of p.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") out.pop();
    else out.push(seg);
  }
  return "/" + out.join("/");
}

function toOutput(r) {
  if (typeof r === "string") return { content: r, details: undefined };
  if (r === undefined || r === null) return { content: "", details: undefined };
  if (typeof r === "object" && typeof r.content === "string" && Object.keys(r).every((k) => k === "content" || k === "details")) {
    return { content: r.content, details: r.details === undefined ? undefined : JSON.stringify(r.details) };
  }
  return { content: JSON.stringify(r, null, 2), details: undefined };
}

function runTool(name, argumentsJson, context) {
  const t = TOOLS.get(name);
  if (!t) throw ToolError.unknownTool(name);
  try {
    const raw = argumentsJson && argumentsJson.trim() ? JSON.parse(argumentsJson) : {};
    const a = t.args ? parseArgs(t.args, raw) : raw;
    const r = t.run(a, makeContext(context));
    if (r && typeof r.then === "function") {
      throw new ToolError("INTERNAL", `tool "${name}" returned a Promise; run must be synchronous`);
    }
    return toOutput(r);
  } catch (e) {
    const err = toToolError(e);
    if (err.code === "INTERNAL" && e instanceof Error && e.stack) log.debug(`${name}: ${e.stack}`);
    throw err;
  }
}

// ---------------------------------------------------------------------------
// Host imports: log, config, kv, process
// ---------------------------------------------------------------------------

/** The host's log (`WHARF_LOG=debug` shows it); stderr outside a component. */
export const log = Object.fromEntries(
  ["trace", "debug", "info", "warn", "error"].map((level) => [level, (msg) => host.logWrite(level, String(msg))]),
);

/** This plugin's own configuration (its profile row's `config` table). */
export const config = {
  /** The whole table (`{}` when there is none). */
  all() {
    try {
      const v = JSON.parse(host.configJson() || "{}");
      return v && typeof v === "object" && !Array.isArray(v) ? v : {};
    } catch {
      return {};
    }
  },
  /** One top-level key (`fallback` when absent). */
  get(key, fallback = undefined) {
    const v = this.all()[key];
    return v === undefined ? fallback : v;
  },
  /** The table checked against an args-style descriptor, with defaults. */
  load(descriptor) {
    try {
      return parseArgs(descriptor, this.all());
    } catch (e) {
      throw new ToolError("INVALID_ARGUMENT", `invalid plugin config: ${e.message}`);
    }
  },
};

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A small key-value store private to this plugin, kept across calls. */
export const kv = {
  get: (key) => host.kv.get(key) ?? undefined,
  getText: (key) => {
    const v = host.kv.get(key);
    return v === undefined || v === null ? undefined : dec.decode(v);
  },
  set(key, value) {
    const bytes = typeof value === "string" ? enc.encode(value) : value;
    try {
      host.kv.set(key, bytes);
    } catch (e) {
      throw new ToolError("RESOURCE_EXHAUSTED", `kv: ${e?.payload ?? e?.message ?? e}`);
    }
  },
  delete: (key) => host.kv.delete(key),
  listKeys: (prefix = "") => host.kv.listKeys(prefix),
  getJson(key, fallback = undefined) {
    const t = this.getText(key);
    return t === undefined ? fallback : JSON.parse(t);
  },
  setJson(key, value) {
    this.set(key, JSON.stringify(value));
  },
};

/**
 * Runs `/bin/sh -c command` under the host's OS sandbox (only when granted
 * `process`). Returns `{ exitCode, signal, timedOut, output, outputBytes,
 * spillPath }`; throws ToolError PERMISSION_DENIED when not granted.
 */
export function runProcess(command, { workdir, timeoutMs, stdin } = {}) {
  try {
    return host.processRun({
      command,
      workdir,
      timeoutMs: timeoutMs === undefined ? undefined : BigInt(timeoutMs),
      stdin: typeof stdin === "string" ? enc.encode(stdin) : stdin,
    });
  } catch (e) {
    const p = e?.payload;
    const tag = p?.tag ?? "failed";
    throw new ToolError(tag === "not-granted" ? "PERMISSION_DENIED" : "PROCESS", `process: ${tag}${p?.val ? `: ${p.val}` : ""}`);
  }
}

// ---------------------------------------------------------------------------
// Host import: questions (ask the session's user)
// ---------------------------------------------------------------------------

/**
 * `questions.ask` failed: `kind` is `no-session`, `not-granted`, `invalid`
 * (the form is outside the host's bounds; nobody was asked), `failed`,
 * `cancelled`, or `no-import` (the component was built without
 * `"questions": true`).
 */
export class QuestionError extends Error {
  constructor(kind, message = "") {
    super(message ? `${kind}: ${message}` : kind);
    this.name = "QuestionError";
    this.kind = kind;
  }
}

const fakeAnswers = [];

/**
 * Asks the session's user a question during a tool call (or a policy's
 * decision): a message and a small flat form, a JSON Schema object of at
 * most 16 `string` / `number` / `integer` / `boolean` fields (asked in the
 * schema's key order). Needs `"questions": true` under `"wharf"` in
 * package.json (the world `tool-questions-plugin` or
 * `policy-questions-plugin`) and the operator's `questions = true` grant.
 * Returns `{ action: "accept", values }` (the fields, checked against the
 * form by the host), `{ action: "decline", values: {} }` or
 * `{ action: "cancel", values: {} }` (nobody answered); `wharf run`
 * declines at once, and the call's (a policy's: its own) deadline bounds
 * the wait. Throws QuestionError.
 */
export const questions = {
  ask(message, schema) {
    return questions.askText(message, JSON.stringify(schema));
  },
  /** `ask` with the schema as JSON text. */
  askText(message, schema) {
    if (!host.inComponent) {
      if (fakeAnswers.length > 0) return fakeAnswers.shift();
      throw new QuestionError("no-session", "no host outside a component (testing.answerQuestions scripts answers)");
    }
    if (!askImport) {
      throw new QuestionError(
        "no-import",
        'this component\'s world has no `questions` import: set "questions": true under "wharf" in package.json and rebuild',
      );
    }
    let a;
    try {
      a = askImport(String(message), String(schema));
    } catch (e) {
      const p = e?.payload;
      throw new QuestionError(p?.tag ?? "failed", p?.val ? String(p.val) : String(e?.message ?? ""));
    }
    if (a?.tag === "accept") {
      let values;
      try {
        values = JSON.parse(a.val);
      } catch {
        values = null;
      }
      if (values === null || typeof values !== "object" || Array.isArray(values)) {
        throw new QuestionError("failed", "the host's answer is not a JSON object");
      }
      return { action: "accept", values };
    }
    return { action: a?.tag === "decline" ? "decline" : "cancel", values: {} };
  },
};

// ---------------------------------------------------------------------------
// Policies
// ---------------------------------------------------------------------------

let policyFn = null;

export const allow = () => ({ tag: "allow" });
export const deny = (reason) => ({ tag: "deny", val: String(reason) });
export const ask = (reason) => ({ tag: "ask", val: String(reason) });
export const rewrite = (args) => ({ tag: "rewrite", val: typeof args === "string" ? args : JSON.stringify(args) });

/**
 * Registers the policy: `(req) => decision` where `req` is `{ tool, plugin,
 * arguments (JSON text), args (decoded), sessionId, agentDepth, workspace,
 * paths(keys) }` and the decision is `allow()`, `deny(reason)`, `ask(reason)`
 * or `rewrite(args)` (`undefined` = allow). A throw denies (fail closed).
 */
export function definePolicy(fn) {
  policyFn = fn;
}

function policyRequest(r) {
  let args = null;
  try {
    args = JSON.parse(r.arguments);
  } catch {}
  const ctx = makeContext({ workspace: r.workspace });
  return {
    ...r,
    args,
    /** String values of these argument keys, resolved against the workspace. */
    paths(keys = ["path"]) {
      const out = [];
      for (const k of keys) {
        const v = args?.[k];
        for (const s of Array.isArray(v) ? v : [v]) {
          if (typeof s !== "string" || !s) continue;
          try {
            out.push(ctx.resolve(s));
          } catch {
            out.push(s);
          }
        }
      }
      return out;
    },
  };
}

function evaluatePolicy(r) {
  if (!policyFn) return allow();
  try {
    return policyFn(policyRequest(r)) ?? allow();
  } catch (e) {
    return deny(`policy error: ${e?.message ?? e}`);
  }
}

function globRegex(pattern) {
  let out = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (pattern.startsWith("**/", i)) {
      out += "(?:.*/)?";
      i += 2;
    } else if (pattern.startsWith("**", i)) {
      out += ".*";
      i += 1;
    } else if (c === "*") out += "[^/]*";
    else if (c === "?") out += "[^/]";
    else out += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${out}$`);
}

/**
 * Whether `path` matches a glob: `*`/`?` within a segment, `**` across
 * segments; a pattern without `/` matches the file name.
 */
export function globMatch(pattern, path) {
  const p = pattern.includes("/") ? path : path.split("/").pop();
  return globRegex(pattern).test(p);
}

// ---------------------------------------------------------------------------
// Configuration check (export `configure`)
// ---------------------------------------------------------------------------

let configValidator = null;

/**
 * Registers the configuration check run when a version loads (export
 * `wharf:plugin/configure`, part of the `policy-plugin` world): throw, or
 * return an error string, to refuse the version with that message; return
 * `undefined` to accept. Without one every configuration is accepted.
 */
export function defineConfigValidator(fn) {
  configValidator = fn;
}

function validateConfig() {
  if (!configValidator) return undefined;
  try {
    const r = configValidator();
    return r === undefined || r === null || r === true ? undefined : String(r);
  } catch (e) {
    return e instanceof ToolError ? e.message : `${e?.name ?? "Error"}: ${e?.message ?? e}`;
  }
}

// ---------------------------------------------------------------------------
// Hooks
// ---------------------------------------------------------------------------

export const HOOK_POINTS = [
  "system-prompt", "agent/pre-step", "agent/request", "agent/request-error", "agent/turn-stopping",
  "tools/pre-execute", "tools/post-execute", "tools/result", "session/event",
];
const HOOKS = new Map();
const SECTIONS = [];

/**
 * Listens on a hook point (`"tools/pre-execute"` …): `fn(payload)` gets the
 * decoded payload and returns `undefined` (pass), `reject(reason)`, or a
 * value to replace the payload with. Lower `priority` runs first.
 */
export function defineHook(point, fn, { priority = 0 } = {}) {
  const key = point.replace(/\//g, "-");
  if (!HOOK_POINTS.map((p) => p.replace(/\//g, "-")).includes(key)) {
    throw new Error(`unknown hook point "${point}"; one of ${HOOK_POINTS.join(", ")}`);
  }
  HOOKS.set(key, { priority, fn });
}

/** A hook outcome that stops with a reason. */
export const reject = (reason) => ({ tag: "reject", val: String(reason) });

/** Adds a static system-prompt section (`order`: lower first). */
export function promptSection(id, order, text) {
  SECTIONS.push({ id, order, text });
}

function handleHook(point, payload) {
  const h = HOOKS.get(point);
  if (!h) return { tag: "pass" };
  let data = payload;
  try {
    data = JSON.parse(payload);
  } catch {}
  try {
    const r = h.fn(data);
    if (r === undefined || r === null) return { tag: "pass" };
    if (r && (r.tag === "reject" || r.tag === "pass")) return r;
    return { tag: "replace", val: typeof r === "string" ? r : JSON.stringify(r) };
  } catch (e) {
    log.warn(`hook ${point} failed: ${e?.message ?? e}`);
    return { tag: "pass" };
  }
}

// ---------------------------------------------------------------------------
// Skills
// ---------------------------------------------------------------------------

let skillsDef = null;

/**
 * Registers a skills source: `catalog()` returns `[{ name, description }]`,
 * `load(name)` the skill's text. A skills plugin also offers tools.
 */
export function defineSkills({ catalog, load }) {
  skillsDef = { catalog, load };
}

// ---------------------------------------------------------------------------
// Model adapters
// ---------------------------------------------------------------------------

export const LLM_ERROR_CODES = [
  "auth", "quota", "rate-limit", "context-window-exceeded", "invalid-request", "server",
  "transport", "timeout", "aborted", "stream-closed", "malformed-response", "empty-response",
];

/** A failed model request; the host's retry policy keys on `code`. */
export class LlmError extends Error {
  constructor(code, message, { httpStatus, retryAfterMs } = {}) {
    super(message);
    if (!LLM_ERROR_CODES.includes(code)) throw new Error(`unknown llm error code "${code}"`);
    this.code = code;
    this.httpStatus = httpStatus;
    this.retryAfterMs = retryAfterMs;
  }
}

export const text = (s) => ({ tag: "text", val: s });
export const reasoning = (s) => ({ tag: "reasoning", val: s });
export const toolCall = (id, name, args) => ({
  tag: "tool-call",
  val: { id, name, arguments: typeof args === "string" ? args : JSON.stringify(args) },
});
export const usage = ({ prompt = 0, completion = 0, cacheHit = 0, cacheMiss = 0, reasoning: r = 0 } = {}) => ({
  tag: "usage",
  val: {
    promptTokens: BigInt(prompt),
    completionTokens: BigInt(completion),
    cacheHitTokens: BigInt(cacheHit),
    cacheMissTokens: BigInt(cacheMiss),
    reasoningTokens: BigInt(r),
  },
});
export const finish = (reason = "stop") => ({ tag: "finish", val: reason });

let llmDef = null;

/**
 * Registers a model adapter: `model()` returns `{ model, contextWindow }`,
 * `start(request)` an iterable (e.g. a generator) of events or arrays of
 * events (one batch each). `request` is `{ system, messages, tools,
 * maxTokens }` as componentize-js lifts it. Throw LlmError to fail.
 */
export function defineLlm(def) {
  llmDef = def;
}

function llmErrorValue(e) {
  const err = e instanceof LlmError ? e : new LlmError("invalid-request", `${e?.name ?? "Error"}: ${e?.message ?? e}`);
  return {
    code: err.code,
    message: err.message,
    httpStatus: err.httpStatus,
    retryAfterMs: err.retryAfterMs === undefined ? undefined : BigInt(err.retryAfterMs),
  };
}

class Completion {
  constructor(iter) {
    this.iter = iter;
  }
  next() {
    let r;
    try {
      r = this.iter.next();
    } catch (e) {
      throw llmErrorValue(e);
    }
    if (r.done) return undefined;
    return Array.isArray(r.value) ? r.value : [r.value];
  }
}

// ---------------------------------------------------------------------------
// Export objects (componentize-js binds them by interface name)
// ---------------------------------------------------------------------------

/** Export `wharf:plugin/plugin`. */
export const plugin = {
  info: () => info,
};

/** Export `wharf:plugin/tool`. */
export const tool = {
  listTools: () =>
    [...TOOLS.values()].map((t) => ({
      name: t.name,
      description: t.description,
      inputSchema: JSON.stringify(t.inputSchema),
      mode: t.mode,
    })),
  call(name, argumentsJson, context) {
    try {
      return runTool(name, argumentsJson, context);
    } catch (e) {
      // componentize-js turns a thrown value into the `err` case.
      throw { code: e.code, message: e.message };
    }
  },
};

/** Export `wharf:plugin/policy`. */
export const policy = {
  evaluate: (req) => evaluatePolicy(req),
};

/** Export `wharf:plugin/configure`. */
export const configure = {
  validate() {
    const err = validateConfig();
    // componentize-js turns a thrown value into the `err` case.
    if (err !== undefined) throw err;
  },
};

/** Export `wharf:plugin/hooks`. */
export const hooks = {
  subscriptions: () => [...HOOKS.entries()].map(([point, h]) => ({ point, priority: h.priority })),
  promptSections: () => SECTIONS.map((s) => ({ ...s })),
  handle: (point, payload) => handleHook(point, payload),
};

/** Export `wharf:plugin/skills`. */
export const skills = {
  catalog() {
    try {
      return (skillsDef?.catalog() ?? []).map((s) => ({ name: s.name, description: s.description ?? "" }));
    } catch (e) {
      throw String(e?.message ?? e);
    }
  },
  load(name) {
    try {
      if (!skillsDef) throw new Error(`no skill named \`${name}\``);
      const t = skillsDef.load(name);
      if (t === undefined || t === null) throw new Error(`no skill named \`${name}\``);
      return String(t);
    } catch (e) {
      throw String(e?.message ?? e);
    }
  },
};

/** Export `wharf:plugin/llm` (with the `completion` resource). */
export const llm = {
  Completion,
  model() {
    const m = llmDef.model();
    return { model: m.model, contextWindow: m.contextWindow ?? 65536 };
  },
  start(req) {
    try {
      const it = llmDef.start(req);
      return new Completion(it[Symbol.iterator] ? it[Symbol.iterator]() : it);
    } catch (e) {
      throw llmErrorValue(e);
    }
  },
};

// ---------------------------------------------------------------------------
// Testing without a component
// ---------------------------------------------------------------------------

/**
 * Helpers for unit tests in plain Node (fake config, kv and log). They run the
 * registered functions exactly as the exports do; to test the built component
 * as the host runs it, use `wharf plugin call`.
 */
export const testing = {
  setConfig(cfg) {
    if (!host.fake) throw new Error("testing.setConfig works only outside a component");
    host.fake.config = structuredClone(cfg);
  },
  reset() {
    fakeAnswers.length = 0;
    if (!host.fake) return;
    host.fake.config = {};
    host.fake.kv.clear();
  },
  /** What `questions.ask` returns next, in order (`{ action, values }`). */
  answerQuestions(...answers) {
    fakeAnswers.push(...answers.map((a) => ({ action: a.action, values: a.values ?? {} })));
  },
  tools: () => Object.fromEntries([...TOOLS.values()].map((t) => [t.name, { description: t.description, mode: t.mode, inputSchema: t.inputSchema }])),
  /** Calls a tool; throws ToolError as the host would report it. */
  callTool(name, args = {}, { workspace } = {}) {
    const out = runTool(name, typeof args === "string" ? args : JSON.stringify(args), { workspace });
    return { content: out.content, details: out.details === undefined ? undefined : JSON.parse(out.details) };
  },
  evaluate(toolName, args = {}, { plugin: p = "test", workspace, agentDepth = 0 } = {}) {
    return evaluatePolicy({
      tool: toolName,
      plugin: p,
      arguments: typeof args === "string" ? args : JSON.stringify(args),
      sessionId: "test",
      agentDepth,
      workspace,
    });
  },
  /** The configuration check's verdict: `undefined` (ok) or the error. */
  validateConfig: () => validateConfig(),
  handle: (point, payload) => handleHook(point.replace(/\//g, "-"), typeof payload === "string" ? payload : JSON.stringify(payload)),
  catalog: () => skills.catalog(),
  loadSkill: (name) => skills.load(name),
  /** Every event the adapter streams for `request`, flattened. */
  complete(request = {}) {
    const c = llm.start({ system: "", messages: [], tools: [], maxTokens: undefined, ...request });
    const out = [];
    for (let b = c.next(); b !== undefined; b = c.next()) out.push(...b);
    return out;
  },
};
