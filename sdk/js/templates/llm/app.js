// {{name}}: a Wharf model adapter. This one is an echo model (replies with the
// last user message); replace `start` with requests to a real API (set
// `"http": true` in package.json and ask for its host in definePlugin).
import { definePlugin, defineLlm, text, finish } from "wharf-sdk";

definePlugin({ name: "{{name}}", version: "0.1.0", description: "Echo model adapter." });

defineLlm({
  model: () => ({ model: "{{name}}-echo", contextWindow: 8192 }),
  *start(request) {
    const users = request.messages.filter((m) => m.role === "user");
    yield text(`echo: ${users.length ? users[users.length - 1].content : ""}`);
    yield finish("stop");
  },
});

// The exports componentize-js binds (world `llm-plugin`).
export { plugin, llm } from "wharf-sdk";
