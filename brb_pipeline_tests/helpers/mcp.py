"""One stdio session with `brb mcp`, and a tool call's structured answer."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def session(home: Path, env: dict, calls: list[tuple[str, dict | None]], *extra: str,
            errlog: Path | None = None) -> tuple[list[str], list[Any]]:
    """Start `brb mcp` on ``home``, list the tools and make ``calls`` in order over one session.
    Returns the tool names and each call's CallToolResult."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "brb_pipeline.cli", "mcp", "--home", str(home),
                                                                *extra], env=env)

    async def run() -> tuple[list[str], list[Any]]:
        with open(errlog or os.devnull, "w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                tools = await s.list_tools()
                return [t.name for t in tools.tools], [await s.call_tool(n, a) for n, a in calls]

    return anyio.run(run)


def answer(res) -> dict:
    assert not res.is_error, res.content[0].text
    assert json.loads(res.content[0].text) == res.structured_content
    return res.structured_content
