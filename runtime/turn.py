"""The shared turn: setup, agent loop, finalize, cleanup (DESIGN §4–5).

`send()` (in api.py) has already persisted the input, created the turn row and reset the StreamBuffer;
`run_turn` is the asyncio task that does the rest:

1. eager part: take the task's lock, register the abort controller, honour a Stop that came earlier,
   bind the task's immutable settings and load its messages;
2. setup, each phase a `status` event: agent_building (provider, tools) → context_building (model input
   rebuilt from saved messages, compacted) → mcp_connecting → agent_running;
3. the agent loop (agent/loop.py) in a separate *work* task, which is what Stop and shutdown cancel;
   a checkpointer persists partial parts at most every 500 ms meanwhile;
4. finalize (finalize.py), exactly once, whatever happened;
5. cleanup: unregister, close the turn's resources, release the lock, start a queued input.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .abort import AbortController
from .agent.context import build_chat, chars_per_token, compact, estimate_tokens
from .agent.loop import run_agent
from .agent.prompt import SYSTEM_PROMPT
from .config import split_model_ref
from .events import EndReason, Phase, Status, ToolCall, ToolState, TurnStarted, Usage, UsageEvent, WarningEvent
from .finalize import finalize
from .tools.base import tool_spec

if TYPE_CHECKING:
    from .api import Runtime, _Slot
    from .stream_buffer import StreamBuffer

log = logging.getLogger(__name__)

CHECKPOINT_SECONDS = 0.5
DEFAULT_CONTEXT_TOKENS = 16_000
_FOLD_EVERY = 256


class TextAccumulator:
    """A text part growing by deltas; joins every 256 deltas so no object per chunk is kept."""

    __slots__ = ("blocks", "part_id", "pending")

    def __init__(self, part_id: int):
        self.part_id = part_id
        self.blocks: list[str] = []
        self.pending: list[str] = []

    def add(self, text: str) -> None:
        self.pending.append(text)
        if len(self.pending) >= _FOLD_EVERY:
            self.blocks.append("".join(self.pending))
            self.pending.clear()

    def text(self) -> str:
        if self.pending:
            self.blocks.append("".join(self.pending))
            self.pending.clear()
        if len(self.blocks) > 1:
            self.blocks[:] = ["".join(self.blocks)]
        return self.blocks[0] if self.blocks else ""


class TurnContext:
    """Everything one run builds. Unreachable once the run is cleaned up (a test holds a weakref)."""

    def __init__(self, rt: Runtime, slot: _Slot, task: dict, buffer: StreamBuffer, input_parts: list[dict]):
        self.slot = slot
        self.task_id: str = task["id"]
        self.turn_id: str = slot.turn_id
        self.input_message_id: int = slot.input_message_id
        self.output_message_id: int = slot.output_message_id
        self.buffer = buffer
        self.controller = AbortController()
        self.task = task
        self.input_parts = input_parts
        self.approval: str = task["approval"]
        self.tool_rules: dict[str, str] = dict(task.get("tool_rules") or {})
        self.workspace = Path(task["workspace"])
        self.max_steps: int = rt.settings.max_steps
        self.parts: list[dict[str, Any]] = []
        self._texts: dict[int, TextAccumulator] = {}
        self._tool_index: dict[str, int] = {}
        self.step = 0
        self.steps: list[dict] = []
        self.step_tokens = array("q")  # input tokens per step, for the usage anchor
        self.usage = Usage()
        self.chat: list[dict] = []
        self.chat_chars = 0
        self.pending_request: dict | None = None
        self.error: BaseException | None = None
        self.dirty = False
        self.provider = None
        self.model_name = ""
        self.tools: dict[str, Any] = {}
        self.tool_specs: list[dict] = []
        self.mcp = None  # this turn's MCPTurnSessions, closed in cleanup

    # -- events --

    def publish(self, event) -> None:
        self.buffer.publish(event)

    def warn(self, message: str) -> None:
        self.buffer.publish(WarningEvent(task_id=self.task_id, turn_id=self.turn_id, message=message))

    def publish_tool(self, part: dict) -> None:
        self.buffer.publish(
            ToolCall(
                task_id=self.task_id, turn_id=self.turn_id, part_id=part["part_id"], call_id=part["call_id"],
                name=part["name"], state=ToolState(part["state"]), args=part.get("args") or {},
                result=part.get("result"), effect=part.get("effect", "read_only"),
            )
        )

    # -- parts --

    def new_text_part(self, kind: str) -> TextAccumulator:
        part_id = len(self.parts)
        self.parts.append({"type": kind, "text": "", "step": self.step})
        acc = self._texts[part_id] = TextAccumulator(part_id)
        return acc

    def new_tool_part(self, call_id: str, name: str) -> dict:
        part_id = len(self.parts)
        part = {
            "type": "tool_call", "part_id": part_id, "call_id": call_id, "name": name, "args": {},
            "state": ToolState.pending.value, "result": None, "step": self.step,
        }
        tool = self.tools.get(name)
        if tool is not None:
            part["effect"] = str(tool.effect)
        self.parts.append(part)
        self._tool_index[call_id] = part_id
        self.publish_tool(part)
        return part

    def tool_part(self, call_id: str, name: str) -> dict:
        idx = self._tool_index.get(call_id)
        return self.parts[idx] if idx is not None else self.new_tool_part(call_id, name)

    def step_text(self, step: int) -> str:
        return "".join(
            self._texts[i].text() for i, p in enumerate(self.parts) if p["type"] == "text" and p["step"] == step
        )

    def snapshot(self) -> list[dict]:
        """The parts as JSON-ready dicts, texts joined."""
        out = []
        for i, part in enumerate(self.parts):
            acc = self._texts.get(i)
            out.append(dict(part, text=acc.text()) if acc is not None else dict(part))
        return out

    def add_usage(self, record: dict, usage: Usage) -> None:
        record["input_tokens"] = usage.input_tokens
        record["output_tokens"] = usage.output_tokens
        self.step_tokens.append(usage.input_tokens)
        self.usage = self.usage + usage
        self.publish(UsageEvent(task_id=self.task_id, turn_id=self.turn_id, usage=self.usage))


async def run_turn(rt: Runtime, slot: _Slot, task: dict, input_parts: list[dict]) -> None:
    buffer = rt.buffers.get(task["id"])
    lock = rt.locks[task["id"]]
    async with lock:
        ctx = TurnContext(rt, slot, task, buffer, input_parts)
        slot.controller = ctx.controller
        if slot.abort_reason is not None:  # a Stop or a shutdown that came before registration
            ctx.controller.abort(slot.abort_reason)
        rt.contexts[ctx.turn_id] = ctx
        ctx.publish(TurnStarted(task_id=ctx.task_id, turn_id=ctx.turn_id, input_message_id=ctx.input_message_id))
        try:
            work = asyncio.ensure_future(_work(rt, ctx))
            ctx.controller.bind(work)
            stop_checkpoints = asyncio.Event()
            checkpointer = asyncio.ensure_future(_checkpoint_loop(rt, ctx, stop_checkpoints))
            try:
                await work
            except asyncio.CancelledError:
                if ctx.controller.reason is None:  # cancelled by something other than Stop/shutdown
                    ctx.controller.reason = EndReason.interrupted
            except Exception as exc:
                ctx.error = exc
            finally:
                # Let a checkpoint in flight finish: one landing after finalize would overwrite it.
                stop_checkpoints.set()
                await asyncio.gather(checkpointer, return_exceptions=True)
            del work, checkpointer
            await finalize(rt, ctx)
        finally:
            # Cleanup, unconditionally: unregister, then release what the turn held, then the lock.
            slot.controller = None
            rt.contexts.pop(ctx.turn_id, None)
            rt.release_slot(slot)
            if ctx.mcp is not None:
                try:
                    await ctx.mcp.aclose()
                except Exception:
                    log.exception("closing the MCP sessions of turn %s failed", ctx.turn_id)
            del ctx
    rt.after_turn(task["id"])


async def _work(rt: Runtime, ctx: TurnContext) -> None:
    ctx.publish(Status(task_id=ctx.task_id, turn_id=ctx.turn_id, phase=Phase.agent_building))
    # MCP servers connect concurrently with the rest of setup; they are only awaited in mcp_connecting.
    ctx.mcp = rt.mcp_sessions(ctx.workspace)
    if ctx.mcp is not None:
        ctx.mcp.start()
    provider_id, ctx.model_name = split_model_ref(ctx.task["model"])
    ctx.provider = rt.provider(provider_id)
    ctx.tools = rt.tools_for(ctx.task)
    ctx.tool_specs = [tool_spec(t) for t in ctx.tools.values()]

    ctx.publish(Status(task_id=ctx.task_id, turn_id=ctx.turn_id, phase=Phase.context_building))
    messages, anchor = await rt.store.context_inputs(ctx.task_id)
    chat = build_chat(SYSTEM_PROMPT, messages, ctx.input_message_id)
    ratio = chars_per_token(anchor)
    ctx.chat = compact(chat, rt.context_budget(ctx.provider), ratio)
    ctx.chat_chars = int(estimate_tokens(ctx.chat, 1.0))

    ctx.publish(Status(task_id=ctx.task_id, turn_id=ctx.turn_id, phase=Phase.mcp_connecting))
    if ctx.mcp is not None:
        mcp_tools, warnings = await ctx.mcp.ready()
        for message in warnings:
            ctx.warn(message)
        for tool in mcp_tools:
            ctx.tools[tool.name] = tool
            ctx.tool_specs.append(tool_spec(tool))
    await run_agent(ctx)


async def _checkpoint_loop(rt: Runtime, ctx: TurnContext, stop: asyncio.Event) -> None:
    """Persist partial parts at most every 500 ms, so a crash loses at most that much."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), CHECKPOINT_SECONDS)
            return
        except TimeoutError:
            pass
        if ctx.dirty:
            ctx.dirty = False
            try:
                await rt.store.checkpoint(ctx.output_message_id, ctx.snapshot())
            except Exception:
                log.exception("checkpoint of turn %s failed", ctx.turn_id)
