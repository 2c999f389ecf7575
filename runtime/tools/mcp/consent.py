"""Consent to launch (or connect to) an MCP server (runtime/ARCHITECTURE.md).

An MCP server is only started after the person saw its full command line and agreed once. Decisions:

- Consents live in `<home>/mcp_consents.json`, keyed by server name. Each entry keeps a sha256 of the canonical
  JSON of the whole server config (command, args, env, url and any extra keys such as `cwd` or `headers`) and
  the line that was shown, with secret-looking values hidden. The raw config is never copied: env values and
  headers may hold tokens, and the hash is enough to tell whether anything changed.
- Any change (another argument, another env value, a rotated token, a new url) gives another hash, so the
  person is asked again. Renaming a server asks again too.
- The command is compared as written, not resolved through PATH: the person approves what they read.
- HTTP servers need consent as well, by the same mechanism. No process is launched, but the model's arguments
  (possibly workspace content) go to that server and its replies go into the model's context, which is the same
  trust decision as running a local program.
- `command_line()` is what the person is shown: `KEY=value … command arg …` shell-quoted, or `connect to URL`.
  Values of env keys and headers that look like secrets (TOKEN, KEY, SECRET, PASSWORD, AUTH, …) are shown as
  `<hidden>`; other env values are shown in full because they can change what runs (`NODE_OPTIONS`,
  `LD_PRELOAD`, `PYTHONPATH`).
- An unreadable or malformed consents file counts as "nothing approved" (logged); the next approval rewrites
  it. Writes are atomic (temporary file + rename) and the file is private (0600).
- Each entry also pins the server's tool list (tools/mcp/pins.py): `tools` (the approved list) and, while a
  change waits for the person, `changed` (the list the server offers now, and when it was first seen). While
  `changed` waits the server is paused before launch (`pending_change`), not only after listing its tools.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from runtime.config import MCPServerConfig
from runtime.tools.mcp.pins import Snapshot, diff, fingerprint, summary
from runtime.tools.shell.run_shell import SECRET_MARKERS

log = logging.getLogger(__name__)

CONSENTS_FILE = "mcp_consents.json"
HIDDEN = "<hidden>"
_SECRET_MARKERS = (*SECRET_MARKERS, "AUTH", "COOKIE", "SESSION", "PRIVATE")


def _secret(key: str) -> bool:
    return any(m in key.upper() for m in _SECRET_MARKERS)


def _strip_userinfo(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=f"{HIDDEN}@{parts.netloc.rpartition('@')[2]}"))


def config_fingerprint(cfg: MCPServerConfig) -> str:
    """sha256 of the canonical JSON of everything that decides what runs or where data goes."""
    data: dict[str, Any] = dict(cfg.model_extra or {})
    data.update(command=cfg.command, args=list(cfg.args), env=dict(cfg.env), url=cfg.url)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def command_line(cfg: MCPServerConfig) -> str:
    """The line shown to the person before they approve a server."""
    extra = dict(cfg.model_extra or {})
    if cfg.command:
        env = " ".join(
            f"{k}={HIDDEN if _secret(k) else shlex.quote(v)}" for k, v in sorted(cfg.env.items())
        )
        line = shlex.join([cfg.command, *cfg.args])
        line = f"{env} {line}" if env else line
        if extra.get("cwd"):
            line += f"   (in {extra['cwd']})"
        return line
    if cfg.url:
        line = f"connect to {_strip_userinfo(cfg.url)}"
        headers = extra.get("headers")
        if isinstance(headers, dict) and headers:
            shown = ", ".join(f"{k}: {HIDDEN if _secret(k) else v}" for k, v in sorted(headers.items()))
            line += f" with headers {shown}"
        return line
    return "(no command and no url)"


def _paused(name: str, approved: Snapshot, now: Snapshot) -> str:
    return (f"MCP server '{name}' is paused: its tools changed since you approved them "
            f"({summary(diff(approved, now))}). Its tools are not offered until you review "
            f"the change and approve it in Settings → Permissions (or `hearth mcp approve {name}`).")


class MCPConsents:
    """The person's approvals of MCP server command lines, stored in `<home>/mcp_consents.json`."""

    def __init__(self, home: Path):
        self.path = Path(home) / CONSENTS_FILE

    @staticmethod
    def command_line(cfg: MCPServerConfig) -> str:
        return command_line(cfg)

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s", self.path, exc)
            return {}
        servers = data.get("servers") if isinstance(data, dict) else None
        if not isinstance(servers, dict):
            log.warning("ignoring malformed %s", self.path)
            return {}
        return {k: v for k, v in servers.items() if isinstance(v, dict)}

    def _save(self, servers: dict[str, dict[str, Any]]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "servers": servers}, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, self.path)

    def is_approved(self, name: str, cfg: MCPServerConfig) -> bool:
        entry = self._load().get(name)
        return entry is not None and entry.get("sha256") == config_fingerprint(cfg)

    def approve(self, name: str, cfg: MCPServerConfig) -> None:
        servers = self._load()
        old = servers.get(name) or {}
        entry = {"sha256": config_fingerprint(cfg), "command_line": command_line(cfg), "approved_at": time.time()}
        if old.get("sha256") == entry["sha256"]:  # the same command line again: its pinned tools stay pinned
            entry.update({k: old[k] for k in ("tools", "tools_sha256", "changed") if k in old})
        servers[name] = entry
        self._save(servers)

    def check_tools(self, name: str, tools: Snapshot) -> str | None:
        """Pin a server's first tool list; None while it offers the pinned one, else the warning that pauses it
        (the new list is kept for the person to review)."""
        servers = self._load()
        entry = servers.get(name)
        if entry is None:
            return None  # not approved: it is never launched, so there is nothing to check
        now = fingerprint(tools)
        if "tools_sha256" not in entry or entry["tools_sha256"] == now:
            if entry.get("tools_sha256") != now or "changed" in entry:
                entry.update(tools=tools, tools_sha256=now)
                entry.pop("changed", None)
                self._save(servers)
            return None
        seen = entry.get("changed") or {}
        if seen.get("tools_sha256") != now:
            entry["changed"] = {"tools": tools, "tools_sha256": now, "seen_at": time.time()}
            self._save(servers)
        return _paused(name, entry.get("tools") or {}, tools)

    def pending_change(self, name: str) -> str | None:
        """The warning that pauses `name` while a change of its tools waits for the person, else None. Such a
        server is not launched at all: the changed program is the one that would run."""
        entry = self._load().get(name) or {}
        changed = entry.get("changed")
        if not isinstance(changed, dict) or not isinstance(changed.get("tools"), dict):
            return None
        return _paused(name, entry.get("tools") or {}, changed["tools"])

    def tool_changes(self) -> dict[str, dict[str, Any]]:
        """Servers paused for changed tools: name -> {"changes": mcp_pins.diff(...), "seen_at"}."""
        return {
            name: {"changes": diff(entry.get("tools") or {}, entry["changed"]["tools"]),
                   "seen_at": entry["changed"].get("seen_at")}
            for name, entry in self._load().items()
            if isinstance(entry.get("changed"), dict) and isinstance(entry["changed"].get("tools"), dict)
        }

    def pinned_tools(self, name: str) -> Snapshot:
        return dict(self._load().get(name, {}).get("tools") or {})

    def approve_tools(self, name: str) -> bool:
        """Pin the changed tool list of `name`, which un-pauses it; False when no change waits."""
        servers = self._load()
        entry = servers.get(name) or {}
        changed = entry.pop("changed", None)
        if not isinstance(changed, dict) or not isinstance(changed.get("tools"), dict):
            return False
        entry.update(tools=changed["tools"], tools_sha256=fingerprint(changed["tools"]))
        self._save(servers)
        return True

    def revoke(self, name: str) -> bool:
        """Forget the approval of `name`; False if there was none."""
        servers = self._load()
        if servers.pop(name, None) is None:
            return False
        self._save(servers)
        return True

    def approved(self) -> dict[str, str]:
        """Server name → the command line that was approved (as it was shown)."""
        return {k: str(v.get("command_line", "")) for k, v in self._load().items()}
