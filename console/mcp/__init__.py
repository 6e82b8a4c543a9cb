"""`fleet-console mcp`: the fleet as an MCP server (stdio by default, or streamable HTTP with ``--http``).

- ``safe.py``: host text made safe (escapes stripped, sizes capped);
- ``tools.py``: the tools' results as pure functions of the fleet state;
- ``schemas.py``: their output schemas;
- ``server.py``: the MCPServer (tools, resources, the hunt prompt) over a ``FleetController``;
- ``http.py``: MCP over streamable HTTP on a running controller (``serve --mcp`` shares it);
- ``command.py``: the command itself (``main(args)``).
"""
