// The JavaScript dev runtime of `wharf plugin dev`.
//
// componentize-js turns this module (with the SDK) into a component once per
// toolchain, WIT and SDK version; `wharf plugin dev` caches it. It exports the
// same world as a built plugin and, at instantiation, evaluates the plugin's
// bundle (`app.cjs`, written by `wharf plugin dev` with esbuild, the SDK left
// external) from the source snapshot the host preopens read-only at
// `/wharf-dev` (a `dev = true` row): a save is a new source, not a new
// component. The bundle's `require("wharf-sdk")` is this SDK instance.
//
// A bundle that throws while it is evaluated makes every export throw after
// printing one line, `wharf-dev: FILE:LINE: Error: message`, on stderr (the host
// puts it in the load error; the failed version never replaces a working
// one). Syntax and import errors are reported by esbuild before that.
import * as sdk from "../wharf_sdk.js";
import { getDirectories } from "wasi:filesystem/preopens@0.2.12";

const SOURCE_DIR = "/wharf-dev";

function readText(rel) {
  const dirs = getDirectories();
  const found = dirs.find(([, path]) => path === SOURCE_DIR);
  if (!found) throw new Error(`no plugin source at ${SOURCE_DIR}; is the row \`dev = true\`?`);
  const file = found[0].openAt({ symlinkFollow: false }, rel, {}, { read: true });
  const chunks = [];
  let offset = 0n;
  for (;;) {
    const [bytes, end] = file.read(65536n, offset);
    chunks.push(bytes);
    offset += BigInt(bytes.length);
    if (end || bytes.length === 0) break;
  }
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  return new TextDecoder().decode(all);
}

// null: not tried in this instance; true: evaluated; a string: why not.
let state = null;

function evaluate() {
  let meta = { entry: "app.js" };
  try {
    meta = JSON.parse(readText("wharf-dev.json"));
  } catch (e) {
    return `wharf-dev.json:1: Error: ${e.message ?? e}`;
  }
  const file = meta.bundle ?? "app.cjs";
  let source;
  try {
    source = readText(file);
  } catch (e) {
    return `${file}:1: Error: ${e.message ?? e}`;
  }
  const module = { exports: {} };
  const require = (name) => {
    if (name === "wharf-sdk") return sdk;
    throw new Error(`cannot require \`${name}\` in dev mode (only wharf-sdk is external; bundle it)`);
  };
  try {
    new Function("require", "module", "exports", `${source}\n//# sourceURL=${meta.entry}`)(
      require,
      module,
      module.exports,
    );
  } catch (e) {
    const line = /:(\d+):\d+/.exec(String(e.stack ?? ""))?.[1] ?? "0";
    return `${meta.entry}:${line}: ${e.name ?? "Error"}: ${e.message ?? e}`;
  }
  return true;
}

function load() {
  if (state === null) state = evaluate();
  if (state !== true) {
    console.error(`wharf-dev: ${state}`);
    throw new Error(state);
  }
}

function wrapped(exportObject) {
  const out = {};
  for (const [name, fn] of Object.entries(exportObject)) {
    if (typeof fn !== "function") continue;
    out[name] = (...args) => {
      load();
      return fn.apply(exportObject, args);
    };
  }
  return out;
}

export const plugin = wrapped(sdk.plugin);
export const tool = wrapped(sdk.tool);
export const policy = wrapped(sdk.policy);
export const configure = wrapped(sdk.configure);
export const hooks = wrapped(sdk.hooks);
export const skills = wrapped(sdk.skills);
export const llm = wrapped(sdk.llm);
