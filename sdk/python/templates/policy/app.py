"""{{name}}: a Wharf permission policy.

Configuration (the profile row's `config` table): `blocked_tools = ["write"]`
denies those tools, `ask_tools = ["edit"]` asks a human first, everything
else is allowed. See also `wharf.PathRules` for glob rules over paths.
"""

from dataclasses import dataclass, field
from typing import List

import wharf_sdk as wharf

wharf.plugin(name="{{name}}", version="0.1.0", description="Denies or asks before configured tools.")


@dataclass
class Config:
    blocked_tools: List[str] = field(default_factory=list)
    ask_tools: List[str] = field(default_factory=list)


@wharf.config_validator
def check_config():
    """Runs when the plugin loads: a bad configuration refuses it."""
    wharf.config.load(Config)


@wharf.policy
def evaluate(req: wharf.PolicyRequest) -> wharf.Decision:
    cfg = wharf.config.load(Config)  # a bad config raises: the call is denied (fail closed)
    if req.tool in cfg.blocked_tools:
        return wharf.deny(f"`{req.tool}` is blocked by {{name}}")
    if req.tool in cfg.ask_tools:
        return wharf.ask(f"`{req.tool}` needs approval")
    return wharf.allow()


# componentize-py instantiates these (world `policy-plugin`).
from wharf_sdk import Configure, Plugin, Policy  # noqa: E402,F401
