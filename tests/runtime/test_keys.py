"""API keys: env and keyring refs, the 0600 fallback file, and clear errors when a key is missing."""

from __future__ import annotations

import stat

import pytest

from runtime.errors import ConfigError
from runtime.keys import SecretStore


def test_env_ref(home, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-env")
    assert SecretStore(home).resolve("env:MY_KEY") == "sk-env"
    assert SecretStore(home).resolve(None) is None


def test_missing_keys_say_where_they_were_looked_for(home, monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with pytest.raises(ConfigError, match="environment variable NOPE_KEY"):
        SecretStore(home).resolve("env:NOPE_KEY")


def test_fallback_file_is_private_and_round_trips(home):
    keys = SecretStore(home)
    keys._uses_keyring = False  # as on a headless machine without a keyring backend
    keys.set("openai", "sk-secret")
    path = home / "secrets.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert keys.resolve("keyring:openai") == "sk-secret"
    assert not (home / "settings.json").exists()
