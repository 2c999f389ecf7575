"""A key under an arbitrary variable name never reaches a tool, an MCP server, the model, the data folder, events,
exports or logs; a server that echoes it in an error gets it cut out."""

from __future__ import annotations

import json
import logging
import sys
import uuid
from pathlib import Path

import pytest

from app.tasks import export
from runtime.api import Runtime
from runtime.config import Settings
from runtime.errors import ProviderError
from runtime.redact import REDACTED, redact, redact_known, remember
from runtime.tools.shell.run_shell import clean_env
from tests.support.helpers import collect
from tests.support.openai_server import OpenAIServer, Reply


def _canary() -> tuple[str, str]:
    """(an arbitrary variable name, a key value) that look like nothing secret to a name or shape filter."""
    tag = uuid.uuid4().hex
    return f"ZQ{tag[:6].upper()}_LLM_AUTH", f"cnry{tag}{uuid.uuid4().hex}"


def _occurrences(home: Path, value: str) -> dict[str, int]:
    """Files under `home` (every byte: the SQLite file, its WAL, workspaces, logs) that contain `value`."""
    needle = value.encode()
    return {str(p): n for p in home.rglob("*") if p.is_file() and (n := p.read_bytes().count(needle))}


def _settings(home: Path, base_url: str, key_var: str, mcp_var: str) -> None:
    probe = {"command": sys.executable, "args": ["-m", "tests.support.mcp_server", f"--label=${{{mcp_var}}}"],
             "cwd": str(Path.cwd())}
    (home / "settings.json").write_text(json.dumps({
        "providers": [{"id": "local", "kind": "openai", "base_url": base_url, "api_key_ref": f"env:{key_var}"}],
        "default_model": "local/test-model",
        "mcpServers": {"probe": probe},
    }))


async def test_a_key_under_any_name_never_leaves_through_tools_events_requests_files_or_exports(
    home, monkeypatch, caplog
):
    key_var, key = _canary()
    mcp_var, mcp_secret = _canary()
    monkeypatch.setenv(key_var, key)
    monkeypatch.setenv(mcp_var, mcp_secret)
    caplog.set_level(logging.DEBUG)
    async with OpenAIServer(api_key=key) as server:
        _settings(home, server.base_url, key_var, mcp_var)
        server.script(
            Reply(chunks=[], tool_calls=[("c1", "run_shell", {"command": "env"})], finish="tool_calls"),
            Reply(chunks=[], tool_calls=[("c2", "probe__getenv", {"name": key_var}),
                                         ("c3", "probe__getenv", {"name": mcp_var})], finish="tool_calls"),
            Reply(chunks=["Done."]),
            # The next turn: the server rejects the key and echoes it, as some proxies do.
            Reply(status=401, error_body={"error": {"message": f"Bad header Authorization: Bearer {key}"}}),
        )
        rt = await Runtime.open(home)
        try:
            rt.mcp.approve("probe")
            task = await rt.create_task(approval="full_auto")
            events = await collect(rt, task.id, turn_id=(await rt.send(task.id, "show the environment")).turn_id)
            assert events[-1].type == "turn_ended" and events[-1].reason == "completed", events[-1]
            done = [(e.name, e.result) for e in events if e.type == "tool_call" and e.state == "done"]
            (shell, printed), (_, got_key), (_, got_mcp) = done
            assert shell == "run_shell" and "PATH=" in printed  # the shell really printed its environment ...
            assert key_var not in printed and mcp_var not in printed  # ... without the variables
            assert got_key == got_mcp == "(unset)"  # nor does an MCP server inherit them
            await rt.wait_idle(task.id)

            events += await collect(rt, task.id, turn_id=(await rt.send(task.id, "again")).turn_id)
            ended = events[-1]
            assert ended.reason == "error" and "Bearer [redacted]" in ended.error and key not in ended.error
            assert server.log[0].headers["authorization"] == f"Bearer {key}"  # the key did reach its provider

            info, messages = await rt.get_task(task.id), await rt.messages(task.id)
            turns = await rt.tasks.turns(task.id)
            exports = export.to_json(info, messages, turns) + export.to_markdown(info, messages, turns)
            assert "[redacted]" in exports and "rejected the API key" in exports
            seen_while_open = _occurrences(home, key) | _occurrences(home, mcp_secret)
        finally:
            await rt.aclose()
    for secret in (key, mcp_secret):
        assert seen_while_open == {} and _occurrences(home, secret) == {}
        assert secret not in json.dumps([e.model_dump(mode="json") for e in events])
        assert secret not in json.dumps(server.requests)
        assert secret not in exports
        assert secret not in caplog.text


def test_the_filter_follows_the_settings_not_the_names():
    settings = Settings.model_validate({
        "providers": [{"id": "p", "kind": "openai", "base_url": "http://x/v1", "api_key_ref": "env:MYLLM_AUTH"}],
        "mcpServers": {
            "gh": {"command": "gh-mcp", "env": {"GH_LOGIN": "x"}, "args": ["--auth", "${env:GH_AUTH_VALUE}"]},
            "notes": {"command": "notes-mcp", "args": ["${HOME}/notes"]},
        },
    })
    names = settings.secret_env_names()
    assert names == {"MYLLM_AUTH", "GH_LOGIN", "GH_AUTH_VALUE"}  # ${HOME} does not make HOME a secret
    environ = {"MYLLM_AUTH": "a", "GH_LOGIN": "b", "GH_AUTH_VALUE": "c", "HEARTH_HOME": "/h", "OPENAI_API_KEY": "d",
               "HOME": "/root", "PATH": "/bin"}
    assert clean_env(environ, hidden=names) == {"HOME": "/root", "PATH": "/bin"}


def test_redaction_cuts_known_values_and_credential_shapes():
    secret = "v4lue-" + uuid.uuid4().hex
    remember([secret, "short"])
    text = (f"echo {secret}; Authorization: Bearer abcdefghijklmnop; key sk-proj-{'x' * 24}; "
            "url?api_key=hunter22&x=1; short stays")
    out = redact(text)
    assert secret not in out and "abcdefghijklmnop" not in out and "xxxxxxxxxxxx" not in out and "hunter22" not in out
    assert out.count(REDACTED) == 4 and "Bearer [redacted]" in out and "api_key=[redacted]&x=1" in out
    assert "short stays" in out
    assert redact_known(f"password={secret}") == f"password={REDACTED}"
    assert redact_known("password=hunter22") == "password=hunter22"  # tool output keeps what only looks secret


async def test_every_log_record_of_the_process_is_redacted(home, caplog):
    key = "lg" + uuid.uuid4().hex
    rt = await Runtime.open(home)  # installs the log redaction
    await rt.aclose()
    remember([key])
    caplog.set_level(logging.INFO)
    log = logging.getLogger("runtime.providers.anything")  # a child created after the runtime opened
    try:
        raise ProviderError(f"server said Bearer {key}")
    except ProviderError:
        log.exception("provider failed with key %s", key)
    # The host's and libraries' records too (the app's hearth.log, an HTTP client quoting a URL).
    logging.getLogger("app.core.bridge").warning("action failed: %s", key)
    logging.getLogger("httpx").info("HTTP Request: GET %s", f"http://127.0.0.1/v1/models?key={key}")
    logging.getLogger("elsewhere").info("nothing secret: %s", "plain")
    records = [r for r in caplog.records if r.name != "elsewhere"]
    assert len(records) >= 3 and all(key not in caplog.handler.format(r) for r in records)
    assert all("[redacted]" in caplog.handler.format(r) for r in records[-3:])
    plain = caplog.records[-1]
    assert plain.getMessage() == "nothing secret: plain" and plain.args == ("plain",)  # left as it was


@pytest.mark.parametrize("listing", ["list_models", "all_models"])
async def test_model_list_errors_are_redacted(home, monkeypatch, listing):
    key_var, key = _canary()
    monkeypatch.setenv(key_var, key)
    async with OpenAIServer(api_key=key) as server:
        server.script(Reply(status=401, error_body={"error": {"message": f"Bad header Authorization: Bearer {key}"}}))
        (home / "settings.json").write_text(json.dumps({"providers": [
            {"id": "p", "kind": "openai", "base_url": server.base_url, "api_key_ref": f"env:{key_var}"}]}))
        rt = await Runtime.open(home)
        try:
            if listing == "list_models":
                with pytest.raises(ProviderError) as err:
                    await rt.providers.list_models("p")
                text = str(err.value)
            else:
                text = (await rt.providers.all_models())["p"]
        finally:
            await rt.aclose()
    assert "401" in text and "Bearer [redacted]" in text and key not in text
