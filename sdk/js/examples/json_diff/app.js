// json_diff: a structural diff of two JSON values, as readable lines for the
// model and as an RFC 6902 JSON Patch (in the details) that turns `before`
// into `after`.
//
// Arrays compare by position (`index`), as unordered sets (`set`), or as
// lists of objects matched by a key field (`key`, e.g. "id"). Paths are JSON
// Pointers; `ignore` takes globs over them (`/meta/*`, `/**/updated_at`).

import { definePlugin, defineTool, globMatch, ToolError, log } from "wharf-sdk";

definePlugin({
  name: "json_diff",
  version: "0.1.0",
  description: "Structural diff of two JSON values, with a JSON Patch.",
});

const escape = (k) => String(k).replace(/~/g, "~0").replace(/\//g, "~1");
const show = (v) => {
  const s = JSON.stringify(v);
  return s.length > 120 ? `${s.slice(0, 117)}...` : s;
};
const kind = (v) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object") {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(v);
}

/** Collects changes (for the model) and patch operations (RFC 6902). */
class Diff {
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
      const inB = new Map();
      for (const v of b) inB.set(canonical(v), (inB.get(canonical(v)) ?? 0) + 1);
      const removed = [];
      a.forEach((v, i) => {
        const c = canonical(v);
        if (inB.get(c)) inB.set(c, inB.get(c) - 1);
        else removed.push(i);
      });
      const inA = new Map();
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
    // mode === "key": match objects by the key field; arrays whose items are
    // not all keyed objects compare by position.
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
    // Changes inside matched items use the item's index in `before`; removals
    // come after (descending), so the patch stays applicable.
    a.forEach((v, i) => {
      const j = bIndex.get(id(v));
      if (j !== undefined) this.walk(v, b[j], `${path}/${i}`);
    });
    for (let i = a.length - 1; i >= 0; i--) {
      if (!bIndex.has(id(a[i]))) this.remove(`${path}/${i}`, a[i]);
    }
    b.forEach((v, i) => {
      if (!aIndex.has(id(v))) this.add(`${path}/-`, v);
    });
  }
}

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
  description:
    "Compares two JSON values and lists what changed, as JSON Pointer paths: `+` added, `-` removed, " +
    "`~` changed (old → new). Arrays compare by position, as sets, or as objects matched by a key " +
    "field (arrays that are not all keyed objects then compare by position). " +
    "The details hold an RFC 6902 JSON Patch from `before` to `after`.",
  mode: "parallel",
  args: {
    before: { type: "any", description: "The original JSON value (any type)." },
    after: { type: "any", description: "The new JSON value (any type)." },
    parse_strings: {
      type: "boolean",
      default: false,
      description: "Treat string `before`/`after` as JSON text to parse first.",
    },
    array_mode: {
      type: "string",
      enum: ["index", "set", "key"],
      default: "index",
      description: "How arrays compare: by position, as unordered sets, or objects matched by `array_key`.",
    },
    array_key: { type: "string", default: "id", description: "The field that identifies objects when array_mode is `key`." },
    ignore: { type: "array", items: "string", default: [], description: "JSON Pointer globs to ignore, e.g. `/meta/*` or `/**/updated_at`." },
    max_changes: { type: "integer", default: 200, minimum: 1, maximum: 10000, description: "List at most this many changes." },
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
      return `~ ${p}: ${show(c.old)} → ${show(c.value)}`;
    });
    if (d.changes.length > args.max_changes) lines.push(`… ${d.changes.length - args.max_changes} more`);
    const head = `${d.changes.length} change(s): ${n.add} added, ${n.remove} removed, ${n.replace} changed`;
    return { content: `${head}\n${lines.join("\n")}`, details: { patch: d.patch, counts: n } };
  },
});


// The exports componentize-js binds (world `tool-plugin`).
export { plugin, tool } from "wharf-sdk";
