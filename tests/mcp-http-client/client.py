"""Drives `wharf mcp serve --http` with the official Python MCP SDK (`mcp`).

    python3 client.py URL TOKEN CALLS_JSON [handshake|discover]

CALLS_JSON is a list of `[name, arguments]` made in one session after
`tools/list`. The session starts with the `initialize` handshake (2025-era
protocol, the default) or, with `discover`, with `server/discover` and the
2026-07-28 stateless lifecycle (every request carries its version in
`_meta` and the `MCP-Protocol-Version` header). Then the same handshake is tried with a wrong token, with no
token, with a wrong `Host` header and with a foreign `Origin` header. Prints
one JSON report on stdout:

    {"sdk": VERSION, "ok": {"protocol": ..., "tools": [names], "calls": [{"name", "is_error", "text", "meta"}]},
     "wrong_token": {"statuses": [...], "error": "..."}, "no_token": ..., "wrong_host": ..., "wrong_origin": ...}

`statuses` are the HTTP status codes the server answered in that scenario
(recorded by an httpx response hook); `error` is what the SDK raised.
"""

import json
import sys
from importlib.metadata import version
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TIMEOUT_S = 30


def describe(exc: BaseException) -> str:
    """The innermost messages of an exception (task groups wrap them)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


async def session(url: str, headers: dict[str, str], calls: list, mode: str = "handshake") -> dict:
    statuses: list[int] = []

    async def record(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    client = create_mcp_http_client(headers=headers)
    client.event_hooks["response"].append(record)
    out: dict = {"statuses": statuses}
    try:
        with anyio.fail_after(TIMEOUT_S):
            async with client:
                async with streamable_http_client(url, http_client=client) as (read, write):
                    async with ClientSession(read, write) as s:
                        if mode == "discover":
                            found = await s.discover()
                            out["supported"] = list(found.supported_versions)
                        else:
                            await s.initialize()
                        out["protocol"] = s.protocol_version
                        info = s.server_info
                        out["server"] = info.name if info is not None else None
                        tools = await s.list_tools()
                        out["tools"] = sorted(t.name for t in tools.tools)
                        results = []
                        for name, arguments in calls:
                            r = await s.call_tool(name, arguments)
                            text = "\n".join(getattr(c, "text", "") for c in r.content)
                            meta = r.meta if r.meta is not None else {}
                            results.append({"name": name, "is_error": r.is_error, "text": text, "meta": meta})
                        out["calls"] = results
    except BaseException as e:  # noqa: BLE001 - reported, the test judges it
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        out["error"] = describe(e)
    return out


async def main() -> None:
    url, token, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "handshake"
    netloc = urlsplit(url).netloc
    port = netloc.rsplit(":", 1)[-1]
    good = {"Authorization": f"Bearer {token}"}
    report = {"sdk": version("mcp")}
    report["ok"] = await session(url, good, calls, mode)
    report["wrong_token"] = await session(url, {"Authorization": "Bearer not-the-token-0123456789"}, [], mode)
    report["no_token"] = await session(url, {}, [], mode)
    report["wrong_host"] = await session(url, {**good, "Host": f"rebind.example:{port}"}, [], mode)
    report["wrong_origin"] = await session(url, {**good, "Origin": "http://evil.example"}, [], mode)
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(main)
