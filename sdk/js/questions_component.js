// The `questions` import inside a component built with `questions: true`
// (world `tool-questions-plugin` / `policy-questions-plugin`): selected by
// the `wharf-questions` export condition, which `wharf plugin build` sets
// only for such projects (a component of another world cannot import it).
import { ask } from "wharf:plugin/questions@0.1.0";

export const askImport = ask;
