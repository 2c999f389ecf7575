"""Message parts as stored JSON, and the one rule for settling unfinished tool parts.

A part is a dict: `{"type": "text"|"reasoning", "text", "step"}` or
`{"type": "tool_call", "call_id", "name", "args", "state", "result", "effect", "step", "note"?}`.
User messages hold `{"type": "text", "text"}` and `{"type": "attachment", "name"}` parts.
"""

from __future__ import annotations

from .events import FINAL_TOOL_STATES, ToolState

OUTCOME_UNKNOWN = "outcome unknown — verify before retrying"


def settle_parts(parts: list[dict]) -> int:
    """Mark every tool part not in a final state `interrupted`; return how many changed."""
    changed = 0
    for part in parts:
        if part.get("type") == "tool_call" and part.get("state") not in FINAL_TOOL_STATES:
            was_running = part.get("state") == ToolState.running
            part["state"] = ToolState.interrupted.value
            if was_running and part.get("effect", "read_only") != "read_only":
                part["note"] = OUTCOME_UNKNOWN
            changed += 1
    return changed


def text_of(parts: list[dict], kind: str = "text") -> str:
    return "".join(p.get("text", "") for p in parts if p.get("type") == kind)
