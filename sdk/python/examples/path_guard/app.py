"""path_guard: a permission policy over the paths tool calls write.

Configured by its profile row's ``config`` table::

    [plugin.config]
    write_tools = ["write", "edit"]      # tools that write (default)
    path_keys = ["path"]                 # argument keys holding paths (default)
    deny = ["secrets/**", "*.env"]       # globs: writes here are denied
    ask = ["**"]                         # globs: writes here ask a human (default: every other write)
    allow = ["notes/**"]                 # globs: writes here are allowed without asking

Globs are matched against the path relative to the workspace (or absolute
when outside it); ``*`` stays within a segment, ``**`` spans segments, and a
pattern without ``/`` matches the file name. Precedence: deny, then allow,
then ask; a write matching nothing is allowed. Calls of other tools are
always allowed. A bad config refuses the plugin at load time, and should
it get past that, denies every call (fail closed).
"""

from dataclasses import dataclass, field
from typing import List

import wharf_sdk as wharf

wharf.plugin(
    name="path_guard",
    version="0.1.0",
    description="Denies or asks before writes to configured path globs.",
)


@dataclass
class GuardConfig:
    write_tools: List[str] = field(default_factory=lambda: ["write", "edit"])
    path_keys: List[str] = field(default_factory=lambda: ["path"])
    deny: List[str] = field(default_factory=list)
    ask: List[str] = field(default_factory=lambda: ["**"])
    allow: List[str] = field(default_factory=list)


@wharf.config_validator
def check_config():
    """Refuses a malformed configuration when the plugin loads (the host does
    not start, or a hot reload keeps the previous version)."""
    cfg = wharf.config.load(GuardConfig)
    for rule in cfg.deny + cfg.ask + cfg.allow:
        if not rule.strip():
            raise ValueError("empty glob in path_guard config")


@wharf.policy
def evaluate(req: wharf.PolicyRequest) -> wharf.Decision:
    try:
        cfg = wharf.config.load(GuardConfig)
    except wharf.ToolError as e:
        return wharf.deny(f"path_guard: {e.message}")
    if req.tool not in cfg.write_tools:
        return wharf.allow()
    hit = wharf.PathRules(cfg.deny, cfg.path_keys).first_match(req)
    if hit:
        path, rule = hit
        wharf.log.info(f"deny {req.tool} {path} (rule {rule})")
        return wharf.deny(f"writing `{path}` is not allowed (path_guard rule `{rule}`)")
    if wharf.PathRules(cfg.allow, cfg.path_keys).first_match(req):
        return wharf.allow()
    hit = wharf.PathRules(cfg.ask, cfg.path_keys).first_match(req)
    if hit:
        return wharf.ask(f"`{req.tool}` wants to write `{hit[0]}`")
    return wharf.allow()


# componentize-py instantiates these (world `policy-plugin`).
from wharf_sdk import Configure, Plugin, Policy  # noqa: E402,F401
