"""MCP servers for one turn (the `mcp_connecting` phase, runtime/ARCHITECTURE.md): connect, list, call, close.

`MCPTurnSessions` belongs to one turn: `start()` at the beginning of setup launches every approved server
concurrently; `await ready()` in the `mcp_connecting` phase returns the tools that work plus warning texts;
`await aclose()` in cleanup ends everything. Each server's state and queued calls are a `ServerLink`
(tools/mcp/link.py). Decisions:

- One owner task per server enters the SDK `Client`, serves calls sent through a queue (each call in a task the
  owner spawns) and exits the `Client` itself (the SDK requires the entering task to exit it). An owner is
  natively cancelled at most once and never inside the SDK's shielded teardown: a second cancel breaks that
  teardown and leaves the server process running (seen with mcp 2.3). So aclose fires the owner's own connect
  timeout early, or sends a close sentinel; only an owner still waiting for the SDK import is cancelled.
- Connect timeout: each server gets `connect_timeout` seconds from when the SDK is imported (the first import,
  ~1 s, runs in a worker thread so the event loop never stalls). The owner bounds its connect with
  `asyncio.timeout_at()`; `ready()` gives up at the same deadline, without waiting for the SDK's teardown of a
  hung process (~2 s more, in the background). The SDK's `mode="auto"` (discover probe, then initialize) is kept.
- Failures are warnings, never exceptions: not approved or paused (never launched), bad config, command not
  found, exited during startup (with the tail of its stderr), no answer in time, unreachable url. A tool whose
  input schema is unusable (root not `type: object`, or not a valid JSON Schema) is left out with a warning; the
  server's other tools stay. Connect errors come as nested ExceptionGroups, flattened; the most telling leaf named.
- Stdio servers get `clean_env()` (never a variable the settings point to: `hidden_env`) plus their own `env`;
  cwd is the config's extra `cwd`, else the `cwd` argument, else the home folder; stderr goes to a temporary
  file, read only to explain a failure. HTTP servers use streamable HTTP on `url`, with optional `headers` (extra
  key). Consent (`approved`) gates both kinds.
- Tools are named `server__tool`, sanitised to [A-Za-z0-9_-], at most 64 characters; a long or clashing name gets
  a hash suffix. Effect is always `external`: a server's own read-only hints are not trusted.
- A server's tool list is checked against the one pinned when it was approved (`check_tools`, tools/mcp/pins.py):
  a server whose tools changed is paused (none of its tools offered) with a warning, and the turn goes on. Once
  such a change waits for the person (`pending_review`), later turns do not launch or connect to the server at
  all (the changed program must not run unreviewed) and give the same warning, until the change is approved.
- A tool's description is the server's text, so it reaches the model framed as untrusted data (capped, control
  characters removed), like the results (engine/agent/context.py `tool_message`); the descriptions and titles inside
  its input schema are capped and cleaned the same way.
- Calls run with `call_timeout`. Cancelling the task awaiting `run()` cancels the call task; the SDK sends
  `notifications/cancelled`, the server cancels its handler and the session stays usable (`run()` waits up to
  2 s for that before re-raising). Progress goes to `ctx.extra["on_progress"](progress, total, message)` if set.
- Results: text blocks joined by newlines, other blocks described in brackets, structured content as JSON when
  there is no text; `is_error` → `ToolResult(is_error=True)`. A timeout, a protocol error or a server that died
  → `ToolError`; a dead server's other tools then fail at once with the same reason.
- `aclose()` is idempotent and closes servers concurrently: a well-behaved server exits within milliseconds of
  its stdin closing; one that ignores that gets the SDK's 2 s grace, then SIGTERM to its process group and
  SIGKILL 2 s later. No process is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from runtime.config import MCPServerConfig
from runtime.errors import ToolError
from runtime.tools.base import Effect, Tool, ToolContext, ToolResult
from runtime.tools.mcp.link import (
    CLOSE,
    CLOSED,
    SDK_MODULES,
    TIMED_OUT,
    Call,
    ServerLink,
    consume,
    import_sdk,
    mcp_code,
)
from runtime.tools.mcp.pins import Snapshot, snapshot
from runtime.tools.mcp.util import (
    result_text,
    root_error,
    schema_problem,
    tool_name,
    untrusted_description,
    untrusted_schema,
)
from runtime.tools.shell.run_shell import clean_env

log = logging.getLogger(__name__)

CANCEL_GRACE = 2.0  # seconds run() waits for a cancelled call to reach the server
_MAX_PAGES = 50


class MCPTool:
    """One tool of a connected MCP server (the Tool protocol)."""

    effect = Effect.external

    def __init__(self, name: str, remote: Any, server: ServerLink, sessions: MCPTurnSessions):
        self.name = name
        self.description = untrusted_description(server.name, remote.description or remote.title or "")
        self.parameters: dict[str, Any] = untrusted_schema(remote.input_schema)
        self.server_name = server.name
        self.remote_name: str = remote.name
        self.touches = (f"It runs “{remote.name}” of the MCP server “{server.name}”, a program outside Hearth: what "
                        "it reads or changes is up to that server.")
        self._server = server
        self._sessions = sessions

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await self._sessions._call(self._server, self.remote_name, args, ctx.extra.get("on_progress"))


class MCPTurnSessions:
    """The MCP sessions of one turn: `start()`, `await ready()`, the tools' `run()`, `await aclose()`."""

    def __init__(self, servers: dict[str, MCPServerConfig], *, approved: Callable[[str, MCPServerConfig], bool],
                 connect_timeout: float = 10.0, call_timeout: float = 300.0, cwd: str | Path | None = None,
                 hidden_env: Collection[str] = (), check_tools: Callable[[str, Snapshot], str | None] | None = None,
                 pending_review: Callable[[str], str | None] | None = None):
        self.servers = dict(servers)
        self.check_tools = check_tools  # None while the tools are the pinned ones, else why the server is paused
        self.pending_review = pending_review  # None unless a change of its tools waits, else why it is paused
        self.hidden_env = frozenset(hidden_env)  # never inherited by a server (its own `env` is still given)
        self.paused: set[str] = set()  # those of the warnings that say a server is paused for changed tools
        self.approved = approved
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.cwd = cwd
        self._state: dict[str, ServerLink] = {}
        self._started = False
        self._result: tuple[list[Tool], list[str]] | None = None
        self._closing: asyncio.Future[None] | None = None
        self._sdk: asyncio.Task[float] | None = None  # resolves to the loop time the SDK was ready

    def start(self) -> None:
        """Begin connecting every approved, unpaused server, concurrently. Sync; needs a running loop; idempotent."""
        if self._started or self._closing is not None:
            return
        self._started = True
        loop = asyncio.get_running_loop()
        for name, cfg in self.servers.items():
            srv = self._state[name] = ServerLink(name, cfg)
            problem = self._precheck(name, cfg)
            if problem:
                srv.state, srv.gone = "failed", problem
                continue
            if self._sdk is None:
                self._sdk = loop.create_task(self._load_sdk())
                self._sdk.add_done_callback(consume)
            srv.connected = loop.create_future()
            srv.connected.add_done_callback(consume)
            srv.owner = loop.create_task(self._own(srv), name=f"mcp-{name}")

    def _precheck(self, name: str, cfg: MCPServerConfig) -> str | None:
        if not cfg.command and not cfg.url:
            return f"MCP server '{name}' has neither a 'command' nor a 'url' in settings; continuing without it."
        if not cfg.command and not str(cfg.url).startswith(("http://", "https://")):
            return f"MCP server '{name}' has a url that is not http(s): {cfg.url!r}; continuing without it."
        try:
            ok = bool(self.approved(name, cfg))
        except Exception:
            log.exception("consent check for MCP server %s failed", name)
            ok = False
        if ok:
            return self._pause(name, self.pending_review)
        return (f"MCP server '{name}' was not started: its command line has not been approved yet (or it changed "
                f"since it was approved); continuing without it.")

    @staticmethod
    async def _load_sdk() -> float:
        if any(m not in sys.modules for m in SDK_MODULES):
            await asyncio.to_thread(import_sdk)
        return asyncio.get_running_loop().time()

    async def ready(self) -> tuple[list[Tool], list[str]]:
        """Wait for the connects (each bounded by connect_timeout); the tools that work and the warnings."""
        if self._result is not None:
            return self._result
        self.start()
        loop = asyncio.get_running_loop()
        pending = [s for s in self._state.values() if s.connected is not None]
        if pending and self._sdk is not None:
            try:
                deadline = await asyncio.shield(self._sdk) + self.connect_timeout
            except Exception as exc:
                for srv in pending:
                    srv.fail(f"MCP server '{srv.name}' was not started: MCP support failed to load ({exc}).")
                deadline = loop.time()
            while waiting := [s.connected for s in pending if s.connected is not None and not s.connected.done()]:
                if loop.time() >= deadline:  # each owner's own timeout fires at this same deadline
                    for srv in [s for s in pending if s.state == "connecting"]:
                        srv.fail(f"MCP server '{srv.name}' did not answer within {self.connect_timeout:g} s; "
                                 f"continuing without it.")
                    break
                await asyncio.wait(waiting, timeout=deadline - loop.time() + 0.005)
        tools: list[Tool] = []
        warnings: list[str] = []
        taken: set[str] = set()
        for srv in self._state.values():
            if srv.state != "ready" or srv.connected is None:
                warnings.append(srv.gone or f"MCP server '{srv.name}' is not available; continuing without it.")
                continue
            listing = srv.connected.result()
            paused = self._pause(srv.name, self.check_tools, snapshot(listing))
            if paused:
                warnings.append(paused)
                continue
            for remote in listing:
                problem = schema_problem(remote.input_schema)
                if problem:
                    warnings.append(f"MCP server '{srv.name}': tool '{remote.name}' was left out because its "
                                    f"input schema is unusable: {problem}.")
                    continue
                taken.add(name := tool_name(srv.name, remote.name, taken))
                tools.append(MCPTool(name, remote, srv, self))
        self._result = (tools, warnings)
        return self._result

    def _pause(self, name: str, check: Callable[..., str | None] | None, *args: Any) -> str | None:
        """None, or the warning that pauses the server (kept in `paused`); a check that fails pauses it too."""
        if check is None:
            return None
        try:
            warning = check(name, *args)
        except Exception:
            log.exception("checking the tools of MCP server %s failed", name)
            warning = f"MCP server '{name}' is paused: its tools could not be checked against the approved ones."
        if warning:
            self.paused.add(warning)
        return warning

    async def aclose(self) -> None:
        """Close every session and end every server process; servers close concurrently. Idempotent."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close_all())
        await asyncio.shield(self._closing)

    async def _close_all(self) -> None:
        owners = [srv.owner for srv in self._state.values() if srv.owner is not None]
        for srv in self._state.values():
            self._stop(srv)
        if owners:
            await asyncio.wait(owners)
        for srv in self._state.values():
            if srv.errlog is not None:
                srv.errlog.close()

    @staticmethod
    def _stop(srv: ServerLink) -> None:
        """Make the owner close its session, cancelling it natively at most once (see the module notes)."""
        srv.closing = True
        srv.queue.put_nowait(CLOSE)
        if srv.owner is None or srv.owner.done():
            return
        if srv.timeout is None:  # still waiting for the SDK import: nothing of the SDK's to tear down
            srv.owner.cancel()
        else:
            with contextlib.suppress(RuntimeError):  # the timeout expired or was left: the owner is unwinding
                srv.timeout.reschedule(asyncio.get_running_loop().time())

    # -- the owner task --

    def _client(self, srv: ServerLink, stack: contextlib.AsyncExitStack) -> Any:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        cfg, extra = srv.cfg, srv.cfg.model_extra or {}
        if cfg.command:
            srv.errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            env = {**clean_env(hidden=self.hidden_env), **cfg.env}
            params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=env,
                                           cwd=str(extra.get("cwd") or self.cwd or Path.home()))
            return Client(stdio_client(params, errlog=srv.errlog))
        headers = extra.get("headers")
        if isinstance(headers, dict) and headers:
            http = create_mcp_http_client(headers={str(k): str(v) for k, v in headers.items()})
            stack.push_async_callback(http.aclose)
            return Client(streamable_http_client(str(cfg.url), http_client=http))
        return Client(str(cfg.url))

    async def _own(self, srv: ServerLink) -> None:
        assert self._sdk is not None and srv.connected is not None
        try:
            deadline = await asyncio.shield(self._sdk) + self.connect_timeout
            async with contextlib.AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout_at(deadline) as srv.timeout:
                        client = await stack.enter_async_context(self._client(srv, stack))
                        listing: list[Any] = []
                        cursor = None
                        for _ in range(_MAX_PAGES):
                            page = await client.list_tools(cursor=cursor)
                            listing.extend(page.tools)
                            if not (cursor := page.next_cursor):
                                break
                except Exception as exc:
                    srv.fail(srv.connect_error(exc, self.connect_timeout))
                    return
                if srv.state != "connecting" or srv.closing:  # ready() gave up on it, or aclose() came
                    return
                srv.state = "ready"
                srv.connected.set_result(listing)
                await self._serve(srv, client)
        except Exception as exc:
            log.debug("MCP server %s closed with an error: %r", srv.name, exc)
        finally:
            if srv.state in ("connecting", "ready"):
                srv.state, srv.gone = "closed", f"MCP server '{srv.name}' is closed."
            srv.fail(srv.gone)
            for task in srv.calls:
                if not task.cancelling():
                    task.cancel()
            while not srv.queue.empty():
                item = srv.queue.get_nowait()
                if item is not CLOSE and not item.result.done():
                    item.result.set_exception(ToolError(srv.gone))

    async def _serve(self, srv: ServerLink, client: Any) -> None:
        while (item := await srv.queue.get()) is not CLOSE:
            if not item.abandoned:
                item.task = asyncio.create_task(self._run_call(srv, client, item))
                srv.calls.add(item.task)
                item.task.add_done_callback(srv.calls.discard)
        for task in srv.calls:
            if not task.cancelling():
                task.cancel()
        if srv.calls:
            await asyncio.wait(list(srv.calls), timeout=CANCEL_GRACE)

    async def _run_call(self, srv: ServerLink, client: Any, call: Call) -> None:
        async def progress(value: float, total: float | None, message: str | None) -> None:
            try:
                out = call.on_progress(value, total, message) if call.on_progress else None
                if inspect.isawaitable(out):
                    await out
            except Exception:
                log.exception("progress callback of %s failed", call.tool)

        where = f"The MCP tool '{call.tool}' on server '{srv.name}'"
        try:
            result = await client.call_tool(call.tool, call.args, read_timeout_seconds=self.call_timeout,
                                            progress_callback=progress)
            outcome: ToolResult | ToolError = ToolResult(result_text(result), is_error=bool(result.is_error))
        except asyncio.CancelledError:
            if not call.result.done():
                call.result.set_exception(ToolError(f"{where} was cancelled."))
            raise
        except Exception as exc:
            err = root_error(exc)
            if mcp_code(err) == TIMED_OUT:
                outcome = ToolError(f"{where} did not finish within {self.call_timeout:g} s; it was cancelled.")
            elif mcp_code(err) == CLOSED or isinstance(err, OSError):
                srv.fail(f"MCP server '{srv.name}' stopped while running '{call.tool}' (it crashed or exited); its "
                         f"tools are unavailable for the rest of this turn.{srv.said()}")
                srv.queue.put_nowait(CLOSE)
                outcome = ToolError(srv.gone)
            elif mcp_code(err) is not None:
                outcome = ToolError(f"MCP server '{srv.name}' refused the call to '{call.tool}': {err}")
            else:
                outcome = ToolError(f"{where} failed: {type(err).__name__}: {err}")
        if call.result.done():
            return
        if isinstance(outcome, ToolError):
            call.result.set_exception(outcome)
        else:
            call.result.set_result(outcome)

    async def _call(self, srv: ServerLink, tool: str, args: dict[str, Any], on_progress: Any) -> ToolResult:
        """The caller's side of a call: queue it, await it; if cancelled, cancel it and let the cancel go out."""
        if srv.state != "ready" or self._closing is not None:
            raise ToolError(srv.gone or f"MCP server '{srv.name}' is not connected.")
        call = Call(tool, dict(args or {}), on_progress, asyncio.get_running_loop().create_future())
        call.result.add_done_callback(consume)
        srv.queue.put_nowait(call)
        try:
            return await asyncio.shield(call.result)
        except asyncio.CancelledError:
            call.abandoned = True
            if call.task is not None and not call.task.done():
                if not call.task.cancelling():
                    call.task.cancel()
                await asyncio.wait({call.task}, timeout=CANCEL_GRACE)
            raise
