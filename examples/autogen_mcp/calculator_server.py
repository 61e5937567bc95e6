"""The calculator the AutoGen agent uses: an MCP server over stdio (the ``mcp`` package's FastMCP).

Started by the agent as ``python calculator_server.py`` (one per rollout); it can be tried alone with
any MCP client.
"""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

server = FastMCP("calculator", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def subtract(a: int, b: int) -> int:
    """Subtract b from a."""
    return a - b


@server.tool()
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


if __name__ == "__main__":
    server.run("stdio")
