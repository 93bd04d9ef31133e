// {{name}}: a Wharf permission policy.
//
// Configuration (the profile row's `config` table): `blocked_tools = ["write"]`
// denies those tools, `ask_tools = ["edit"]` asks a human first, everything
// else is allowed. See also `globMatch` for glob rules over paths.
import { definePlugin, definePolicy, defineConfigValidator, config, allow, deny, ask } from "wharf-sdk";

definePlugin({ name: "{{name}}", version: "0.1.0", description: "Denies or asks before configured tools." });

const CONFIG = {
  blocked_tools: { type: "array", items: "string", default: [] },
  ask_tools: { type: "array", items: "string", default: [] },
};

// Runs when the plugin loads: a bad configuration refuses it.
defineConfigValidator(() => {
  config.load(CONFIG);
});

definePolicy((req) => {
  // A bad config throws: the call is denied (fail closed).
  const cfg = config.load(CONFIG);
  if (cfg.blocked_tools.includes(req.tool)) return deny(`\`${req.tool}\` is blocked by {{name}}`);
  if (cfg.ask_tools.includes(req.tool)) return ask(`\`${req.tool}\` needs approval`);
  return allow();
});

// The exports componentize-js binds (world `policy-plugin`).
export { plugin, policy, configure } from "wharf-sdk";
