"""Data dir resolution and settings.json: defaults, exact shape, clear errors."""

from __future__ import annotations

import json

import pytest

from runtime.api import Runtime
from runtime.config import BUILTIN_MODEL, load_settings, resolve_home, split_model_ref
from runtime.errors import ConfigError


def test_missing_settings_give_the_bundled_model(home):
    s = load_settings(home)
    assert s.default_model == BUILTIN_MODEL == "builtin/smollm2-135m"
    assert s.provider("builtin").kind == "llama_cpp"


def test_design_example_settings_parse(home):
    example = {
        "providers": [
            {"id": "ollama", "kind": "openai", "base_url": "http://127.0.0.1:11434/v1"},
            {
                "id": "openai", "kind": "openai", "base_url": "https://api.openai.com/v1",
                "api_key_ref": "keyring:openai",
            },
            {"id": "builtin", "kind": "llama_cpp", "model_path": None},
        ],
        "default_model": "builtin/smollm2-135m",
        "mcpServers": {"time": {"command": "python", "args": ["-m", "mcp_server_time"]}},
    }
    (home / "settings.json").write_text(json.dumps(example))
    s = load_settings(home)
    assert [p.id for p in s.providers] == ["ollama", "openai", "builtin"]
    assert s.mcp_servers["time"].args == ["-m", "mcp_server_time"]
    assert s.dump()["mcpServers"]["time"]["command"] == "python"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"providers": [{"id": "x", "kind": "telepathy"}]}', "providers.0.kind"),
        ('{"providers": [{"id": "x", "kind": "openai", "api_key_ref": "sk-123"}]}', "keyring:NAME"),
    ],
)
def test_broken_settings_name_the_problem(home, content, fragment):
    (home / "settings.json").write_text(content)
    with pytest.raises(ConfigError) as err:
        load_settings(home)
    assert fragment in str(err.value) and "settings.json" in str(err.value)


async def test_runtime_open_reports_broken_settings(home):
    (home / "settings.json").write_text("{")
    with pytest.raises(ConfigError):
        await Runtime.open(home)


def test_home_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "env-home"))
    assert resolve_home(None) == tmp_path / "env-home"
    assert resolve_home(tmp_path / "explicit") == tmp_path / "explicit"
    assert (tmp_path / "explicit").is_dir()


def test_model_refs():
    assert split_model_ref("ollama/llama3.2:3b") == ("ollama", "llama3.2:3b")
    assert split_model_ref("openrouter/meta/llama") == ("openrouter", "meta/llama")
    with pytest.raises(ConfigError):
        split_model_ref("no-slash")


async def test_unknown_provider_is_a_config_error(home):
    rt = await Runtime.open(home)
    try:
        with pytest.raises(ConfigError, match="No provider 'nope'"):
            await rt.create_task(model="nope/x")
        with pytest.raises(ConfigError, match="Approval mode"):
            await rt.create_task(approval="yolo")
    finally:
        await rt.aclose()


def test_provider_sampling_fields_reach_the_provider(home):
    from runtime.keys import SecretStore
    from runtime.providers import build_provider

    (home / "settings.json").write_text(json.dumps({"providers": [
        {"id": "builtin", "kind": "llama_cpp", "temperature": 0, "max_tokens": 64, "seed": 5},
        {"id": "local", "kind": "openai", "base_url": "http://127.0.0.1:8080/v1", "temperature": 0.5},
    ]}))
    s = load_settings(home)
    builtin = build_provider(s.provider("builtin"), SecretStore(home))
    assert (builtin.temperature, builtin.max_tokens, builtin.seed) == (0, 64, 5)
    local = build_provider(s.provider("local"), SecretStore(home))
    assert (local.temperature, local.max_tokens, local.seed) == (0.5, None, None)
    (home / "settings.json").write_text(json.dumps({"providers": [{"id": "b", "kind": "llama_cpp", "max_tokens": 0}]}))
    with pytest.raises(ConfigError, match="max_tokens"):
        load_settings(home)
