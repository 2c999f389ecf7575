"""What one run builds: `TurnContext` (parts, chat, steps, usage) and its `Checkpointer`.

Nothing here may stay reachable after the run's cleanup (a test collects the context and checks). Per-chunk
work on the context is an append and a flag; JSON snapshots are only made by the checkpointer and finalize.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ...events import TodosChanged, ToolState, Usage, UsageEvent, WarningEvent
from ...parts import MarkerPart, TextPart, ToolPart, hearth_call_id, tool_event
from ...redact import redact
from ...tools.approvals import decide
from ...tools.base import tool_spec
from ...tools.builtin import DEFAULT_WRAP_CAP
from ...tools.discovery import offered
from ...tools.planning import reminder
from .context import WireIds, message_chars
from .repetition import TAIL_CHARS, repeating

if TYPE_CHECKING:
    from ...events import Event
    from ...providers.base import Provider
    from ...tools.approvals import Rule
    from ...tools.base import Tool
    from ..abort import TurnSlot
    from ..ports import ChangeRecorder, TurnMCP, TurnStorage, TurnStream

log = logging.getLogger(__name__)

# Text is persisted at most this often: with the commit (slow on a busy disk) a crash loses < 0.5 s of stream.
CHECKPOINT_SECONDS = 0.25
_FOLD_EVERY = 64


class TextAccumulator:
    """A text part growing by deltas; joins every 64 deltas (and at each checkpoint) so no object per chunk is
    kept, and checks at each join whether the model repeats itself (engine/agent/repetition.py): `add` then says so."""

    __slots__ = ("blocks", "looping", "part_id", "pending", "tail")

    def __init__(self, part_id: int):
        self.part_id = part_id
        self.blocks: list[str] = []
        self.pending: list[str] = []
        self.tail = ""  # the part's last TAIL_CHARS characters as of the last join
        self.looping = False

    def add(self, text: str) -> bool:
        """Append a delta; True once the part's text repeats itself."""
        self.pending.append(text)
        if len(self.pending) >= _FOLD_EVERY:
            self._fold()
        return self.looping

    def _fold(self) -> None:
        block = "".join(self.pending)
        self.blocks.append(block)
        self.pending.clear()
        self.tail = (self.tail + block)[-TAIL_CHARS:]
        self.looping = self.looping or repeating(self.tail)

    def text(self) -> str:
        if self.pending:
            self._fold()
        if len(self.blocks) > 1:
            self.blocks[:] = ["".join(self.blocks)]
        return self.blocks[0] if self.blocks else ""


# Warnings whose marker part the loop and the compactor add themselves.
MARKED = ("truncated", "compacted", "repeating")


class Fitter(Protocol):
    """What the loop asks of the turn's compactor (agent.compaction.Compactor, which imports this module)."""

    async def fit(self, ctx: TurnContext, ratio: float) -> None: ...


class TurnContext:
    """Everything one run builds. Unreachable once the run is cleaned up."""

    def __init__(self, slot: TurnSlot, task: dict[str, Any], buffer: TurnStream, input_parts: list[dict[str, Any]],
                 max_steps: int):
        self.slot = slot
        self.task_id: str = task["id"]
        self.turn_id: str = slot.turn_id
        self.input_message_id: int = slot.input_message_id
        self.output_message_id: int = slot.output_message_id
        self.buffer = buffer
        self.task = task
        self.input_parts = input_parts
        self.approval: str = task["approval"]
        self.rules: list[Rule] = []  # the task's and the global permission rules, loaded in setup
        self.workspace = Path(task["workspace"])
        self.max_steps = max_steps
        self.parts: list[TextPart | ToolPart | MarkerPart] = []
        self.warnings: list[dict[str, Any]] = []  # saved after the parts, so the answer shows them later too
        self._texts: dict[int, TextAccumulator] = {}
        self._step_calls: dict[tuple[int, int], ToolPart] = {}  # (step, the call's position in it) -> its part
        self._calls: dict[str, ToolPart] = {}  # call id -> its part
        self.wire_ids = WireIds()  # the ids this turn's calls go by in its model input
        self.step = 0
        self.steps: list[dict] = []
        self.usage = Usage()
        self.chat: list[dict] = []
        self.chat_chars = 0  # size of `chat` in JSON characters, kept up to date by append_chat
        self.ratio = 4.0  # characters per token of this task's requests (from the usage anchor)
        self.compactor: Fitter | None = None  # keeps the input inside the context window
        self.tool_cap = DEFAULT_WRAP_CAP  # characters one tool output may take in the input (from the window)
        self.todos: list[dict] | None = task.get("todos")
        self.notes: list[str] = []  # sent with every step of this turn: planning mode, skills, an activated skill
        self.save_todos: Callable[[str, list[dict[str, Any]]], Awaitable[None]] | None = None  # the storage port's
        self.subagents: list[dict] = []  # records of the helpers delegate ran, written by finalize
        self.providers: Callable[[str], Provider] | None = None  # the agent port's, for a helper on another model
        self.anchor_tokens = 0  # real input tokens of the last request ...
        self.anchor_chars = 0  # ... and that same request's size in characters
        self.pending_request: dict | None = None
        self.waits = False  # the model ended its turn with `wait` (tools/waiting.py): no further step
        self.truncated = False
        self.error: BaseException | None = None
        self.dirty = False
        self.checkpoints: Checkpointer | None = None
        self.provider: Provider | None = None  # set in setup, before the first request
        self.model_name = ""
        self.tools: dict[str, Tool] = {}
        self.tool_specs: list[dict[str, Any]] = []
        self.mcp: TurnMCP | None = None  # closed in cleanup
        self.changes: ChangeRecorder | None = None  # a task's turn: its workspace changes, recorded before it ends

    def append_chat(self, message: dict) -> None:
        self.chat.append(message)
        self.chat_chars += message_chars(message)

    def step_notes(self) -> str:
        """What this step's system message adds to the chat's (agent.loop.with_notes): planning mode, skills, the
        open todo items. Built per step, never stored: the todo list may change between steps."""
        notes = [*self.notes, *filter(None, [reminder(self.todos)])]
        return "\n\n" + "\n\n".join(notes) if notes else ""

    def extra_chars(self) -> int:
        """What every request carries beside the chat, in the chat's measure (JSON characters): the offered
        tools' schemas (~1,500 tokens for 10 tools) and this step's notes. The window check and the usage
        anchor both count it, so the characters-per-token ratio is measured on the same thing it predicts."""
        notes = self.step_notes()
        # Appending to a string adds the JSON encoding of the appended text, less its two quotes.
        return (len(json.dumps(self.tool_specs)) if self.tool_specs else 0) + \
            (len(json.dumps(notes)) - 2 if notes else 0)

    def request_chars(self) -> int:
        """The size of the next request as sent: the chat, the tool schemas and this step's notes."""
        return self.chat_chars + self.extra_chars()

    def resolve_model(self, ref: str) -> tuple[Provider, str]:
        """(provider, model name) for a `provider_id/model` reference."""
        assert self.providers is not None, "set in setup, before any tool runs"
        provider_id, _, model = ref.partition("/")
        return self.providers(provider_id), model

    def add_child_usage(self, usage: Usage) -> None:
        """A helper's tokens count toward the turn's."""
        self.usage = self.usage + usage
        self.publish(UsageEvent(task_id=self.task_id, turn_id=self.turn_id, usage=self.usage))

    def verdict(self, tool: Tool, args: dict[str, Any]) -> str:
        """allow, ask or deny for this call, from the task's mode and rules (and for a command, its sandbox)."""
        rule_arg = getattr(tool, "rule_arg", None)
        command = args.get(rule_arg) if rule_arg else None
        # A tool whose calls differ in effect (memory: view reads, the rest writes) says so per call.
        effect = tool.effect_for(args) if hasattr(tool, "effect_for") else tool.effect
        return decide(tool.name, effect, self.approval, self.rules,
                      command=command if isinstance(command, str) else None,
                      sandboxed=getattr(tool, "sandboxed", None), unsandboxed_ok=bool(self.task.get("unsandboxed_ok")))

    def offer_tools(self, builtin: set[str]) -> None:
        """The tools the first step is offered: all of them, or past the limit the built-ins and find_tools."""
        names, finder = offered(self.tools, builtin)
        if finder is not None:
            self.tools[finder.name] = finder
            names.append(finder.name)
        self.tool_specs = [tool_spec(self.tools[n]) for n in names]

    def offer_more(self, names: list[str]) -> None:
        """Tools find_tools found: offered from the next step on."""
        known = {s["function"]["name"] for s in self.tool_specs}
        self.tool_specs = self.tool_specs + [tool_spec(self.tools[n]) for n in names
                                             if n in self.tools and n not in known]

    async def set_todos(self, todos: list[dict]) -> None:
        """The task's todo list changed: saved at once, and observers told."""
        self.todos = todos
        if self.save_todos is not None:
            await self.save_todos(self.task_id, todos)
        self.publish(TodosChanged(task_id=self.task_id, turn_id=self.turn_id, todos=todos))

    def check_abort(self) -> None:
        """Stop is enforced between steps: raise when the turn was stopped, whatever a tool did with it."""
        if self.slot.aborted:
            raise asyncio.CancelledError

    # -- events --

    def publish(self, event: Event) -> None:
        self.buffer.publish(event)

    def warn(self, message: str, code: str | None = None) -> None:
        message = redact(message)
        self.buffer.publish(WarningEvent(task_id=self.task_id, turn_id=self.turn_id, message=message, code=code))
        if code not in MARKED:  # those have their own marker part, in place
            self.warnings.append({"type": "marker", "marker": "warning", "message": message, "code": code,
                                  "step": self.step})
            self.dirty = True

    def publish_tool(self, part: ToolPart) -> None:
        self.buffer.publish(tool_event(self.task_id, self.turn_id, part))

    # -- parts --

    def new_text_part(self, kind: Literal["text", "reasoning"]) -> TextAccumulator:
        part_id = len(self.parts)
        self.parts.append({"type": kind, "text": "", "step": self.step})
        acc = self._texts[part_id] = TextAccumulator(part_id)
        return acc

    def new_tool_part(self, name: str, index: int | None = None, call_id: str | None = None) -> ToolPart:
        """The part of a tool call: the step's call at `index`, under Hearth's own id (parts.hearth_call_id), or
        under `call_id`, the id of an earlier turn's call that this turn completes (an answer)."""
        part_id = len(self.parts)
        call_id = call_id or hearth_call_id(self.turn_id, part_id)
        part: ToolPart = {
            "type": "tool_call", "part_id": part_id, "call_id": call_id, "name": name, "args": {},
            "state": ToolState.pending.value, "result": None, "step": self.step,
        }
        tool = self.tools.get(name)
        if tool is not None:
            part["effect"] = str(tool.effect)
        self.parts.append(part)
        if index is not None:
            self._step_calls[(self.step, index)] = part
        self._calls[call_id] = part
        self.publish_tool(part)
        self.tool_state_changed()
        return part

    def step_call(self, index: int, name: str) -> ToolPart:
        """The part of this step's call at position `index` (made when the call began, or now). A call is known
        by its place, never by the server's id for it: servers repeat those."""
        part = self._step_calls.get((self.step, index))
        return part if part is not None else self.new_tool_part(name, index)

    def call_part(self, call_id: str) -> ToolPart:
        """The part of this turn's call `call_id` (a tool's `ToolContext.call_id`)."""
        return self._calls[call_id]

    def tool_state_changed(self) -> None:
        """Tool states are checkpointed at once, not on the text timer."""
        self.dirty = True
        if self.checkpoints is not None:
            self.checkpoints.soon()

    def step_text(self, step: int) -> str:
        return "".join(
            self._texts[i].text() for i, p in enumerate(self.parts) if p["type"] == "text" and p["step"] == step
        )

    def snapshot(self) -> list[dict[str, Any]]:
        """The parts as JSON-ready dicts, texts joined, then the turn's warnings (a part's index stays its id)."""
        out = []
        for i, part in enumerate(self.parts):
            acc = self._texts.get(i)
            out.append(dict(part, text=acc.text()) if acc is not None else dict(part))
        return out + [dict(w) for w in self.warnings]

    def add_usage(self, record: dict, usage: Usage, request_chars: int) -> None:
        record["input_tokens"] = usage.input_tokens
        record["output_tokens"] = usage.output_tokens
        if usage.input_tokens:
            self.anchor_tokens, self.anchor_chars = usage.input_tokens, request_chars
        self.usage = self.usage + usage
        self.publish(UsageEvent(task_id=self.task_id, turn_id=self.turn_id, usage=self.usage))


class Checkpointer:
    """Persists the context's parts: text at most every CHECKPOINT_SECONDS, tool states at once (`soon()`),
    and synchronously before a side-effecting tool starts (`now()`). Writes never overlap, so a late one
    cannot overwrite a newer one."""

    def __init__(self, storage: TurnStorage, ctx: TurnContext):
        self._storage = storage
        self._ctx = ctx
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._stopped = False
        self._failures = 0
        self._task = asyncio.ensure_future(self._loop())

    def soon(self) -> None:
        self._wake.set()

    async def now(self) -> None:
        """Write the current parts and return once they are committed."""
        async with self._lock:
            self._ctx.dirty = False
            await self._storage.checkpoint(self._ctx.output_message_id, self._ctx.snapshot())

    async def _loop(self) -> None:
        while not self._stopped:
            try:
                await asyncio.wait_for(self._wake.wait(), CHECKPOINT_SECONDS)
            except TimeoutError:
                pass
            self._wake.clear()
            if self._stopped or not self._ctx.dirty:
                continue
            try:
                await self.now()
            except Exception:
                # Said once per turn: a full disk would otherwise repeat it every CHECKPOINT_SECONDS.
                self._failures += 1
                if self._failures == 1:
                    log.exception("checkpoint of turn %s failed; retrying quietly", self._ctx.turn_id)

    async def close(self) -> None:
        """Stop, letting a write in flight finish: one landing after finalize would overwrite it."""
        self._stopped = True
        self._wake.set()
        await asyncio.gather(self._task, return_exceptions=True)
        async with self._lock:
            pass
