"""`brb mcp`: serve one home to an AI assistant over the Model Context Protocol (stdio)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def mcp_command(home_opt: Callable, settings: Callable[..., Any]) -> click.Command:
    """The ``mcp`` command, with the CLI's ``--home`` option and settings loader."""

    @click.command("mcp")
    @click.option("--log", "log_calls", is_flag=True,
                  help="Record each search call in the local search log (brb search-log); off by default.")
    @home_opt
    def mcp(log_calls, home):
        """Answer an AI assistant's tool calls on stdin/stdout (MCP): search, get_conversation,
        list_people, person, status. Read-only; nothing leaves this machine but what the
        assistant is given. The home is opened once: a missing home or key is an error here."""
        import contextlib
        import sys

        sys.modules.setdefault("pandas", None)  # as `brb search`: nothing on this path needs it
        from brb_pipeline.assistant.server import quiet_sdk_logs, serve
        from brb_pipeline.assistant.tools import Home

        quiet_sdk_logs()
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the protocol's: a stray print would break it
            h = Home.open(settings(home), log=log_calls)
        try:
            serve(h)
        finally:
            h.close()

    return mcp
