// {{name}}: Wharf hook listeners and a system-prompt section.
import { definePlugin, defineHook, promptSection, reject } from "wharf-sdk";

definePlugin({ name: "{{name}}", version: "0.1.0", description: "Adds a prompt section and blocks `rm -rf /`." });

promptSection("{{ident}}", 100, "Prefer small, reviewable changes.");

// Rejects a call whose arguments mention `rm -rf /`; passes the rest.
defineHook("tools/pre-execute", (payload) => {
  if (JSON.stringify(payload).includes("rm -rf /")) return reject("refusing to delete the root directory");
  return undefined;
});

// The exports componentize-js binds (world `hooks-plugin`).
export { plugin, hooks } from "wharf-sdk";
