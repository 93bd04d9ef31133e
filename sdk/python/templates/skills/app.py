"""{{name}}: a Wharf skills source. The host lists the catalog in the system
prompt; the model loads a skill's text with the `skill` tool."""

from dataclasses import dataclass

import wharf_sdk as wharf

wharf.plugin(name="{{name}}", version="0.1.0", description="A small skills library.")

# Real plugins read SKILL.md files from a granted directory instead.
SKILLS = {
    "commit-message": (
        "How to write a good commit message.",
        "Write a short imperative summary line (under 72 characters), a blank line, then why.",
    ),
}


@wharf.skills_catalog
def catalog():
    return [(name, desc) for name, (desc, _) in SKILLS.items()]


@wharf.skill_loader
def load(name):
    return SKILLS[name][1]


@dataclass
class SkillArgs:
    name: str = wharf.arg("The skill's name, from the catalog.")


@wharf.tool
def skill(args: SkillArgs) -> str:
    """Loads the full text of a skill from the catalog."""
    if args.name not in SKILLS:
        raise wharf.ToolError.not_found(f"no skill `{args.name}`")
    return load(args.name)


# componentize-py instantiates these (world `skills-plugin`).
from wharf_sdk import Plugin, Skills, Tool  # noqa: E402,F401
