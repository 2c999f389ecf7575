"""Subagents: `delegate` runs a focused child agent loop inside the turn (runtime/ARCHITECTURE.md, "Subagents").

- A child has its own instructions and context (only the task it was given), a restricted tool set and
  optionally another model. Definitions: the built-in `researcher` (reads, changes nothing) plus the person's
  own, Markdown files with a small front matter (`name`, `description`, `tools`: comma-separated names or
  `read-only`, `model`) in the data folder's `agents/`, loaded at the turn's setup.
- A child never waits for the person: a call its task's approval mode would ask about is refused, and the
  child is told so (the parent can do it and ask).
- Several delegate calls of one step run at once, at most `PARALLEL` (the loop groups them). Their progress
  streams as `tool_progress` events of the parent's tool part (replayable like every event) and is kept in the
  part's `progress` lines, so the saved message shows it too; Stop cancels them with the parent; their results
  go back as the parent's tool results.
- Each child leaves a record (definition, model, tokens, duration, tool calls, ending) that finalize writes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ToolError
from ...events import EndReason, ToolProgress, Usage
from ...providers.base import TEXT, TOOL_CALLS, USAGE, ModelRequest, Provider, ToolCallRequest
from ...tools.base import Effect, Tool, ToolContext, ToolResult, tool_spec
from ...tools.builtin import wrap_tool_output
from ...tools.skills import front_matter
from .context import WireIds, tool_call_entry

if TYPE_CHECKING:
    from .state import TurnContext

log = logging.getLogger(__name__)
AGENTS_DIR = "agents"
PARALLEL = 3
CHILD_STEPS = 8
NOT_FOR_CHILDREN = {"delegate", "ask_user", "submit_plan", "todo_write", "find_tools", "deliver"}


@dataclass(frozen=True)
class Definition:
    name: str
    description: str
    instructions: str
    tools: tuple[str, ...] | None = None  # None: every tool that only reads
    model: str | None = None  # provider/model; None: the task's


RESEARCHER = Definition(
    "researcher", "Looks things up in the task's files (and with other read-only tools) and reports back; "
    "changes nothing.",
    "You are a research assistant working for another agent. Use the read-only tools to find what you are asked "
    "for, then answer with the findings only: facts, file names and line numbers, short quotes. Be brief.",
)


def load_definitions(home: Path | None) -> list[Definition]:
    """The built-in definitions and the person's own (a broken file is left out and logged)."""
    found = {RESEARCHER.name: RESEARCHER}
    folder = home / AGENTS_DIR if home is not None else None
    for path in sorted(folder.glob("*.md")) if folder is not None and folder.is_dir() else ():
        meta, body = front_matter(path.read_text(encoding="utf-8", errors="replace"))
        name, description = meta.get("name", "").strip(), meta.get("description", "").strip()
        if not name or not description or not body:
            log.warning("agent definition %s left out: it needs name, description and instructions", path)
            continue
        tools = meta.get("tools", "read-only").strip()
        found[name] = Definition(name, description, body,
                                 None if tools in ("", "read-only") else tuple(t.strip() for t in tools.split(",")),
                                 meta.get("model") or None)
    return list(found.values())


class Delegate:
    name = "delegate"
    effect = Effect.read_only  # what its children may do is checked call by call against the task's approvals
    concurrent = True  # the loop runs several delegate calls of one step at once
    touches = ("It hands a job to a helper model. The helper's own tool calls follow this task's approval mode, and "
               "any that would ask you are refused.")

    def __init__(self, definitions: list[Definition]):
        self.definitions = {d.name: d for d in definitions}
        agents = "; ".join(f"{d.name}: {d.description}" for d in definitions)
        self.description = ("Hand a focused piece of work to a helper agent with its own context, and get its "
                            f"result. Agents: {agents}")
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": list(self.definitions)},
                "task": {"type": "string", "description": "What to do, complete: the helper sees nothing else."},
            },
            "required": ["agent", "task"],
        }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        turn: TurnContext = ctx.extra["turn"]
        definition = self.definitions.get(str(args.get("agent", "")))
        if definition is None:
            raise ToolError(f"No agent {args.get('agent')!r}; choose one of {', '.join(self.definitions)}.")
        task = str(args.get("task", "")).strip()
        if not task:
            raise ToolError("delegate needs a 'task': what the helper should do.")
        return ToolResult(await Child(turn, definition, task, ctx.call_id).run())


class Child:
    """One child loop. Its record is added to the turn's subagent records however it ends."""

    def __init__(self, turn: TurnContext, definition: Definition, task: str, call_id: str):
        self.turn = turn
        self.definition = definition
        self.task = task
        self.call_id = call_id
        self.part = turn.call_part(call_id)
        self.usage = Usage()
        self.calls: list[str] = []

    def progress(self, line: str) -> None:
        """Said live, and kept on the part so that the saved card still shows the helper's steps."""
        t = self.turn
        # A new list each time: a snapshot being written (a shallow copy of the part) keeps the lines it had.
        self.part["progress"] = [*self.part.get("progress", ()), line]
        t.dirty = True
        t.publish(ToolProgress(task_id=t.task_id, turn_id=t.turn_id, part_id=self.part["part_id"],
                               call_id=self.call_id, text=line))

    async def run(self) -> str:
        started, status, result = time.time(), EndReason.error.value, None
        model_ref = self.definition.model or self.turn.task["model"]
        try:
            provider, model = self.turn.resolve_model(model_ref)
            result = await self._loop(provider, model)
            status = EndReason.completed.value
            return result
        except asyncio.CancelledError:
            status = (self.turn.slot.reason or EndReason.interrupted).value
            raise
        finally:
            self.turn.subagents.append({
                "id": uuid.uuid4().hex, "goal": self.task, "status": status, "result": result,
                "input_tokens": self.usage.input_tokens, "output_tokens": self.usage.output_tokens,
                "created_at": started, "ended_at": time.time(), "definition": self.definition.name,
                "model": model_ref, "tool_calls": self.calls,
            })

    def _tools(self) -> dict[str, Tool]:
        allowed = self.definition.tools
        return {name: tool for name, tool in self.turn.tools.items() if name not in NOT_FOR_CHILDREN and (
            tool.effect == Effect.read_only if allowed is None else name in allowed)}

    async def _loop(self, provider: Provider, model: str) -> str:
        tools = self._tools()
        specs = [tool_spec(t) for t in tools.values()]
        chat: list[dict] = [{"role": "system", "content": self.definition.instructions},
                            {"role": "user", "content": self.task}]
        self.progress(f"{self.definition.name} started")
        ids = WireIds()  # its server may repeat call ids (every call `call_0`): each still pairs with its result
        for step in range(CHILD_STEPS):
            text, calls = [], []
            async for item in provider.stream(ModelRequest(model=model, messages=chat, tools=specs)):
                if item[0] == TEXT:
                    text.append(item[1])
                elif item[0] == TOOL_CALLS:
                    calls = item[1]
                elif item[0] == USAGE:
                    self.usage = self.usage + item[1]
                    self.turn.add_child_usage(item[1])
            answer = "".join(text)
            if not calls:
                self.progress(f"{self.definition.name} finished")
                return answer or "(no answer)"
            names = [ids.name(f"{self.call_id}_{step}_{i}", c.call_id) for i, c in enumerate(calls)]
            chat.append({"role": "assistant", "content": answer or None, "tool_calls": [
                tool_call_entry(name, c.name, c.arguments) for name, c in zip(names, calls, strict=True)]})
            for name, call in zip(names, calls, strict=True):
                result = await self._call(tools, call, name, chat)
                chat.append({"role": "tool", "tool_call_id": name, "content": result})
        self.progress(f"{self.definition.name} stopped after {CHILD_STEPS} steps")
        return "The helper ran out of steps; what it found is above." if not chat else _last_text(chat)

    async def _call(self, tools: dict[str, Tool], call: ToolCallRequest, call_id: str, chat: list[dict[str, Any]]
                    ) -> str:
        tool = tools.get(call.name)
        self.calls.append(call.name)
        if tool is None:
            return f"Error: this helper has no tool named {call.name!r}."
        if call.args is None:
            return f"Error: invalid JSON arguments: {call.arguments[:200]}"
        if self.turn.verdict(tool, call.args) != "allow":
            return "Not allowed for a helper: this task asks the person before such calls. Report it instead."
        self.progress(f"→ {call.name} {json.dumps(call.args, ensure_ascii=False)[:120]}")
        if tool.effect != Effect.read_only and self.turn.changes is not None:
            await self.turn.changes.watch()  # a helper's changes are the turn's too
        try:
            # The turn and the helper's own conversation: a tool checks what the helper read (the memory tool
            # refuses a secret hidden in it) as the loop's tools check the turn's conversation.
            result = await tool.run(call.args, ToolContext(self.turn.task_id, self.turn.turn_id, self.turn.workspace,
                                                           call_id, {"turn": self.turn, "helper_chat": chat}))
        except ToolError as exc:
            return wrap_tool_output(call.name, f"Error: {exc}", self.turn.tool_cap)
        except Exception as exc:
            return wrap_tool_output(call.name, f"Error: {type(exc).__name__}: {exc}", self.turn.tool_cap)
        return wrap_tool_output(call.name, result.output, self.turn.tool_cap)


def _last_text(chat: list[dict]) -> str:
    return next((m["content"] for m in reversed(chat) if m["role"] == "assistant" and m.get("content")), "")
