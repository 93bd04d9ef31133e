// Host imports outside a component (plain Node: unit tests, tooling): log to
// stderr (warn and above unless WHARF_LOG says otherwise), config and kv in
// memory, no processes. `testing.setConfig` / `testing.reset` drive them.
const LEVELS = ["trace", "debug", "info", "warn", "error"];

export const inComponent = false;

export const fake = { config: {}, kv: new Map() };

export function logWrite(level, message) {
  const env = (globalThis.process?.env?.WHARF_LOG ?? "warn").toLowerCase();
  const threshold = LEVELS.includes(env) ? LEVELS.indexOf(env) : 3;
  if (LEVELS.indexOf(level) >= threshold) {
    console.error(`[${level}] ${message}`);
  }
}

export function configJson() {
  return JSON.stringify(fake.config);
}

export const kv = {
  get: (key) => fake.kv.get(key),
  set: (key, bytes) => {
    fake.kv.set(key, bytes);
  },
  delete: (key) => {
    fake.kv.delete(key);
  },
  listKeys: (prefix) => [...fake.kv.keys()].filter((k) => k.startsWith(prefix)).sort(),
};

export function processRun() {
  const e = new Error("not-granted");
  e.payload = { tag: "not-granted" };
  throw e;
}
