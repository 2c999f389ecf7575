"""Pinned MCP tool lists: protection against a server that changes its tools after it was approved ("rug pull").

A server's tools (name, title, description, input schema) are what the model reads and trusts when it picks a
tool, so a changed description can steer it as well as a changed program. Decisions:
- Trust on first use: the first tool list a server offers after its command line was approved is pinned (the
  person approved that server; its tools cannot be listed without running it). Re-approving the same command line
  keeps the pin.
- Any later difference (a tool added, removed, renamed, or its title, description or schema changed) pauses the
  server: its tools are not offered, the turn warns, and the change waits in `mcp_consents.json` until the person
  approves it (`MCPConsents.approve_tools`), which pins the new list; until then every turn pauses it again
  without launching it (`MCPConsents.pending_change`), so the changed program never runs unreviewed.
- The difference is shown per tool: what was added or removed, and a line diff of what changed.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from typing import Any

Snapshot = dict[str, dict[str, Any]]  # tool name -> {"title", "description", "input_schema"}


def snapshot(tools: list[Any]) -> Snapshot:
    """The parts of a server's tool listing that are pinned."""
    return {
        t.name: {"title": getattr(t, "title", None), "description": t.description or "",
                 "input_schema": t.input_schema}
        for t in tools
    }


def fingerprint(tools: Snapshot) -> str:
    canonical = json.dumps(tools, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _lines(tool: dict[str, Any]) -> list[str]:
    return json.dumps(tool, indent=2, sort_keys=True, ensure_ascii=False, default=str).splitlines()


def diff(before: Snapshot, after: Snapshot) -> list[dict[str, Any]]:
    """Per tool that differs: {"tool", "change": added | removed | changed, "fields": [...], "text": a line diff}."""
    out = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None or new is None:
            change = "added" if old is None else "removed"
            fields = sorted((new or old or {}).keys())
        else:
            change = "changed"
            fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        text = "\n".join(difflib.unified_diff(_lines(old) if old else [], _lines(new) if new else [],
                                              f"{name} (approved)", f"{name} (now)", lineterm=""))
        out.append({"tool": name, "change": change, "fields": fields, "text": text})
    return out


def summary(changes: list[dict[str, Any]], limit: int = 4) -> str:
    """One line for a warning: "tool 'add': description changed; tool 'wipe' added"."""
    words = []
    for c in changes[:limit]:
        if c["change"] == "changed":
            words.append(f"tool '{c['tool']}': {', '.join(c['fields'])} changed")
        else:
            words.append(f"tool '{c['tool']}' {c['change']}")
    more = f"; and {len(changes) - limit} more" if len(changes) > limit else ""
    return "; ".join(words) + more
