// Host imports inside a component: the `wharf:plugin` imports that
// componentize-js links. Selected by the `wharf-component` export condition
// (the bundler of `wharf plugin build` sets it); plain Node gets
// host_native.js instead.
import { write } from "wharf:plugin/log@0.1.0";
import { getJson } from "wharf:plugin/config@0.1.0";
import * as kvImport from "wharf:plugin/kv@0.1.0";
import { run } from "wharf:plugin/process@0.1.0";

export const inComponent = true;

export function logWrite(level, message) {
  write(level, message);
}

export function configJson() {
  return getJson();
}

export const kv = {
  get: (key) => kvImport.get(key),
  set: (key, bytes) => kvImport.set(key, bytes),
  delete: (key) => kvImport.delete(key),
  listKeys: (prefix) => kvImport.listKeys(prefix),
};

export function processRun(cmd) {
  return run(cmd);
}

// Only the native host has fakes.
export const fake = null;
