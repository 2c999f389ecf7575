"""The agent loop: model steps, tool calls, results back to the model, until done.

Per-chunk work is a tuple test, an append to the part's accumulator and an append to the StreamBuffer;
nothing is validated or persisted per chunk (text checkpoints run on a timer, see engine/agent/state.py). Tool
state changes are checkpointed at once, and a side-effecting call is committed as `running` before it
starts, so a crash can never make it look as if it had no effect. Stop is checked before every model request
and after every tool call (runtime/engine/abort.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from ...errors import ToolError
from ...events import InputRequested, Phase, Status, ToolState
from ...parts import ToolPart
from ...providers.base import (
    FINISH,
    REASONING,
    STATUS,
    TEXT,
    TOOL_CALLS,
    TOOL_START,
    USAGE,
    ModelRequest,
    named_choice,
    outgoing_messages,
)
from ...redact import redact_known
from ...tools.base import Effect, ToolContext, tool_spec, touches
from ...tools.planning import SubmitPlan, plan_steps, todo_lines
from ..stream_buffer import REASONING_KIND, TEXT_KIND
from .context import DENIED, message_chars, tool_call_entry, tool_message
from .subagents import PARALLEL

if TYPE_CHECKING:
    from .state import TurnContext

WAITING = "Waiting for the model…"
TRUNCATED = "The answer stopped at the model's length limit. Press Continue to let it go on."
REPEATING = "repeating"  # a step's finish reason when the loop cut it off: its text repeated itself
REPEATED = "Stopped: the model was repeating itself."


async def run_agent(ctx: TurnContext) -> None:
    buffer = ctx.buffer
    await resolve_answer(ctx)
    if ctx.pending_request is not None:
        return
    provider = ctx.provider
    assert provider is not None, "set in setup (engine/turn.py), before the loop runs"
    quirk = getattr(provider, "empty_tool_call_content", False)  # a server's quirk (providers/base.py)
    # A planning turn that answers in words asks once more, for the plan by name (plan_only): `ask_plan` for the
    # next request, `plan_asked` so that it happens once.
    ask_plan = plan_asked = False
    for step in range(ctx.max_steps):
        ctx.check_abort()
        # Until the first token the person sees what the turn waits for; the provider may say more (STATUS).
        ctx.publish(Status(task_id=ctx.task_id, turn_id=ctx.turn_id, phase=Phase.agent_running, detail=WAITING))
        if not ask_plan:  # the plan asked for joins the words' step: one assistant message, text then the call
            ctx.step = step
        if ctx.compactor is not None:  # the last step's tool results, the MCP tools' schemas or the notes
            await ctx.compactor.fit(ctx, ctx.ratio)  # may push this request over the window
            ctx.check_abort()
        messages = outgoing_messages(with_notes(ctx), empty_tool_call_content=quirk)
        request = ModelRequest(model=ctx.model_name, messages=messages, tools=ctx.tool_specs)
        if ask_plan or (plans(ctx) and (step == ctx.max_steps - 1 or len(ctx.tools) == 1)):
            request.tools, request.tool_choice = plan_only(ctx)
        ask_plan = False
        request_chars = ctx.request_chars()  # the whole request, as the window check measures it
        record: dict[str, Any] = {
            "step_index": step, "started_at": time.time(), "first_token_at": None, "ended_at": None,
            "finish_reason": None, "tool_calls": [], "input_tokens": 0, "output_tokens": 0,
        }
        ctx.steps.append(record)
        text = reasoning = None
        calls = []
        finish = None
        append = buffer.append_delta
        stream = provider.stream(request, on_queued=ctx.warn)
        async for item in stream:
            kind = item[0]
            if kind == TEXT:
                if text is None:
                    text = ctx.new_text_part("text")
                    record["first_token_at"] = time.time()
                looping = text.add(item[1])
                append(TEXT_KIND, text.part_id, item[1])
                ctx.dirty = True
                if looping:
                    finish = REPEATING
                    break
            elif kind == REASONING:
                if reasoning is None:
                    reasoning = ctx.new_text_part("reasoning")
                looping = reasoning.add(item[1])
                append(REASONING_KIND, reasoning.part_id, item[1])
                ctx.dirty = True
                if looping:
                    finish = REPEATING
                    break
            elif kind == TOOL_START:  # (TOOL_START, position in the step, the server's id, name)
                ctx.step_call(item[1], item[3])
            elif kind == TOOL_CALLS:
                calls = item[1]
            elif kind == USAGE:
                ctx.add_usage(record, item[1], request_chars)
            elif kind == FINISH:
                finish = item[1]
            elif kind == STATUS:  # a model loading, a long prompt being read, a server not answering yet
                ctx.publish(Status(task_id=ctx.task_id, turn_id=ctx.turn_id, phase=Phase.agent_running,
                                   detail=item[1]))
        record["ended_at"] = time.time()
        record["finish_reason"] = finish
        record["tool_calls"] = [c.name for c in calls]
        text = reasoning = None
        if finish == REPEATING:
            await stream.aclose()  # the generation stops (a local model's thread, a server's connection)
            mark_repeating(ctx)
            return
        if finish == "length" and not calls:
            mark_truncated(ctx)
            return
        if not calls:
            if plan_asked or not plans(ctx):
                return
            ask_plan = plan_asked = True  # its words stay; the next request must come back with the plan
            continue
        assistant: dict[str, Any] = {"role": "assistant", "content": ctx.step_text(ctx.step) or None, "tool_calls": []}
        made = []
        for index, call in enumerate(calls):
            part = ctx.step_call(index, call.name)
            part["args"] = call.args if call.args is not None else {}
            # The result goes back under the server's own id for the call, unless this turn used that id already.
            wire = ctx.wire_ids.name(part["call_id"], call.call_id)
            assistant["tool_calls"].append(tool_call_entry(wire, call.name, call.arguments))
            made.append((call, part))
        ctx.append_chat(assistant)
        for group in _groups(ctx, made):
            if ctx.pending_request is not None or ctx.waits:
                break  # the turn waits; later calls of this step stay pending and are settled
            if len(group) > 1:
                await _together(ctx, [part for _call, part in group])
            else:
                call, part = group[0]
                if call.args is None:
                    finish_call(ctx, part, ToolState.error, f"Invalid JSON arguments: {call.arguments[:200]}")
                else:
                    await dispatch(ctx, part)
            ctx.check_abort()
        if ctx.pending_request is not None or ctx.waits:
            return
        ctx.dirty = True
    ctx.warn(f"Stopped after {ctx.max_steps} model steps; send a message to let it continue.")


def plans(ctx: TurnContext) -> bool:
    """A planning turn: it must end with a plan to approve (submit_plan)."""
    return SubmitPlan.name in ctx.tools


def plan_only(ctx: TurnContext) -> tuple[list[dict], dict]:
    """The tools and tool_choice of a request that must come back with the plan: submit_plan alone, named. A
    planning turn sends it after an answer in plain words, and as its last step: a model that does not call
    submit_plan by itself (some never do) still gives the person a plan to approve. The first steps stay free,
    so that the model can look around with the read-only tools first; with no tool but submit_plan (a model that
    can only talk) there is nothing to look around with, and the plan is asked for at once."""
    return [tool_spec(ctx.tools[SubmitPlan.name])], named_choice(SubmitPlan.name)


def _groups(ctx: TurnContext, made: list[tuple]) -> list[list[tuple]]:
    """The step's (call, part) pairs in order, consecutive calls of a tool that may run at once (delegate)
    grouped."""
    groups: list[list[tuple]] = []
    for call, part in made:
        tool = ctx.tools.get(call.name)
        together = getattr(tool, "concurrent", False) and call.args is not None
        if together and groups and groups[-1][0][0].name == call.name:
            groups[-1].append((call, part))
        else:
            groups.append([(call, part)])
    return groups


async def _together(ctx: TurnContext, group: list[ToolPart]) -> None:
    """Run a group of calls at once (at most PARALLEL), their results kept in the order the model made them."""
    gate = asyncio.Semaphore(PARALLEL)
    start = len(ctx.chat)

    async def one(part: ToolPart) -> None:
        async with gate:
            await dispatch(ctx, part)

    await asyncio.gather(*(one(p) for p in group))
    order: dict[str | None, int] = {ctx.wire_ids.of[p["call_id"]]: i for i, p in enumerate(group)}
    ctx.chat[start:] = sorted(ctx.chat[start:], key=lambda m: order.get(m.get("tool_call_id"), len(order)))


def with_notes(ctx: TurnContext) -> list[dict]:
    """The chat as sent this step: the system message also carries what this step must keep in mind
    (TurnContext.step_notes)."""
    notes = ctx.step_notes()
    if not notes:
        return ctx.chat
    system = dict(ctx.chat[0], content=ctx.chat[0]["content"] + notes)
    return [system, *ctx.chat[1:]]


def mark_truncated(ctx: TurnContext) -> None:
    """A step that hit the length limit is not "done": the message carries a marker and observers are told."""
    ctx.truncated = True
    ctx.parts.append({"type": "marker", "marker": "truncated", "step": ctx.step})
    ctx.dirty = True
    ctx.warn(TRUNCATED, code="truncated")


def mark_repeating(ctx: TurnContext) -> None:
    """A step whose text went round in circles (engine/agent/repetition.py) ends the turn, marked: no Continue (it
    would go on repeating), Retry instead."""
    ctx.parts.append({"type": "marker", "marker": "repeating", "step": ctx.step})
    ctx.dirty = True
    ctx.warn(REPEATED, code="repeating")


async def dispatch(ctx: TurnContext, part: ToolPart) -> None:
    """Run one tool call, or turn it into a question/approval request that ends the turn `waiting`."""
    tool = ctx.tools.get(part["name"])
    if tool is None:
        finish_call(ctx, part, ToolState.error, f"There is no tool named {part['name']!r}.")
        return
    part["effect"] = str(tool.effect_for(part["args"]) if hasattr(tool, "effect_for") else tool.effect)
    if server := getattr(tool, "server_name", None):
        part["mcp_server"] = server  # its result is framed as an outside program's data
    asks = getattr(tool, "asks_user", False)
    if asks == "plan":
        try:
            steps = plan_steps(part["args"])
        except ToolError as exc:
            finish_call(ctx, part, ToolState.error, str(exc))
            return
        ask(ctx, part, "plan", str(part["args"].get("summary") or "Approve this plan?"), {"plan": steps})
        return
    if asks:
        ask(ctx, part, "question", str(part["args"].get("question", "")))
        return
    verdict = ctx.verdict(tool, part["args"])
    if verdict == "deny":
        finish_call(ctx, part, ToolState.denied, "Denied by a rule the person set for this tool.")
    elif verdict == "ask":
        details = tool.approval_details(part["args"]) if hasattr(tool, "approval_details") else {}
        details["touches"] = touches(tool, part["args"])
        ask(ctx, part, "approval", f"Allow {tool.name}? {details['touches']}", details)
    else:
        await execute(ctx, part)


def ask(ctx: TurnContext, part: ToolPart, kind: Literal["question", "approval", "plan"], prompt: str,
        details: dict[str, Any] | None = None) -> None:
    """End the turn waiting for the person. `details` join the request: a plan's steps, or for an approval what the
    call touches (tools/base.py `touches`) and, for a sandboxable tool (RunShell.approval_details), whether it
    runs sandboxed, with network, and a rule to offer."""
    part["awaiting"] = True
    request = {
        "request_id": uuid.uuid4().hex, "kind": kind, "prompt": prompt, "call_id": part["call_id"],
        "tool_name": part["name"], "tool_args": part["args"], "effect": part.get("effect", "read_only"),
        **(details or {}),
    }
    ctx.pending_request = request
    ctx.publish(
        InputRequested(
            task_id=ctx.task_id, turn_id=ctx.turn_id, request_id=request["request_id"], kind=kind,
            prompt=prompt, tool_name=part["name"], tool_args=part["args"],
        )
    )


async def execute(ctx: TurnContext, part: ToolPart, extra: dict | None = None) -> None:
    """Run the call; `extra` reaches the tool (ToolContext.extra): what the person approved it with."""
    tool = ctx.tools[part["name"]]
    if part.get("effect", "read_only") != Effect.read_only and ctx.changes is not None:
        await ctx.changes.watch()  # the workspace as it was before this turn changed anything
    part["state"] = ToolState.running.value
    if getattr(tool, "records_intent", False):
        part["intent"] = {}  # nothing written yet: the write records what it means to write before it writes
    if part.get("effect", "read_only") != Effect.read_only and ctx.checkpoints is not None:
        # Committed before the call starts: after a crash this call reads "outcome unknown", never "no effect".
        try:
            await ctx.checkpoints.now()
        except Exception as exc:
            part["state"] = ToolState.pending.value
            finish_call(ctx, part, ToolState.error,
                        f"Not run: Hearth could not save that it was starting ({type(exc).__name__}).")
            return
    ctx.publish_tool(part)
    ctx.tool_state_changed()
    tctx = ToolContext(ctx.task_id, ctx.turn_id, ctx.workspace, part["call_id"], {"turn": ctx, **(extra or {})},
                       intend=_intend_for(ctx, part))
    try:
        result = await tool.run(part["args"], tctx)
    except ToolError as exc:
        finish_call(ctx, part, ToolState.error, str(exc))
        return
    except Exception as exc:  # a broken tool must not end the turn; the model sees the failure
        finish_call(ctx, part, ToolState.error, f"{type(exc).__name__}: {exc}")
        return
    if result.state and "todos" in result.state:
        await ctx.set_todos(result.state["todos"])
    if result.state and "offer" in result.state:
        ctx.offer_more(result.state["offer"])
    if result.state and result.state.get("ends_turn"):
        ctx.waits = True  # `wait`: the turn ends after this call; a wake-up starts the next one
    state = ToolState.error if result.is_error else ToolState.done
    finish_call(ctx, part, state, result.output)


def _intend_for(ctx: TurnContext, part: ToolPart) -> Callable[[dict[str, str]], Awaitable[None]]:
    async def intend(intent: dict[str, str]) -> None:
        """Committed before the write: after a crash, recovery checks the file against it (parts.settle_parts)."""
        part["intent"] = intent
        if ctx.checkpoints is not None:
            try:
                await ctx.checkpoints.now()
            except Exception as exc:
                part["intent"] = {}
                raise ToolError(f"Not written: Hearth could not save what it was about to write "
                                f"({type(exc).__name__}).") from None
    return intend


def finish_call(ctx: TurnContext, part: ToolPart, state: ToolState, result: str) -> None:
    part.pop("awaiting", None)
    part["state"] = state.value
    part["result"] = redact_known(result)  # a key a tool printed reaches neither the model nor the database
    ctx.publish_tool(part)
    ctx.tool_state_changed()
    ctx.append_chat(tool_message(part, ctx.tool_cap, ctx.wire_ids.of.get(part["call_id"])))


async def resolve_answer(ctx: TurnContext) -> None:
    """When this turn was started by an answer, complete the call that was waiting for it first."""
    answer = next((p for p in ctx.input_parts if p.get("type") == "answer"), None)
    if answer is None:
        return
    req = answer["request"]
    part = ctx.new_tool_part(req["tool_name"], call_id=req["call_id"])  # the earlier turn's call, completed here
    part["args"] = req.get("tool_args") or {}
    part["effect"] = req.get("effect", str(Effect.read_only))
    # The call was declared by the previous turn's assistant message; the chat already holds it, so
    # replace its placeholder result rather than adding a second one.
    placeholders = [m for m in ctx.chat if m["role"] == "tool" and m.get("tool_call_id") == req["call_id"]]
    ctx.chat[:] = [m for m in ctx.chat if not any(m is p for p in placeholders)]
    ctx.chat_chars -= sum(message_chars(m) for m in placeholders)
    if req["kind"] == "question":
        finish_call(ctx, part, ToolState.done, f"The person answered: {answer['answer']}")
    elif req["kind"] == "plan":
        if ctx.todos and ctx.task.get("plan_status") == "approved":
            done = "The person approved the plan. Carry it out now, keeping the todo list up to date:\n"
            finish_call(ctx, part, ToolState.done, done + todo_lines(ctx.todos))
        else:
            finish_call(ctx, part, ToolState.done, f"The person did not approve the plan: {answer['answer']}. "
                                                   "Make a new plan with their remarks and submit it.")
    elif answer["answer"] in ("approve", "approve_network"):
        # As approved: with the network only when the person chose that; refused if the promised sandbox is gone.
        extra = {"network": answer["answer"] == "approve_network"}
        if req.get("sandboxed") is not None:
            extra["sandboxed"] = req["sandboxed"]
        await execute(ctx, part, extra)
    else:
        finish_call(ctx, part, ToolState.denied, DENIED)
    # Keep the tool message right after the assistant message that called it.
    tool_msg = ctx.chat.pop()
    idx = next(
        (i for i, m in enumerate(ctx.chat)
         if any(c["id"] == req["call_id"] for c in m.get("tool_calls") or ())),
        len(ctx.chat) - 1,
    )
    ctx.chat.insert(idx + 1, tool_msg)
    ctx.check_abort()
