"""The one event union of a turn's stream.

Every event carries `task_id`, `turn_id` and `seq` (1, 2, 3 ... per turn). Observers (panels, the CLI,
tests) only ever see these. The producer does not build a pydantic object per text delta: the StreamBuffer
stores deltas compactly and materialises `TextDelta`/`ReasoningDelta` with `model_construct` when an
observer reads, coalescing consecutive deltas of one part into one event.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter


class EndReason(StrEnum):
    completed = "completed"
    aborted = "aborted"
    interrupted = "interrupted"
    error = "error"
    waiting = "waiting"


# The words a task's or chat's state is shown with, the same in the app's sidebar and `hearth tasks`.
STATE_WORDS = {"running": "running", "waiting": "waiting for you", "interrupted": "interrupted", "error": "error",
               "idle": "idle"}


def state_key(state: str, last_reason: str | None, running: bool) -> str:
    """One key of STATE_WORDS: a running turn, a question or approval waiting, the last turn's bad ending, idle."""
    if running or state == "running":
        return "running"
    if state == "waiting":
        return "waiting"
    if last_reason in ("interrupted", "error"):
        return last_reason
    return "idle"


class TaskState(StrEnum):
    idle = "idle"
    running = "running"
    waiting = "waiting"


class Phase(StrEnum):
    agent_building = "agent_building"
    context_building = "context_building"
    mcp_connecting = "mcp_connecting"
    agent_running = "agent_running"


class ToolState(StrEnum):
    pending = "pending"
    running = "running"
    done = "done"
    error = "error"
    denied = "denied"
    interrupted = "interrupted"
    stopped = "stopped"  # it waited for the person's answer and the wait ended without one (Stop, another input)


FINAL_TOOL_STATES = frozenset({ToolState.done, ToolState.error, ToolState.denied, ToolState.interrupted,
                               ToolState.stopped})


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class _Event(BaseModel):
    task_id: str
    turn_id: str
    seq: int = 0


class TurnStarted(_Event):
    type: Literal["turn_started"] = "turn_started"
    input_message_id: int


class Status(_Event):
    type: Literal["status"] = "status"
    phase: Phase
    detail: str = ""


class TextDelta(_Event):
    type: Literal["text_delta"] = "text_delta"
    part_id: int
    text: str


class ReasoningDelta(_Event):
    type: Literal["reasoning_delta"] = "reasoning_delta"
    part_id: int
    text: str


class ToolCall(_Event):
    type: Literal["tool_call"] = "tool_call"
    part_id: int
    call_id: str
    name: str
    state: ToolState
    args: dict[str, Any] = Field(default_factory=dict)
    result: str | None = None
    effect: str = "read_only"


class ToolProgress(_Event):
    """A running tool's progress line (a delegated helper's steps), shown in its card."""

    type: Literal["tool_progress"] = "tool_progress"
    part_id: int
    call_id: str
    text: str


class InputRequested(_Event):
    type: Literal["input_requested"] = "input_requested"
    request_id: str
    kind: Literal["question", "approval", "plan"]
    prompt: str
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None


class UsageEvent(_Event):
    type: Literal["usage"] = "usage"
    usage: Usage


class WarningEvent(_Event):
    type: Literal["warning"] = "warning"
    message: str
    # "truncated" (the model's length limit), "repeating" (cut off: the model repeated itself), "compacted",
    # "mcp_paused" (tools changed), "talk_only" (the model can only talk, and the input asks for files or commands)
    code: str | None = None


class TodosChanged(_Event):
    """The task's todo list changed (todo_write, an approved plan)."""

    type: Literal["todos"] = "todos"
    todos: list[dict[str, Any]]


class TitleChanged(_Event):
    """The model titled the task or chat (runtime/engine/titles.py). Not part of a turn's stream: it comes after the
    turn `turn_id` ended, on the runtime's feed only, with seq 0."""

    type: Literal["title"] = "title"
    title: str


class TaskActivity(_Event):
    """A task's background commands or its wake-up changed (tools/shell/background.py, services/wakeups.py). Not
    part of a turn's stream: on the runtime's feed only, with seq 0 and the turn that caused it, if any. `what`:
    "background" (a command started or ended), "wake_set", "wake_cancelled", "woke" (its next turn started by
    itself; `detail` says why)."""

    type: Literal["activity"] = "activity"
    what: Literal["background", "wake_set", "wake_cancelled", "woke"]
    detail: str = ""


class Aborted(_Event):
    type: Literal["aborted"] = "aborted"


class TurnEnded(_Event):
    type: Literal["turn_ended"] = "turn_ended"
    reason: EndReason
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None


Event = Annotated[
    TurnStarted
    | Status
    | TextDelta
    | ReasoningDelta
    | ToolCall
    | ToolProgress
    | InputRequested
    | UsageEvent
    | WarningEvent
    | TodosChanged
    | TitleChanged
    | TaskActivity
    | Aborted
    | TurnEnded,
    Field(discriminator="type"),
]

event_adapter: TypeAdapter[Event] = TypeAdapter(Event)
