"""Answers a component's question through `wharf mcp serve --http` with the
official Python MCP SDK (`mcp`'s high-level `Client`).

    python3 ask.py URL TOKEN MODE TOOL ARGS_JSON ANSWER_JSON

MODE is `legacy` (the `initialize` handshake: the server asks with
`elicitation/create` while the call runs) or `2026-07-28` (no handshake: the
server answers `input_required` and the SDK retries the call with the
answer and the `requestState`). The elicitation callback records each
question's message and answers ANSWER_JSON (`{"action": ..., "content":
...}`). Prints one JSON report on stdout:

    {"sdk": VERSION, "protocol": ..., "asked": [messages], "is_error": ..., "text": ..., "meta": {...}}

or `{"sdk": ..., "error": "..."}` when the SDK raised.
"""

import json
import sys
from importlib.metadata import version

import anyio
import mcp_types as types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TIMEOUT_S = 60


def describe(exc: BaseException) -> str:
    """The innermost messages of an exception (task groups wrap them)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


async def main() -> None:
    url, token, mode, tool = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    arguments, answer = json.loads(sys.argv[5]), json.loads(sys.argv[6])
    out: dict = {"sdk": version("mcp"), "asked": []}

    async def on_elicit(_context, params):
        out["asked"].append(params.message)
        return types.ElicitResult(action=answer["action"], content=answer.get("content"))

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    try:
        with anyio.fail_after(TIMEOUT_S):
            async with http:
                transport = streamable_http_client(url, http_client=http)
                async with Client(transport, mode=mode, elicitation_callback=on_elicit) as client:
                    out["protocol"] = client.protocol_version
                    r = await client.call_tool(tool, arguments)
                    out["is_error"] = r.is_error
                    out["text"] = "\n".join(getattr(c, "text", "") for c in r.content)
                    out["meta"] = r.meta if r.meta is not None else {}
    except BaseException as e:  # noqa: BLE001 - reported, the test judges it
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        out["error"] = describe(e)
    print(json.dumps(out))


if __name__ == "__main__":
    anyio.run(main)
