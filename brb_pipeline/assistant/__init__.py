"""`brb mcp`: the store offered to an AI assistant over the Model Context Protocol (stdio).

:mod:`.lines` renders messages one per line with sender, time and id (the one place that names
senders); :mod:`.tools` answers the tools from one home opened once, read-only; :mod:`.schemas`
declares the tools as a model sees them; :mod:`.server` wires them to the MCP SDK.

Must not import: dagster, ``stages``, ``privacy``, ``orchestration``, ``cli`` (it reads the store,
never runs the pipeline).
"""
