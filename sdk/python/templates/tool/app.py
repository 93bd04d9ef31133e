"""{{name}}: a Wharf tool plugin."""

from dataclasses import dataclass

import wharf_sdk as wharf

# Ask for grants here: filesystem="read-only", hosts=["api.example.com"], …
wharf.plugin(name="{{name}}", version="0.1.0", description="Greets people.")


@dataclass
class GreetArgs:
    name: str = wharf.arg("Who to greet.")
    times: int = wharf.arg("How many times (1 to 10).", default=1, minimum=1, maximum=10)


@wharf.tool(mode="parallel")
def {{ident}}(args: GreetArgs, ctx: wharf.Context) -> str:
    """Greets someone by name."""
    if not 1 <= args.times <= 10:
        raise wharf.ToolError.invalid_argument("`times` must be between 1 and 10")
    wharf.log.debug(f"greeting {args.name} x{args.times}")
    return "\n".join([f"Hello, {args.name}!"] * args.times)


# componentize-py instantiates these (world `tool-plugin`).
from wharf_sdk import Plugin, Tool  # noqa: E402,F401
