"""MCP sessions against real server processes (tests/support/mcp_server.py), over stdio and streamable HTTP,
plus the reference server `@modelcontextprotocol/server-everything` when npx is available."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

import mcp  # noqa: F401  (imported up front so connect timings do not include the SDK's import)
import mcp_types
import pytest

from runtime.config import MCPServerConfig
from runtime.errors import ToolError
from runtime.tools.base import Effect, ToolContext
from runtime.tools.mcp.consent import MCPConsents, command_line, config_fingerprint
from runtime.tools.mcp.sessions import MCPTurnSessions
from runtime.tools.mcp.util import result_text, schema_problem, tool_name
from tests.support.helpers import free_port, mcp_http_server

SERVER = str(Path(__file__).resolve().parents[2] / "support" / "mcp_server.py")
# A Python server needs ~1-3 s to start here (importing the SDK); the hang test waits this long.
CONNECT = 8.0


def allow(name, cfg) -> bool:
    return True


def server(tmp: Path, *flags: str, tag: str = "s") -> MCPServerConfig:
    return MCPServerConfig(
        command=sys.executable,
        args=[SERVER, *flags],
        env={"MCP_TEST_PID_FILE": str(tmp / f"{tag}.pids"), "MCP_TEST_CANCEL_FILE": str(tmp / f"{tag}.cancel")},
    )


def pids(tmp: Path, tag: str) -> list[int]:
    p = tmp / f"{tag}.pids"
    return [int(x) for x in p.read_text().split()] if p.exists() else []


def gone(pid: int) -> bool:
    """True if pid no longer runs (a zombie waiting for its reaper counts as gone)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return data[data.rfind(b")") + 2 :].split()[0] == b"Z"


async def wait_until(check, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.02)
    return bool(check())


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(task_id="t1", turn_id="u1", workspace=tmp_path, call_id="c1")


@contextlib.asynccontextmanager
async def sessions(servers: dict[str, MCPServerConfig], **kw):
    s = MCPTurnSessions(servers, approved=kw.pop("approved", allow), **{"connect_timeout": CONNECT, **kw})
    s.start()
    try:
        yield s
    finally:
        await s.aclose()


# -- naming, schemas, results (no process) --


def test_tool_names_are_namespaced_sanitised_short_and_unique():
    assert tool_name("files", "read") == "files__read"
    assert tool_name("my server.v2", "größe/x") == "my_server_v2__gr__e_x"
    long = tool_name("s" * 40, "t" * 40)
    assert len(long) == 64 and long.startswith("s" * 40)
    assert long != tool_name("s" * 40, "t" * 41)
    taken = {"a_b__c"}
    other = tool_name("a.b", "c", taken)
    assert other != "a_b__c" and other.startswith("a_b__c_") and len(other) <= 64


def test_schema_problems():
    assert schema_problem({"type": "object", "properties": {"x": {"type": "integer"}}}) is None
    assert schema_problem({"type": "object"}) is None
    assert "object" in schema_problem({"type": "array"})
    assert "not a valid JSON Schema" in schema_problem({"type": "object", "properties": {"x": {"type": 5}}})
    assert schema_problem(["not", "a", "dict"]) is not None


def test_result_text_joins_text_describes_other_blocks_and_falls_back_to_structured():
    r = mcp_types.CallToolResult(content=[
        mcp_types.TextContent(type="text", text="one"),
        mcp_types.ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
        mcp_types.TextContent(type="text", text="two"),
    ])
    assert result_text(r) == "one\n[image content (image/png), 6 bytes, not shown]\ntwo"
    assert json.loads(result_text(mcp_types.CallToolResult(content=[], structured_content={"a": 1}))) == {"a": 1}
    assert result_text(mcp_types.CallToolResult(content=[])) == "(no output)"


# -- consent --


def test_consents_store_a_hash_and_ask_again_when_the_command_changes(home: Path):
    consents = MCPConsents(home)
    cfg = MCPServerConfig(command="npx", args=["-y", "some-server"], env={"API_TOKEN": "s3cret", "MODE": "fast x"})
    assert not consents.is_approved("x", cfg)
    consents.approve("x", cfg)
    assert consents.is_approved("x", cfg)
    assert consents.is_approved("x", MCPServerConfig(**cfg.model_dump()))  # same config, new object
    assert not consents.is_approved("y", cfg)  # keyed by name
    assert not consents.is_approved("x", cfg.model_copy(update={"args": ["-y", "other-server"]}))
    assert not consents.is_approved("x", cfg.model_copy(update={"command": "/usr/bin/npx"}))
    assert not consents.is_approved("x", cfg.model_copy(update={"env": {"API_TOKEN": "rotated", "MODE": "fast x"}}))
    assert not consents.is_approved("x", MCPServerConfig(**cfg.model_dump(), cwd="/elsewhere"))

    raw = (home / "mcp_consents.json").read_text()
    assert "s3cret" not in raw
    assert json.loads(raw)["servers"]["x"]["sha256"] == config_fingerprint(cfg)
    assert stat.S_IMODE(os.stat(home / "mcp_consents.json").st_mode) == 0o600
    line = consents.command_line(cfg)
    assert line == "API_TOKEN=<hidden> MODE='fast x' npx -y some-server"
    assert consents.approved() == {"x": line}

    assert consents.revoke("x") and not consents.revoke("x")
    assert not consents.is_approved("x", cfg)


def test_http_servers_need_consent_too(home: Path):
    consents = MCPConsents(home)
    cfg = MCPServerConfig(url="https://user:pw@example.org/mcp", headers={"Authorization": "Bearer t", "X-Team": "a"})
    assert command_line(cfg) == (
        "connect to https://<hidden>@example.org/mcp with headers Authorization: <hidden>, X-Team: a"
    )
    assert not consents.is_approved("remote", cfg)
    consents.approve("remote", cfg)
    assert consents.is_approved("remote", cfg)
    assert not consents.is_approved("remote", cfg.model_copy(update={"url": "https://example.org/other"}))


def test_a_broken_consents_file_approves_nothing(home: Path):
    (home / "mcp_consents.json").write_text("{not json")
    consents = MCPConsents(home)
    cfg = MCPServerConfig(command="x")
    assert not consents.is_approved("x", cfg)
    consents.approve("x", cfg)
    assert consents.is_approved("x", cfg)


async def test_a_server_that_is_not_approved_is_never_launched(tmp_path: Path):
    marker = tmp_path / "launched"
    seen = []

    def approved(name, cfg):
        seen.append((name, cfg.command))
        return False

    cfg = MCPServerConfig(command=sys.executable, args=["-c", f"open({str(marker)!r}, 'w')"])
    async with sessions({"sneaky": cfg}, approved=approved) as s:
        tools, warnings = await s.ready()
        await asyncio.sleep(0.5)
    assert tools == [] and not marker.exists()
    assert seen == [("sneaky", sys.executable)]
    assert len(warnings) == 1 and "'sneaky' was not started" in warnings[0] and "approved" in warnings[0]


async def test_a_server_whose_tool_change_waits_for_review_is_never_launched(tmp_path: Path):
    def launcher(tag: str) -> MCPServerConfig:
        return MCPServerConfig(command=sys.executable, args=["-c", f"open({str(tmp_path / tag)!r}, 'w')"])

    def pending_review(name):
        if name == "unreadable":
            raise OSError("the consents file could not be read")
        return f"MCP server '{name}' is paused: its tools changed since you approved them (…)."

    async with sessions({"changed": launcher("a"), "unreadable": launcher("b")}, pending_review=pending_review) as s:
        tools, warnings = await s.ready()
        await asyncio.sleep(0.5)
    assert tools == [] and not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert warnings == [pending_review("changed"), "MCP server 'unreadable' is paused: its tools could not be "
                        "checked against the approved ones."]
    assert s.paused == set(warnings)  # the turn saves them with the code mcp_paused


async def test_the_consent_store_gates_launching(tmp_path: Path, home: Path, ctx):
    consents = MCPConsents(home)
    cfg = server(tmp_path)
    consents.approve("calc", cfg)
    changed = cfg.model_copy(update={"args": [*cfg.args, "--bad-schema"]})
    async with sessions({"calc": changed}, approved=consents.is_approved) as s:
        tools, warnings = await s.ready()
    assert tools == [] and "not been approved" in warnings[0] and pids(tmp_path, "s") == []
    async with sessions({"calc": cfg}, approved=consents.is_approved) as s:
        tools, warnings = await s.ready()
        assert warnings == [] and {t.name for t in tools} >= {"calc__add"}


# -- stdio sessions --


async def test_connect_list_and_call(tmp_path: Path, ctx):
    async with sessions({"calc": server(tmp_path)}) as s:
        tools, warnings = await s.ready()
        assert warnings == []
        by = {t.name: t for t in tools}
        assert set(by) == {"calc__add", "calc__slow", "calc__crash", "calc__progress", "calc__fail",
                           "calc__getenv", "calc__structured"}
        add = by["calc__add"]
        assert add.effect is Effect.external
        assert add.parameters["type"] == "object" and set(add.parameters["required"]) == {"a", "b"}
        assert "Add two integers." in add.description and "calc" in add.description
        result = await add.run({"a": 2, "b": 40}, ctx)
        assert (result.output, result.is_error) == ("42", False)
        structured = await by["calc__structured"].run({}, ctx)
        assert json.loads(structured.output) == {"answer": 42}
        assert await s.ready() == (tools, warnings)  # ready() is idempotent
        [pid] = pids(tmp_path, "s")
        assert not gone(pid)
    assert gone(pid)
    with pytest.raises(ToolError, match=r"MCP server 'calc' is closed"):
        await add.run({"a": 1, "b": 1}, ctx)


async def test_the_server_gets_a_clean_environment_plus_its_own(tmp_path: Path, ctx, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    monkeypatch.setenv("HARMLESS_SETTING", "kept")
    cfg = server(tmp_path)
    cfg.env["SERVER_TOKEN"] = "its-own"
    async with sessions({"calc": cfg}) as s:
        tools, _ = await s.ready()
        getenv = {t.name: t for t in tools}["calc__getenv"]
        values = {n: (await getenv.run({"name": n}, ctx)).output
                  for n in ("OPENAI_API_KEY", "HEARTH_HOME", "HARMLESS_SETTING", "SERVER_TOKEN")}
    assert values == {"OPENAI_API_KEY": "(unset)", "HEARTH_HOME": "(unset)", "HARMLESS_SETTING": "kept",
                      "SERVER_TOKEN": "its-own"}


async def test_progress_is_reported(tmp_path: Path, ctx):
    seen = []
    ctx.extra["on_progress"] = lambda value, total, message: seen.append((value, total, message))
    async with sessions({"calc": server(tmp_path)}) as s:
        tools, _ = await s.ready()
        result = await {t.name: t for t in tools}["calc__progress"].run({"steps": 3}, ctx)
    assert result.output == "done 3 steps"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_a_failing_tool_and_bad_arguments_give_error_results(tmp_path: Path, ctx):
    async with sessions({"calc": server(tmp_path)}) as s:
        tools, _ = await s.ready()
        by = {t.name: t for t in tools}
        failed = await by["calc__fail"].run({}, ctx)
        assert failed.is_error and "this tool always fails" in failed.output
        bad = await by["calc__add"].run({"a": "x"}, ctx)
        assert bad.is_error
        assert (await by["calc__add"].run({"a": 1, "b": 2}, ctx)).output == "3"


async def test_a_crashing_server_gives_a_tool_error_and_the_rest_stays_sane(tmp_path: Path, ctx):
    async with sessions({"a": server(tmp_path, tag="a"), "b": server(tmp_path, tag="b")}) as s:
        tools, warnings = await s.ready()
        assert warnings == []
        by = {t.name: t for t in tools}
        with pytest.raises(ToolError, match=r"MCP server 'a' stopped while running 'crash'"):
            await by["a__crash"].run({}, ctx)
        started = time.monotonic()
        with pytest.raises(ToolError, match=r"MCP server 'a' stopped"):
            await by["a__add"].run({"a": 1, "b": 1}, ctx)
        assert time.monotonic() - started < 0.5
        assert (await by["b__add"].run({"a": 1, "b": 1}, ctx)).output == "2"
        [pid_a], [pid_b] = pids(tmp_path, "a"), pids(tmp_path, "b")
        assert await wait_until(lambda: gone(pid_a), 5)
    assert gone(pid_b)


async def test_cancelling_a_slow_call_cancels_it_on_the_server_and_the_session_stays_usable(tmp_path: Path, ctx):
    async with sessions({"calc": server(tmp_path)}) as s:
        tools, _ = await s.ready()
        by = {t.name: t for t in tools}
        call = asyncio.ensure_future(by["calc__slow"].run({"seconds": 60}, ctx))
        await asyncio.sleep(0.5)
        assert not call.done()
        started = time.monotonic()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert time.monotonic() - started < 1.0
        cancel_file = tmp_path / "s.cancel"
        assert await wait_until(lambda: cancel_file.exists() and "cancelled" in cancel_file.read_text(), 5)
        assert (await by["calc__add"].run({"a": 5, "b": 2}, ctx)).output == "7"

        # a call still running when the sessions close ends with an error, not a hang
        late = asyncio.ensure_future(by["calc__slow"].run({"seconds": 60}, ctx))
        await asyncio.sleep(0.3)
        await s.aclose()
        with pytest.raises(ToolError, match="was cancelled"):
            await late


async def test_a_call_timeout_cancels_the_call_and_keeps_the_session(tmp_path: Path, ctx):
    async with sessions({"calc": server(tmp_path)}, call_timeout=0.5) as s:
        tools, _ = await s.ready()
        by = {t.name: t for t in tools}
        with pytest.raises(ToolError, match=r"did not finish within 0\.5 s; it was cancelled"):
            await by["calc__slow"].run({"seconds": 30}, ctx)
        assert await wait_until(lambda: (tmp_path / "s.cancel").exists(), 5)
        assert (await by["calc__add"].run({"a": 1, "b": 2}, ctx)).output == "3"


async def test_a_hanging_server_costs_at_most_its_timeout_and_a_working_one_is_used(tmp_path: Path, ctx):
    started = time.monotonic()
    servers = {"stuck": server(tmp_path, "--hang-initialize", tag="stuck"), "calc": server(tmp_path, tag="calc")}
    async with sessions(servers) as s:
        tools, warnings = await s.ready()
        elapsed = time.monotonic() - started
        assert CONNECT - 0.1 <= elapsed < CONNECT + 0.5
        assert warnings == [f"MCP server 'stuck' did not answer within {CONNECT:g} s; continuing without it."]
        assert {t.name for t in tools} >= {"calc__add"} and not any(t.name.startswith("stuck") for t in tools)
        assert (await next(t for t in tools if t.name == "calc__add").run({"a": 1, "b": 1}, ctx)).output == "2"
    assert all(gone(p) for p in pids(tmp_path, "stuck") + pids(tmp_path, "calc"))
    assert pids(tmp_path, "stuck")


async def test_bad_schemas_missing_commands_and_early_exits_become_warnings(tmp_path: Path):
    servers = {
        "bad": server(tmp_path, "--bad-schema"),
        "missing": MCPServerConfig(command=str(tmp_path / "no-such-program")),
        "dies": MCPServerConfig(command=sys.executable, args=["-c", "import sys; sys.exit('boom: no config')"]),
        "empty": MCPServerConfig(),
    }
    async with sessions(servers) as s:
        tools, warnings = await s.ready()
    names = {t.name for t in tools}
    assert "bad__add" in names and not any("broken" in n for n in names)
    assert len(warnings) == 4
    assert "tool 'broken' was left out" in warnings[0] and "not a valid JSON Schema" in warnings[0]
    assert "could not start: command" in warnings[1] and "was not found" in warnings[1]
    assert "'dies' exited before it was ready" in warnings[2] and "boom: no config" in warnings[2]
    assert "neither a 'command' nor a 'url'" in warnings[3]


async def test_aclose_leaves_no_process_even_while_connecting_and_is_idempotent(tmp_path: Path):
    servers = {f"s{i}": server(tmp_path, tag="all") for i in range(3)}
    async with sessions(servers) as s:
        tools, warnings = await s.ready()
        assert warnings == [] and len(tools) == 21
        running = pids(tmp_path, "all")
        assert len(running) == 3 and not any(gone(p) for p in running)
        started = time.monotonic()
        await s.aclose()
        assert time.monotonic() - started < 1.5
        assert all(gone(p) for p in running)
        await s.aclose()

    # closed while the servers are still starting
    early = MCPTurnSessions({"s": server(tmp_path, tag="early")}, approved=allow, connect_timeout=CONNECT)
    early.start()
    assert await wait_until(lambda: pids(tmp_path, "early"), 10)
    started = time.monotonic()
    await early.aclose()
    assert time.monotonic() - started < 3.0
    assert all(gone(p) for p in pids(tmp_path, "early"))
    tools, warnings = await early.ready()
    assert tools == []


# -- streamable HTTP --


async def test_streamable_http(tmp_path: Path, ctx):
    async with mcp_http_server(tmp_path) as url, sessions({"web": MCPServerConfig(url=url)}) as s:
        tools, warnings = await s.ready()
        assert warnings == []
        by = {t.name: t for t in tools}
        assert (await by["web__add"].run({"a": 20, "b": 22}, ctx)).output == "42"
        call = asyncio.ensure_future(by["web__slow"].run({"seconds": 60}, ctx))
        await asyncio.sleep(0.5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await wait_until(lambda: (tmp_path / "http.cancel").exists(), 5)
        assert (await by["web__add"].run({"a": 1, "b": 1}, ctx)).output == "2"


async def test_an_unreachable_http_server_is_a_warning():
    url = f"http://127.0.0.1:{free_port()}/mcp"
    async with sessions({"web": MCPServerConfig(url=url)}, connect_timeout=5) as s:
        started = time.monotonic()
        tools, warnings = await s.ready()
    assert tools == [] and len(warnings) == 1 and "MCP server 'web'" in warnings[0]
    assert time.monotonic() - started < 5.5


# -- the reference server from npm --


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx (Node.js) is not installed")
async def test_reference_server_everything(tmp_path: Path, ctx):
    cfg = MCPServerConfig(command="npx", args=["-y", "@modelcontextprotocol/server-everything"])
    # The first run downloads the package from the npm registry; later runs start from npx's cache in ~2 s.
    async with sessions({"everything": cfg}, connect_timeout=180, cwd=tmp_path) as s:
        tools, warnings = await s.ready()
        assert warnings == []
        by = {t.name: t for t in tools}
        assert "everything__echo" in by
        result = await by["everything__echo"].run({"message": "hello from Hearth"}, ctx)
        assert not result.is_error and "hello from Hearth" in result.output
