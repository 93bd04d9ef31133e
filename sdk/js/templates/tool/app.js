// {{name}}: a Wharf tool plugin.
import { definePlugin, defineTool, ToolError, log } from "wharf-sdk";

// Ask for grants here: filesystem: "read-only", hosts: ["api.example.com"], …
definePlugin({ name: "{{name}}", version: "0.1.0", description: "Greets people." });

defineTool({
  name: "{{ident}}",
  description: "Greets someone by name.",
  mode: "parallel",
  args: {
    name: { type: "string", description: "Who to greet." },
    times: { type: "integer", default: 1, minimum: 1, maximum: 10, description: "How many times (1 to 10)." },
  },
  run({ name, times }) {
    if (times < 1 || times > 10) throw ToolError.invalidArgument("`times` must be between 1 and 10");
    log.debug(`greeting ${name} x${times}`);
    return Array(times).fill(`Hello, ${name}!`).join("\n");
  },
});

// The exports componentize-js binds (world `tool-plugin`).
export { plugin, tool } from "wharf-sdk";
