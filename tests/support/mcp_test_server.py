"""A streamable-HTTP MCP server of our own (the SDK's MCPServer, which mcp 2 calls what mcp 1 called FastMCP),
for the transport, header and failure cases no published server covers.

    python -m tests.support.mcp_test_server --port PORT --marker PATH     (streamable HTTP)
    python -m tests.support.mcp_test_server --port PORT --sse --marker PATH (SSE)
    python -m tests.support.mcp_test_server --marker PATH                 (stdio)

Tools: ``whoami`` (is the ``X-Api-Key`` header the value of ``$EXPECTED_API_KEY``? answers yes or no, never
the key), ``crash_once`` (the first call kills the process mid-call, leaving ``--marker``; later calls answer),
``hang`` (never answers), ``pid`` (the server's process id), ``picture`` (a PNG image block and a text
resource), ``refuse`` (an ``isError`` result), ``report`` (a long text) and ``web_fetch`` (the body of a URL, as
it is: with ``tool_name_prefix: false`` the run names it ``web_fetch``, a remote-content tool).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import urllib.request
import zlib
from pathlib import Path

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError


def tiny_png() -> bytes:
    """A valid 1x1 red PNG, built here so the test needs no image file."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def build(marker: Path) -> MCPServer:
    server = MCPServer("hartflow-test")

    @server.tool(description="Tell whether the caller presented the expected API key.")
    async def whoami(ctx: Context) -> str:
        headers = ctx.headers or {}
        expected = os.environ.get("EXPECTED_API_KEY")
        return "authorized" if expected and headers.get("x-api-key") == expected else "unauthorized"

    @server.tool(description="Crash the server the first time it is called; answer afterwards.")
    async def crash_once() -> str:
        if not marker.exists():
            marker.write_text("crashed", encoding="utf-8")
            os._exit(1)
        return "answered after a restart"

    @server.tool(description="Never answer.")
    async def hang() -> str:
        await asyncio.Event().wait()
        return "unreachable"

    @server.tool(description="Draw a picture and describe it.")
    async def picture() -> list[types.ContentBlock]:
        import base64

        data = base64.b64encode(tiny_png()).decode("ascii")
        return [
            types.TextContent(text="a red dot"),
            types.ImageContent(data=data, mime_type="image/png"),
            types.EmbeddedResource(resource=types.TextResourceContents(uri="memo://dot", text="drawn at 1x1")),
        ]

    @server.tool(description="Refuse the request with an error result.")
    async def refuse() -> str:
        raise ToolError("the vault is closed")

    @server.tool(description="The process id of this server (one process serves every call of a session).")
    async def pid() -> int:
        return os.getpid()

    @server.tool(description="Write a long report.")
    async def report(lines: int = 2000) -> str:
        return "\n".join(f"line {i}: all quiet on the western front" for i in range(lines))

    @server.tool(description="Fetch a web page and return its body.")
    async def web_fetch(url: str) -> str:
        def fetch() -> str:
            with urllib.request.urlopen(url, timeout=30) as response:
                return str(response.read().decode("utf-8"))

        return await asyncio.to_thread(fetch)

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, help="serve HTTP on this port (default: stdio)")
    parser.add_argument("--sse", action="store_true", help="with --port: the SSE transport, not streamable HTTP")
    parser.add_argument("--marker", type=Path, required=True)
    args = parser.parse_args()
    server = build(args.marker)
    if args.port is None:
        server.run("stdio")
    elif args.sse:
        server.run("sse", host="127.0.0.1", port=args.port)
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
