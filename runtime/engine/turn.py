"""The shared turn: setup, agent loop, finalize, cleanup (runtime/ARCHITECTURE.md, "A turn").

`send()` (api.py) has already registered the turn's slot, persisted the input, created the turn row and reset
the StreamBuffer; `run_turn` is the asyncio task that does the rest, on the ports of `TurnServices`:

1. eager part (`turn_started` is already published by `send()`): take the task's lock, bind the work to the
   slot (a Stop that came earlier cancels it at once), start the checkpointer;
2. setup, each phase a `status` event: agent_building (provider, tools) → context_building (model input
   rebuilt from saved messages and compacted, in a worker thread) → mcp_connecting → agent_running;
3. the agent loop (engine/agent/loop.py) in a separate *work* task, which is what Stop and shutdown cancel;
4. finalize (engine/finalize.py), exactly once, whatever happened; if finalize itself fails, observers still get a
   terminal `turn_ended` (reason `error`);
5. cleanup: close the turn's MCP sessions, release the lock, release the slot (`wait_idle` returns), start a
   queued input. The owner already took new input since `turn_ended` (finalize.announce_end); a turn started
   meanwhile waits for the lock, so it never overlaps this cleanup.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ..config import split_model_ref
from ..events import EndReason, Phase, Status, TurnEnded
from ..tools.approvals import rule_from_row
from ..tools.base import tool_spec
from .agent.compaction import Compactor
from .agent.context import chars_per_token, tool_cap
from .agent.loop import run_agent
from .agent.state import Checkpointer, TurnContext
from .agent.talk_only import TALK_ONLY, said_before
from .finalize import announce_end, finalize

if TYPE_CHECKING:
    from .abort import TurnSlot
    from .ports import TurnServices

log = logging.getLogger(__name__)

# Work that ignored a Stop for GIVE_UP_SECONDS; kept referenced until it ends by itself.
_abandoned: set[asyncio.Task[None]] = set()


async def run_turn(services: TurnServices, slot: TurnSlot, task: dict[str, Any],
                   input_parts: list[dict[str, Any]]) -> None:
    task_id = task["id"]
    buffer = services.streams.get(task_id)
    try:
        assert buffer is not None, "the host reset the owner's stream before it started the turn"
        async with services.locks.hold(task_id):
            ctx = TurnContext(slot, task, buffer, input_parts, services.agent.max_steps)
            try:
                ctx.checkpoints = Checkpointer(services.storage, ctx)
                work = asyncio.ensure_future(_work(services, ctx))
                slot.bind(work)
                await _await_work(ctx, work)
                del work
                await _record_changes(ctx)
                await ctx.checkpoints.close()
                await finalize(services, ctx)
            except Exception as exc:
                log.exception("finalize of turn %s failed", ctx.turn_id)
                # An observer never hangs: the stream still gets its terminal event.
                announce_end(services, ctx, TurnEnded(task_id=task_id, turn_id=ctx.turn_id, reason=EndReason.error,
                                                      error=f"The turn could not be finished ({type(exc).__name__})."))
            finally:
                if ctx.mcp is not None:
                    try:
                        await ctx.mcp.aclose()
                    except Exception:
                        log.exception("closing the MCP sessions of turn %s failed", ctx.turn_id)
                ctx.checkpoints = None
                del ctx
    finally:
        services.aborts.release(slot)
        services.on_turn_done(task_id)


async def _record_changes(ctx: TurnContext) -> None:
    """Before the turn ends: what it changed in the workspace (a failure costs the record, never the turn)."""
    if ctx.changes is None:
        return
    try:
        await ctx.changes.record(ctx.turn_id)
    except Exception:
        log.exception("could not record the workspace changes of turn %s", ctx.turn_id)


async def _await_work(ctx: TurnContext, work: asyncio.Task[None]) -> None:
    """Wait for the work; a Stop it ignores for too long is given up on so the turn still ends."""
    await asyncio.wait({work, ctx.slot.gave_up}, return_when=asyncio.FIRST_COMPLETED)
    if not work.done():
        log.error("turn %s: the work ignored Stop for too long; finalizing without it", ctx.turn_id)
        _abandoned.add(work)
        work.add_done_callback(_abandoned.discard)
        return
    if work.cancelled():
        if not ctx.slot.aborted:  # cancelled by something other than Stop or shutdown
            ctx.slot.abort(EndReason.interrupted)
    elif (exc := work.exception()) is not None:
        ctx.error = exc


async def _work(services: TurnServices, ctx: TurnContext) -> None:
    agent = services.agent
    ctx.publish(Status(task_id=ctx.task_id, turn_id=ctx.turn_id, phase=Phase.agent_building))
    # MCP servers connect concurrently with the rest of setup; they are only awaited in mcp_connecting.
    ctx.mcp = agent.mcp_sessions(ctx.task, ctx.workspace)
    if ctx.mcp is not None:
        ctx.mcp.start()
    provider_id, ctx.model_name = split_model_ref(ctx.task["model"])
    provider = ctx.provider = agent.provider(provider_id)
    ctx.providers = agent.provider
    # The rules, the saved conversation and the context window (a server may be asked) are read beside the
    # tools and notes: each waits on the database, files or the network, and the request waits for all of them.
    inputs_read = asyncio.ensure_future(services.storage.context_inputs(ctx.task_id))  # the longest first
    rules_read = asyncio.ensure_future(services.storage.permission_rules(ctx.task_id))
    window_read = asyncio.ensure_future(agent.context_window(provider, ctx.model_name))
    beside: tuple[asyncio.Future[Any], ...] = (inputs_read, rules_read, window_read)
    try:
        prepared = await agent.prepare(ctx.task, ctx.input_parts)
        rules = await rules_read
        ctx.publish(Status(task_id=ctx.task_id, turn_id=ctx.turn_id, phase=Phase.context_building))
        inputs = await inputs_read
        window, note = await window_read
    finally:  # an error or a Stop came first: what is still running is not left behind
        for side in beside:
            side.cancel()
        await asyncio.gather(*beside, return_exceptions=True)
        del beside, inputs_read, rules_read, window_read
    ctx.tools, ctx.notes = dict(prepared.tools), prepared.notes
    ctx.changes = prepared.changes
    ctx.save_todos = services.storage.set_todos
    ctx.rules = [r for row in rules if (r := rule_from_row(row))]
    if prepared.notice and not said_before([m["parts"] for m in inputs.messages]):
        ctx.warn(prepared.notice, TALK_ONLY)  # a model that can only talk, asked for files or commands: once
    if note:
        ctx.warn(note)
    ctx.compactor = compactor = Compactor(services.storage, window, prepared.system)
    ctx.tool_cap = tool_cap(window)
    ctx.ratio = chars_per_token(inputs.anchor)
    # The built-ins' schemas go with every request, so the start-of-turn estimate counts them; MCP tools join
    # once their servers answer (offer_tools below), and the loop's check before each request counts those.
    ctx.tool_specs = [tool_spec(t) for t in prepared.tools.values()]
    await compactor.build(ctx, inputs)
    del inputs

    ctx.publish(Status(task_id=ctx.task_id, turn_id=ctx.turn_id, phase=Phase.mcp_connecting))
    if ctx.mcp is not None:
        mcp_tools, warnings = await ctx.mcp.ready()
        for message in warnings:
            ctx.warn(message, "mcp_paused" if message in ctx.mcp.paused else None)
        for tool in mcp_tools:
            ctx.tools[tool.name] = tool
    ctx.offer_tools(builtin=set(prepared.tools))
    await run_agent(ctx)
