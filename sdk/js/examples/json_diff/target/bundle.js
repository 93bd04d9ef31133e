// ../../host_component.js
import { write } from "wharf:plugin/log@0.1.0";
import { getJson } from "wharf:plugin/config@0.1.0";
import * as kvImport from "wharf:plugin/kv@0.1.0";
import { run } from "wharf:plugin/process@0.1.0";
function logWrite(level, message) {
  write(level, message);
}

// ../../wharf_sdk.js
var FS_ACCESS = ["none", "read-only", "read-write"];
var info = { name: "plugin", version: "0.1.0", description: "", requests: grantRequest({}) };
function grantRequest({ filesystem = "none", hosts = [], env = [], process = false, memoryMb = void 0 }) {
  if (!FS_ACCESS.includes(filesystem)) {
    throw new Error(`filesystem must be one of ${FS_ACCESS.join(", ")}, not ${filesystem}`);
  }
  return { filesystem, hosts: [...hosts], env: [...env], process: Boolean(process), memoryMb };
}
function definePlugin({ name, version = "0.1.0", description = "", ...requests }) {
  info = { name, version, description, requests: grantRequest(requests) };
}
var ToolError = class _ToolError extends Error {
  /** @param {string} code stable SCREAMING_SNAKE_CASE id @param {string} message for the model */
  constructor(code, message) {
    super(message);
    this.name = "ToolError";
    this.code = code;
  }
  static invalidArgument(message) {
    return new _ToolError("INVALID_ARGUMENT", message);
  }
  static notFound(message) {
    return new _ToolError("NOT_FOUND", message);
  }
  static permissionDenied(message) {
    return new _ToolError("PERMISSION_DENIED", message);
  }
  static unknownTool(name) {
    return new _ToolError("UNKNOWN_TOOL", `this plugin has no tool named \`${name}\``);
  }
  static internal(message) {
    return new _ToolError("INTERNAL", message);
  }
};
function toToolError(e) {
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
var SCALARS = ["string", "number", "integer", "boolean", "null", "any", "object", "array"];
var PASSTHROUGH = [
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "multipleOf",
  "minLength",
  "maxLength",
  "pattern",
  "format",
  "minItems",
  "maxItems",
  "uniqueItems",
  "minProperties",
  "maxProperties",
  "examples",
  "const"
];
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
  if (out.type === void 0 && out.enum === void 0 && out.anyOf === void 0) {
    out.type = out.properties ? "object" : "any";
  }
  if (out.items !== void 0) out.items = norm(out.items);
  if (out.properties !== void 0) {
    out.properties = Object.fromEntries(Object.entries(out.properties).map(([k, v]) => [k, norm(v)]));
  }
  if (out.anyOf !== void 0) out.anyOf = out.anyOf.map(norm);
  if (out.additionalProperties && typeof out.additionalProperties === "object") {
    out.additionalProperties = norm(out.additionalProperties);
  }
  if (out.default !== void 0) out.optional = true;
  return out;
}
function fieldSchema(n) {
  const s = {};
  if (n.anyOf) s.anyOf = n.anyOf.map(fieldSchema);
  if (n.type && n.type !== "any") s.type = n.type;
  if (n.description) s.description = n.description;
  if (n.enum) s.enum = [...n.enum];
  if (n.default !== void 0) s.default = n.default;
  for (const k of PASSTHROUGH) if (n[k] !== void 0) s[k] = n[k];
  if (n.type === "array" && n.items) s.items = fieldSchema(n.items);
  if (n.type === "object" && n.properties) Object.assign(s, objectSchema(n.properties, n.additionalProperties));
  else if (n.type === "object" && n.additionalProperties !== void 0) {
    s.additionalProperties = typeof n.additionalProperties === "object" ? fieldSchema(n.additionalProperties) : n.additionalProperties;
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
function schemaOf(args = {}) {
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
      if (n.minLength !== void 0 && [...v].length < n.minLength) throw ToolError.invalidArgument(`${where(path)}: shorter than ${n.minLength}`);
      if (n.maxLength !== void 0 && [...v].length > n.maxLength) throw ToolError.invalidArgument(`${where(path)}: longer than ${n.maxLength}`);
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
      if (n.minItems !== void 0 && v.length < n.minItems) throw ToolError.invalidArgument(`${where(path)}: fewer than ${n.minItems} items`);
      if (n.maxItems !== void 0 && v.length > n.maxItems) throw ToolError.invalidArgument(`${where(path)}: more than ${n.maxItems} items`);
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
    if (n.minimum !== void 0 && v < n.minimum) throw ToolError.invalidArgument(`${where(path)}: less than ${n.minimum}`);
    if (n.maximum !== void 0 && v > n.maximum) throw ToolError.invalidArgument(`${where(path)}: greater than ${n.maximum}`);
  }
  if (n.enum && !n.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) {
    throw ToolError.invalidArgument(`${where(path)}: expected one of ${n.enum.map((e) => JSON.stringify(e)).join(", ")}, got ${JSON.stringify(v)}`);
  }
  return v;
}
function checkObject(props, v, path, additional) {
  const out = {};
  for (const [k, n] of Object.entries(props)) {
    if (v[k] === void 0) {
      if (n.default !== void 0) out[k] = structuredClone(n.default);
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
function parseArgs(args, value) {
  const props = Object.fromEntries(Object.entries(args).map(([k, v]) => [k, norm(v)]));
  return checkObject(props, value ?? {}, "", false);
}
var TOOLS = /* @__PURE__ */ new Map();
var NAME_RE = /^[a-zA-Z0-9_-]{1,64}$/;
function defineTool({ name, description = "", mode = "parallel", args = {}, schema, run: run2 }) {
  if (!NAME_RE.test(name)) throw new Error(`tool name "${name}" must match [a-zA-Z0-9_-]{1,64}`);
  if (mode !== "parallel" && mode !== "exclusive") throw new Error(`mode must be "parallel" or "exclusive"`);
  if (typeof run2 !== "function") throw new Error(`tool "${name}": run must be a function`);
  const inputSchema = schema ?? schemaOf(args);
  TOOLS.set(name, { name, description, mode, args: schema ? null : args, inputSchema, run: run2 });
}
function makeContext(c) {
  const workspace = c?.workspace ?? void 0;
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
    }
  };
}
function normalizePath(p) {
  const out = [];
  for (const seg of p.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") out.pop();
    else out.push(seg);
  }
  return "/" + out.join("/");
}
function toOutput(r) {
  if (typeof r === "string") return { content: r, details: void 0 };
  if (r === void 0 || r === null) return { content: "", details: void 0 };
  if (typeof r === "object" && typeof r.content === "string" && Object.keys(r).every((k) => k === "content" || k === "details")) {
    return { content: r.content, details: r.details === void 0 ? void 0 : JSON.stringify(r.details) };
  }
  return { content: JSON.stringify(r, null, 2), details: void 0 };
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
var log = Object.fromEntries(
  ["trace", "debug", "info", "warn", "error"].map((level) => [level, (msg) => logWrite(level, String(msg))])
);
var enc = new TextEncoder();
var dec = new TextDecoder();
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
function globMatch(pattern, path) {
  const p = pattern.includes("/") ? path : path.split("/").pop();
  return globRegex(pattern).test(p);
}
var plugin = {
  info: () => info
};
var tool = {
  listTools: () => [...TOOLS.values()].map((t) => ({
    name: t.name,
    description: t.description,
    inputSchema: JSON.stringify(t.inputSchema),
    mode: t.mode
  })),
  call(name, argumentsJson, context) {
    try {
      return runTool(name, argumentsJson, context);
    } catch (e) {
      throw { code: e.code, message: e.message };
    }
  }
};

// app.js
definePlugin({
  name: "json_diff",
  version: "0.1.0",
  description: "Structural diff of two JSON values, with a JSON Patch."
});
var escape = (k) => String(k).replace(/~/g, "~0").replace(/\//g, "~1");
var show = (v) => {
  const s = JSON.stringify(v);
  return s.length > 120 ? `${s.slice(0, 117)}...` : s;
};
var kind = (v) => v === null ? "null" : Array.isArray(v) ? "array" : typeof v;
function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object") {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`;
  }
  return JSON.stringify(v);
}
var Diff = class {
  constructor(opts) {
    this.opts = opts;
    this.changes = [];
    this.patch = [];
  }
  ignored(path) {
    return this.opts.ignore.some((g) => globMatch(g, path || "/"));
  }
  add(path, value) {
    if (this.ignored(path)) return;
    this.changes.push({ op: "add", path, value });
    this.patch.push({ op: "add", path, value });
  }
  remove(path, old, patchPath = path) {
    if (this.ignored(path)) return;
    this.changes.push({ op: "remove", path, old });
    this.patch.push({ op: "remove", path: patchPath });
  }
  replace(path, old, value) {
    if (this.ignored(path)) return;
    this.changes.push({ op: "replace", path, old, value });
    this.patch.push({ op: "replace", path, value });
  }
  walk(a, b, path) {
    if (this.ignored(path)) return;
    const [ka, kb] = [kind(a), kind(b)];
    if (ka !== kb) return this.replace(path, a, b);
    if (ka === "object") return this.objects(a, b, path);
    if (ka === "array") return this.arrays(a, b, path);
    if (a !== b) this.replace(path, a, b);
  }
  objects(a, b, path) {
    for (const k of Object.keys(a)) {
      const p = `${path}/${escape(k)}`;
      if (!(k in b)) this.remove(p, a[k]);
      else this.walk(a[k], b[k], p);
    }
    for (const k of Object.keys(b)) {
      if (!(k in a)) this.add(`${path}/${escape(k)}`, b[k]);
    }
  }
  arrays(a, b, path) {
    const mode = this.opts.arrays;
    if (mode === "index") {
      const n = Math.min(a.length, b.length);
      for (let i = 0; i < n; i++) this.walk(a[i], b[i], `${path}/${i}`);
      for (let i = n; i < b.length; i++) this.add(`${path}/${i}`, b[i]);
      for (let i = a.length - 1; i >= n; i--) this.remove(`${path}/${i}`, a[i]);
      return;
    }
    if (mode === "set") {
      const inB = /* @__PURE__ */ new Map();
      for (const v of b) inB.set(canonical(v), (inB.get(canonical(v)) ?? 0) + 1);
      const removed = [];
      a.forEach((v, i) => {
        const c = canonical(v);
        if (inB.get(c)) inB.set(c, inB.get(c) - 1);
        else removed.push(i);
      });
      const inA = /* @__PURE__ */ new Map();
      for (const v of a) inA.set(canonical(v), (inA.get(canonical(v)) ?? 0) + 1);
      const added = b.filter((v) => {
        const c = canonical(v);
        if (inA.get(c)) {
          inA.set(c, inA.get(c) - 1);
          return false;
        }
        return true;
      });
      for (const i of removed.reverse()) this.remove(`${path}/${i}`, a[i]);
      for (const v of added) this.add(`${path}/-`, v);
      return;
    }
    const key = this.opts.arrayKey;
    const keyed = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && key in v;
    if (!a.every(keyed) || !b.every(keyed)) {
      this.opts = { ...this.opts, arrays: "index" };
      this.arrays(a, b, path);
      this.opts = { ...this.opts, arrays: "key" };
      return;
    }
    const id = (v) => canonical(v[key]);
    const bIndex = new Map(b.map((v, i) => [id(v), i]));
    const aIndex = new Map(a.map((v, i) => [id(v), i]));
    a.forEach((v, i) => {
      const j = bIndex.get(id(v));
      if (j !== void 0) this.walk(v, b[j], `${path}/${i}`);
    });
    for (let i = a.length - 1; i >= 0; i--) {
      if (!bIndex.has(id(a[i]))) this.remove(`${path}/${i}`, a[i]);
    }
    b.forEach((v, i) => {
      if (!aIndex.has(id(v))) this.add(`${path}/-`, v);
    });
  }
};
function parseMaybe(v, which, parse) {
  if (!parse || typeof v !== "string") return v;
  try {
    return JSON.parse(v);
  } catch (e) {
    throw ToolError.invalidArgument(`\`${which}\` is not valid JSON: ${e.message}`);
  }
}
defineTool({
  name: "json_diff",
  description: "Compares two JSON values and lists what changed, as JSON Pointer paths: `+` added, `-` removed, `~` changed (old \u2192 new). Arrays compare by position, as sets, or as objects matched by a key field (arrays that are not all keyed objects then compare by position). The details hold an RFC 6902 JSON Patch from `before` to `after`.",
  mode: "parallel",
  args: {
    before: { type: "any", description: "The original JSON value (any type)." },
    after: { type: "any", description: "The new JSON value (any type)." },
    parse_strings: {
      type: "boolean",
      default: false,
      description: "Treat string `before`/`after` as JSON text to parse first."
    },
    array_mode: {
      type: "string",
      enum: ["index", "set", "key"],
      default: "index",
      description: "How arrays compare: by position, as unordered sets, or objects matched by `array_key`."
    },
    array_key: { type: "string", default: "id", description: "The field that identifies objects when array_mode is `key`." },
    ignore: { type: "array", items: "string", default: [], description: "JSON Pointer globs to ignore, e.g. `/meta/*` or `/**/updated_at`." },
    max_changes: { type: "integer", default: 200, minimum: 1, maximum: 1e4, description: "List at most this many changes." }
  },
  run(args) {
    const before = parseMaybe(args.before, "before", args.parse_strings);
    const after = parseMaybe(args.after, "after", args.parse_strings);
    const d = new Diff({ arrays: args.array_mode, arrayKey: args.array_key, ignore: args.ignore });
    d.walk(before, after, "");
    const n = { add: 0, remove: 0, replace: 0 };
    for (const c of d.changes) n[c.op]++;
    log.debug(`json_diff: ${d.changes.length} change(s)`);
    if (d.changes.length === 0) {
      return { content: "No differences.", details: { patch: [] } };
    }
    const lines = d.changes.slice(0, args.max_changes).map((c) => {
      const p = c.path || "/";
      if (c.op === "add") return `+ ${p}: ${show(c.value)}`;
      if (c.op === "remove") return `- ${p}: ${show(c.old)}`;
      return `~ ${p}: ${show(c.old)} \u2192 ${show(c.value)}`;
    });
    if (d.changes.length > args.max_changes) lines.push(`\u2026 ${d.changes.length - args.max_changes} more`);
    const head = `${d.changes.length} change(s): ${n.add} added, ${n.remove} removed, ${n.replace} changed`;
    return { content: `${head}
${lines.join("\n")}`, details: { patch: d.patch, counts: n } };
  }
});
export {
  plugin,
  tool
};
