"""Task-bound approval policy.

`ask` (default): every call that is not read-only waits for the person. `auto_edit`: workspace writes run,
shell and external calls ask. `full_auto`: everything runs. Per-tool rules (`always` / `never`), stored
with the task when the person answers with "remember", override the mode.
"""

from __future__ import annotations

from typing import Literal

from .base import Effect

APPROVAL_MODES = ("ask", "auto_edit", "full_auto")

Decision = Literal["allow", "ask", "deny"]


def decide(tool_name: str, effect: Effect | str, mode: str, rules: dict[str, str]) -> Decision:
    rule = rules.get(tool_name)
    if rule == "always":
        return "allow"
    if rule == "never":
        return "deny"
    if effect == Effect.read_only or mode == "full_auto":
        return "allow"
    if mode == "auto_edit" and effect == Effect.workspace_write:
        return "allow"
    return "ask"
