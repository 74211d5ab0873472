"""`brb mcp`: the tools of :mod:`.tools` served over MCP on stdio, with the official ``mcp`` SDK.

Calls are answered one at a time on the event loop's thread (the embedder's MLX stream belongs
to the thread that loaded it; a resident search takes milliseconds). A tool that cannot answer
returns ``isError`` with one sentence; nothing a call does stops the server.

Logs: stderr gets warnings only, and never message text: the SDK's own records are cut to their
template (no arguments, no exception text, which for a validation error would quote the payload)
whatever ``BRB_LOG`` says.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from brb_pipeline.assistant.schemas import INSTRUCTIONS, TOOLS
from brb_pipeline.assistant.tools import Home

_SDK_LOGGERS = ("mcp", "mcp_types", "anyio", "httpx", "sse_starlette", "uvicorn")


class _TemplateOnly(logging.Filter):
    """Keeps an SDK record's fixed text only: its arguments and exception details may hold a
    tool call's arguments or results."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".")[0] in _SDK_LOGGERS:
            if record.exc_info and record.exc_info[0] is not None:
                record.msg = f"{record.msg} ({record.exc_info[0].__name__})"
            record.args, record.exc_info, record.exc_text, record.stack_info = (), None, None, None
            record.msg = str(record.msg)
        return True


def quiet_sdk_logs() -> None:
    """SDK loggers at WARNING and their records cut to the template on every root handler."""
    for name in _SDK_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    for handler in root.handlers:
        if not any(isinstance(f, _TemplateOnly) for f in handler.filters):
            handler.addFilter(_TemplateOnly())


def tool_list() -> list[Any]:
    import mcp_types as types

    hints = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                  open_world_hint=False)
    return [types.Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"],
                       annotations=hints) for t in TOOLS]


def result_of(home: Home, name: str, arguments: dict[str, Any] | None) -> Any:
    """The CallToolResult of one call: the answer as JSON text and as structured content, or
    ``isError`` with one sentence."""
    import mcp_types as types

    answer, failed = home.call(name, arguments)
    if failed:
        return types.CallToolResult(content=[types.TextContent(text=str(answer))], is_error=True)
    text = json.dumps(answer, ensure_ascii=False, default=str)
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=json.loads(text))


def build(home: Home) -> Any:
    """The low-level MCP server over ``home``."""
    import importlib.metadata

    import mcp_types as types
    from mcp.server import Server

    tools = tool_list()

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        return result_of(home, params.name, params.arguments)

    return Server("brb", version=importlib.metadata.version("brb-pipeline"), title="brb: your message history",
                  instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)


def serve(home: Home) -> None:
    """Answer on stdin/stdout until the client closes stdin."""
    import anyio
    from mcp.server.stdio import stdio_server

    quiet_sdk_logs()
    server = build(home)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)
