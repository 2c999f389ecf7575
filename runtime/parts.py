"""Message parts as stored JSON, and the one rule for settling unfinished tool parts.

Assistant messages hold `TextPart`s (`type` "text" or "reasoning"), `ToolPart`s and `MarkerPart`s: "truncated"
where a step stopped at the model's length limit, "repeating" where the loop cut off a step whose text repeated
itself, "compacted" where older history was summarized, and after all other parts a "warning" for each warning
the turn gave (an MCP server not available or paused, a step limit).
User messages hold `{"type": "text", "text"}`, `{"type": "attachment", "name"}` and, for answers to questions and
approvals, `{"type": "answer", ...}`.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from .events import FINAL_TOOL_STATES, ToolCall, ToolState, Usage
from .workspace import intent_applied

OUTCOME_UNKNOWN = "outcome unknown — verify before retrying"
NEVER_RAN = "interrupted before it ran"
READ_ONLY_INTERRUPTED = "interrupted while running; it changes nothing"
# A file tool's write, checked against the file when it was interrupted (workspace.intent_applied).
WRITE_APPLIED = "interrupted, but its write was applied: the file holds the content it meant to write"
WRITE_NOT_APPLIED = "interrupted before its write was applied: the file does not hold that content"


class TextPart(TypedDict):
    type: Literal["text", "reasoning"]
    text: str
    step: int


def hearth_call_id(turn_id: str, part_id: int) -> str:
    """A tool call's identity: the turn that made it and its part's position there. Servers' own ids repeat
    (some give every call `call_0`), so cards, results, approvals and the model input go by this one."""
    return f"call_{turn_id[:16]}_{part_id}"


class ToolPart(TypedDict):
    type: Literal["tool_call"]
    part_id: int
    call_id: str  # hearth_call_id of the turn that made the call (an answer's turn completes it under the same id)
    name: str
    args: dict[str, Any]
    state: str  # a ToolState value
    result: str | None
    step: int
    effect: NotRequired[str]  # an Effect value; "read_only" when absent
    note: NotRequired[str]  # why an interrupted call ended as it did
    awaiting: NotRequired[bool]  # the call waits for the person's answer (its turn ended `waiting`)
    mcp_server: NotRequired[str]  # an MCP tool's server: its result is framed as an outside program's data
    progress: NotRequired[list[str]]  # a delegated helper's steps, as they were shown live
    intent: NotRequired[dict[str, str]]  # a file tool's write about to happen (workspace.write_intent)


class MarkerPart(TypedDict):
    type: Literal["marker"]
    marker: Literal["truncated", "repeating", "compacted", "warning"]
    step: int
    message: NotRequired[str]  # a warning's sentence, as the turn told it live
    code: NotRequired[str | None]  # a warning's kind, e.g. "mcp_paused"


class FinalRecord(TypedDict):
    """What finalize writes for one turn."""

    task_id: str
    turn_id: str
    output_message_id: int
    parts: list[dict[str, Any]]
    reason: str
    error: str | None
    usage: Usage
    state: str
    pending_request: dict[str, Any] | None
    anchor_tokens: int
    anchor_chars: int
    steps: list[dict[str, Any]]
    subagents: list[dict[str, Any]]


def settle_parts(parts: list[dict]) -> int:
    """Mark every tool part not in a final state `interrupted` with a note saying what that means;
    return how many changed. A side-effecting call that was running has an unknown outcome, unless it is a file
    tool's write whose intent was recorded: then the file on disk says whether it was applied."""
    changed = 0
    for part in parts:
        if part.get("type") == "tool_call" and part.get("state") not in FINAL_TOOL_STATES:
            if part.get("state") != ToolState.running:
                part["note"] = NEVER_RAN
            elif part.get("effect", "read_only") == "read_only":
                part["note"] = READ_ONLY_INTERRUPTED
            elif "intent" in part and (applied := intent_applied(part["intent"])) is not None:
                part["note"] = WRITE_APPLIED if applied else WRITE_NOT_APPLIED
            else:
                part["note"] = OUTCOME_UNKNOWN
            part["state"] = ToolState.interrupted.value
            part.pop("awaiting", None)
            changed += 1
    return changed


def tool_event(task_id: str, turn_id: str, part: ToolPart | dict[str, Any]) -> ToolCall:
    """The `tool_call` event that tells observers a tool part's state."""
    return ToolCall(task_id=task_id, turn_id=turn_id, part_id=part["part_id"], call_id=part["call_id"],
                    name=part["name"], state=ToolState(part["state"]), args=part.get("args") or {},
                    result=part.get("result"), effect=part.get("effect", "read_only"))


def stop_waiting(parts: list[dict]) -> list[dict]:
    """The wait for the person's answer ended without one (Stop, or another input): the calls of a turn that
    ended `waiting` (saved `pending`: finalize settles every other unfinished call) become `stopped`. Returns
    them."""
    stopped = []
    for part in parts:
        if part.get("type") == "tool_call" and part.get("state") == ToolState.pending:
            part.pop("awaiting", None)
            part["state"] = ToolState.stopped.value
            stopped.append(part)
    return stopped


def text_of(parts: list[dict], kind: str = "text") -> str:
    return "".join(p.get("text", "") for p in parts if p.get("type") == kind)


def is_truncated(parts: list[dict]) -> bool:
    return has_marker(parts, "truncated")


def has_marker(parts: list[dict], marker: str) -> bool:
    return any(p.get("type") == "marker" and p.get("marker") == marker for p in parts)
