// {{name}}: a Wharf skills source. The host lists the catalog in the system
// prompt; the model loads a skill's text with the `skill` tool.
import { definePlugin, defineSkills, defineTool, ToolError } from "wharf-sdk";

definePlugin({ name: "{{name}}", version: "0.1.0", description: "A small skills library." });

// Real plugins read SKILL.md files from a granted directory instead.
const SKILLS = {
  "commit-message": {
    description: "How to write a good commit message.",
    text: "Write a short imperative summary line (under 72 characters), a blank line, then why.",
  },
};

defineSkills({
  catalog: () => Object.entries(SKILLS).map(([name, s]) => ({ name, description: s.description })),
  load: (name) => SKILLS[name]?.text,
});

defineTool({
  name: "skill",
  description: "Loads the full text of a skill from the catalog.",
  args: { name: { type: "string", description: "The skill's name, from the catalog." } },
  run({ name }) {
    if (!SKILLS[name]) throw ToolError.notFound(`no skill \`${name}\``);
    return SKILLS[name].text;
  },
});

// The exports componentize-js binds (world `skills-plugin`).
export { plugin, skills, tool } from "wharf-sdk";
