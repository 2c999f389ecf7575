"""One MCP server's connection inside a turn's sessions (tools/mcp/sessions.py): its state, its queued calls, the SDK
import, and the sentence that says why it could not connect. The cancellation contract is in tools/mcp/sessions.py's
docstring."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from runtime.config import MCPServerConfig
from runtime.errors import ToolError
from runtime.tools.base import ToolResult
from runtime.tools.mcp.util import root_error

CLOSE = object()  # what tells a server's owner task to close its session
SDK_MODULES = ("mcp", "mcp.client.stdio", "mcp.client.streamable_http", "mcp.shared.exceptions", "jsonschema")
CLOSED = -32000  # MCPError code: connection closed
TIMED_OUT = -32001


def import_sdk() -> None:
    """Import the MCP SDK (0.8–3 s here); the runtime runs it in a worker thread at open when servers exist."""
    import importlib

    for module in SDK_MODULES:
        importlib.import_module(module)


def consume(fut: asyncio.Future[Any]) -> None:
    """Mark a future's exception as retrieved: its waiter may be gone."""
    if not fut.cancelled():
        fut.exception()


def mcp_code(err: BaseException) -> int | None:
    from mcp.shared.exceptions import MCPError

    return err.code if isinstance(err, MCPError) else None


@dataclass(eq=False)
class Call:
    tool: str
    args: dict[str, Any]
    on_progress: Any
    result: asyncio.Future[ToolResult]
    task: asyncio.Task[None] | None = None
    abandoned: bool = False


@dataclass(eq=False)
class ServerLink:
    name: str
    cfg: MCPServerConfig
    owner: asyncio.Task[None] | None = None
    connected: asyncio.Future[list[Any]] | None = None  # the server's tool listing
    state: str = "connecting"  # connecting → ready → closed | failed
    gone: str = ""  # why it cannot be used (a warning text or a call error)
    timeout: asyncio.Timeout | None = None  # the owner's connect timeout, once entered
    closing: bool = False
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    calls: set[asyncio.Task[None]] = field(default_factory=set)
    errlog: Any = None

    def fail(self, message: str) -> None:
        if self.state in ("connecting", "ready"):
            self.state, self.gone = "failed", message
        if self.connected is not None and not self.connected.done():
            self.connected.set_exception(ToolError(message))

    def said(self) -> str:
        """' Its last output: …' from the tail of the server's stderr, or ''."""
        if self.errlog is None or self.errlog.closed:
            return ""
        try:
            self.errlog.flush()
            self.errlog.seek(max(0, self.errlog.seek(0, 2) - 4096))
            lines = [ln.strip() for ln in self.errlog.read().splitlines() if ln.strip()][-3:]
        except (OSError, ValueError):
            return ""
        return f" Its last output: {' | '.join(lines)[-400:]}" if lines else ""

    def connect_error(self, exc: BaseException, connect_timeout: float) -> str:
        """Why connecting failed, in a sentence, from the most telling leaf of the SDK's exception groups."""
        err, name, cmd = root_error(exc), self.name, self.cfg.command
        end = "; continuing without it."
        if isinstance(err, TimeoutError):
            return f"MCP server '{name}' did not answer within {connect_timeout:g} s{end}"
        if not cmd:
            return f"MCP server '{name}' could not be reached at {self.cfg.url}: {err or type(err).__name__}{end}"
        if isinstance(err, FileNotFoundError) and err.filename in (None, cmd):
            return f"MCP server '{name}' could not start: command '{cmd}' was not found{end}"
        if isinstance(err, OSError):
            return f"MCP server '{name}' could not start: {err.strerror or err}{end}"
        if mcp_code(err) == CLOSED:
            return f"MCP server '{name}' exited before it was ready{end}{self.said()}"
        return f"MCP server '{name}' failed to connect: {err or type(err).__name__}{end}{self.said()}"
