"""{{name}}: Wharf hook listeners and a system-prompt section."""

import wharf_sdk as wharf

wharf.plugin(name="{{name}}", version="0.1.0", description="Adds a prompt section and blocks `rm -rf /`.")

wharf.prompt_section("{{ident}}", 100, "Prefer small, reviewable changes.")


@wharf.hook("tools/pre-execute", priority=0)
def check_call(payload):
    """Rejects a call whose arguments mention `rm -rf /`; passes the rest."""
    if "rm -rf /" in str(payload):
        return wharf.Outcome.reject("refusing to delete the root directory")
    return None


# componentize-py instantiates these (world `hooks-plugin`).
from wharf_sdk import Hooks, Plugin  # noqa: E402,F401
