"""Data dir and settings.json.

The data dir is `--home`, else `$HEARTH_HOME`, else platformdirs' user data dir. settings.json has the
shape of the design contract: providers, default model, and `mcpServers` in Claude Desktop's shape. A missing file
gives the defaults (the bundled model); a broken one a `ConfigError` naming the file and the problem.
Keys never live here: a provider names where its key is (`keyring:NAME` or `env:NAME`).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError, SettingsError
from .paths import data_folder

BUILTIN_MODEL = "builtin/smollm2-135m"
# How an MCP config names an environment variable: ${NAME} (Claude Code) or ${env:NAME} (VS Code, Cursor).
_ENV_MENTION = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")
# Variables every process needs and no config makes secret by mentioning them (`${HOME}/notes`).
PROCESS_VARS = frozenset({"PATH", "HOME", "USER", "USERNAME", "LOGNAME", "SHELL", "PWD", "TMPDIR", "TEMP", "TMP",
                          "LANG", "TERM", "USERPROFILE", "APPDATA", "LOCALAPPDATA", "SYSTEMROOT"})
# Names of an MCP server's `env` entries whose values are credentials (redacted wherever they would show).
_CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|PAT\b", re.IGNORECASE)


class ProviderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Literal["openai", "llama_cpp", "scripted"]
    base_url: str | None = None
    api_key_ref: str | None = None
    model_path: str | None = None
    n_ctx: int | None = None
    chat_format: str | None = None
    # Sampling defaults for requests that set none (None: the provider's or the server's own defaults).
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    # The context window in tokens, for every model of this provider or per model name; unset, it is asked from
    # the server where the server says (providers/context_window.py).
    context_window: int | dict[str, int] | None = None
    # A server quirk: llama.cpp's server rejects `"content": null` on an assistant message that only calls
    # tools (HTTP 500), which the OpenAI API allows; with this set such messages carry "" instead.
    empty_tool_call_content: bool = False

    @field_validator("api_key_ref")
    @classmethod
    def _key_ref(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("keyring:", "env:")):
            raise ValueError("must be 'keyring:NAME' or 'env:NAME' (keys are never stored in settings.json)")
        return v


class MCPServerConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None


class EmbeddingsConfig(BaseModel):
    """The embeddings model knowledge search uses beside BM25: a model of an OpenAI-compatible provider."""

    model_config = ConfigDict(extra="forbid")

    provider: str
    model: str


def _default_providers() -> list[ProviderConfig]:
    return [ProviderConfig(id="builtin", kind="llama_cpp")]


class Settings(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    providers: list[ProviderConfig] = Field(default_factory=_default_providers)
    default_model: str = BUILTIN_MODEL
    mcp_servers: dict[str, MCPServerConfig] = Field(default_factory=dict, alias="mcpServers")
    max_steps: int = 25
    team_max_parallel: int = Field(default=2, ge=1)  # a new team's limit of assignments running at once
    mcp_connect_timeout: float = Field(default=10.0, gt=0)
    # The sandbox of run_shell (runtime/tools/shell/sandbox.py): the bubblewrap program, and how many processes one
    # command may run at once (0: no limit).
    sandbox_bwrap: str = "bwrap"
    sandbox_max_processes: int = Field(default=256, ge=0)

    # The earlier contents kept to undo turns' workspace changes (services/changes.py): at most this many bytes;
    # over it, the oldest turns' go first.
    changes_max_bytes: int = Field(default=2_000_000_000, ge=0)

    memory: bool = True  # the person's saved memories are used and saved (Settings ▸ Memory, `hearth memory off`)
    # Providers whose person was told, once, that their context window is assumed (kit.AgentKit.context_window).
    context_window_told: list[str] = Field(default_factory=list)
    embeddings: EmbeddingsConfig | None = None  # unset: knowledge search is BM25 alone, fully offline

    def provider(self, provider_id: str) -> ProviderConfig:
        for p in self.providers:
            if p.id == provider_id:
                return p
        known = ", ".join(p.id for p in self.providers) or "none"
        raise ConfigError(f"No provider {provider_id!r} in settings.json (configured: {known}).")

    def secret_env_names(self) -> frozenset[str]:
        """The environment variables these settings point to, whatever their names: each provider's
        `api_key_ref: "env:NAME"`, and for each MCP server the names its `env` sets and the ones its config
        mentions (`${NAME}`, `${env:NAME}`), except the basic PROCESS_VARS. No tool or MCP child inherits them."""
        keys = {p.api_key_ref[4:] for p in self.providers if p.api_key_ref and p.api_key_ref.startswith("env:")}
        named: set[str] = set()
        for server in self.mcp_servers.values():
            named.update(server.env)
            for text in _strings(server.model_dump()):
                named.update(_ENV_MENTION.findall(text))
        return frozenset(keys | {n for n in named if n.upper() not in PROCESS_VARS})

    def secret_values(self, environ: dict[str, str] | None = None) -> set[str]:
        """Values that must never be shown: those of the variables above, and the credentials an MCP server's
        config holds itself (`env` entries named like a key or token, `headers`). Provider keys from the keyring
        are added by `keys.SecretStore` when it reads them."""
        env = os.environ if environ is None else environ
        values = {env[n] for n in self.secret_env_names() if env.get(n)}
        for server in self.mcp_servers.values():
            values.update(v for k, v in server.env.items() if _CREDENTIAL_NAME.search(k))
            headers = (server.model_extra or {}).get("headers")
            if isinstance(headers, dict):
                values.update(str(v).removeprefix("Bearer ").strip() for v in headers.values())
        return values

    def dump(self) -> dict:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)


def _strings(value: object) -> list[str]:
    """Every string inside a JSON-like value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def split_model_ref(ref: str) -> tuple[str, str]:
    provider_id, sep, model = ref.partition("/")
    if not sep or not provider_id or not model:
        raise ConfigError(f"Model reference {ref!r} must look like 'provider_id/model_name'.")
    return provider_id, model


def resolve_home(home: str | os.PathLike | None = None) -> Path:
    """The data folder (paths.data_folder), created if missing."""
    path = data_folder(home)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"Cannot use data folder {path}: {exc.strerror}.") from exc
    return path


def load_settings(home: Path) -> Settings:
    return read_settings(home / "settings.json")


def read_settings(path: Path) -> Settings:
    """A settings.json file (the data folder's, or a server's --settings): defaults when it is not there."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Settings()
    except OSError as exc:
        raise SettingsError(f"Cannot read {path}: {exc.strerror}.", path) from exc
    try:
        data = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.", path
        ) from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} must hold a JSON object.", path)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc']) or '(top)'}: {err['msg']}" for err in exc.errors()
        )
        raise SettingsError(f"{path} has a problem: {problems}.", path) from None


def set_aside_settings(home: Path) -> Path | None:
    """Move a broken settings.json aside as `settings.json.broken-<date>` (kept, never deleted), so Hearth
    starts with the defaults. Returns where it went, or None when there was none."""
    path = home / "settings.json"
    if not path.exists():
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"settings.json.broken-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"settings.json.broken-{stamp}-{n}")
    os.replace(path, target)
    return target


def save_settings(home: Path, settings: Settings) -> None:
    path = home / "settings.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(settings.dump(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
