"""{{name}}: a Wharf model adapter. This one is an echo model (replies with
the last user message); replace `start` with requests to a real API over
wasi:http (and ask for its host in `wharf.plugin(hosts=[…])`)."""

import wharf_sdk as wharf

wharf.plugin(name="{{name}}", version="0.1.0", description="Echo model adapter.")


@wharf.llm_adapter
class Echo:
    def model(self):
        return wharf.ModelInfo("{{name}}-echo", 8192)

    def start(self, request):
        users = [m["content"] for m in request["messages"] if m["role"] == "user"]
        yield wharf.text("echo: " + (users[-1] if users else ""))
        yield wharf.finish("stop")


# componentize-py instantiates these (world `llm-plugin`).
from wharf_sdk import Llm, Plugin  # noqa: E402,F401
