"""Keeping a turn's model input inside the model's context window (runtime/ARCHITECTURE.md, "Context").

When the next request — its messages, tool schemas and notes (TurnContext.request_chars) — would pass `THRESHOLD`
of the window, at the start of a turn or before any later request (mid-turn, after a step's tool results), in
this order:
1. tool outputs of older steps are trimmed (every tool message before the newest step keeps its start and end);
2. the older history is summarized by the task's own model into a checkpoint persisted in SQLite: the messages
   up to a message id are replaced by the summary in every later model input (they stay in the database and on
   screen). Summaries build on the previous one, so a fact from the first turns survives any number of them;
3. when no summary can be made (the model failed), the oldest messages are dropped instead; the turn goes on.
Both the trimming and the use of a checkpoint are pure functions of what is saved, so the same saved state
always gives the same request (a restart changes nothing).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ...providers.base import TEXT, USAGE, ModelRequest
from .context import (
    THRESHOLD,
    build_context,
    chars_per_token,
    chat_chars,
    compact,
    over,
    system_message,
    trim_old_tool_outputs,
)

if TYPE_CHECKING:
    from ...store.conversations import ContextInputs
    from ..ports import TurnStorage
    from .state import TurnContext

log = logging.getLogger(__name__)

CHUNK = 0.5  # of the window: the most history one summary request reads
SUMMARY_TOKENS = 600
SUMMARIZE = (
    "You keep the memory of a long conversation between a person and an assistant. Write a summary that lets "
    "the assistant continue the work without the original: the person's goal and preferences, every fact, name, "
    "number, file and decision, what was done and what is left. Keep every line of the previous summary that "
    "still matters. Plain sentences or short bullet points; no preamble."
)
COMPACTED = "Earlier messages were summarized to fit the model's context window."
SMALL_MESSAGES, SMALL_CHARS = 40, 40_000  # a history this small is rebuilt on the event loop


def _small(messages: list[dict]) -> bool:
    """A history rebuilt in well under a millisecond (a new task's, a short chat's)."""
    return len(messages) <= SMALL_MESSAGES and sum(len(m["parts"]) for m in messages) <= SMALL_CHARS


def transcript(chat: list[dict]) -> str:
    """A chat slice as plain text for the summarizer."""
    lines = []
    for m in chat:
        role = m["role"]
        if role == "tool":
            lines.append(f"[tool result] {m.get('content') or ''}")
            continue
        text = m.get("content") or ""
        calls = ", ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in m.get("tool_calls", []))
        who = {"user": "Person", "assistant": "Assistant", "system": "Note"}.get(role, role)
        lines.append(f"{who}: {text}" + (f" [calls {calls}]" if calls else ""))
    return "\n\n".join(lines)


class Compactor:
    """One turn's compaction: knows the window, the model, where to persist checkpoints."""

    def __init__(self, storage: TurnStorage, window: int, system_prompt: str):
        self.storage = storage
        self.window = window
        self.system_prompt = system_prompt
        self.summary: str | None = None  # the checkpoint this turn's input starts from

    async def build(self, ctx: TurnContext, inputs: ContextInputs) -> None:
        """The turn's starting input: rebuilt from what is saved, summarized further when it does not fit. The
        estimate counts the whole request (ctx.extra_chars: the schemas of the tools known so far, the notes)."""
        cp = inputs.checkpoint
        self.summary = cp["summary"] if cp else None
        ratio = chars_per_token(inputs.anchor)
        extra = ctx.extra_chars()
        args = (self.system_prompt, inputs.messages, ctx.input_message_id, self.window, inputs.anchor, self.summary,
                extra)
        if _small(inputs.messages):  # on the loop: a worker thread's round trip would cost more than the work
            ctx.chat, ctx.chat_chars = build_context(*args)
        else:
            ctx.chat, ctx.chat_chars = await asyncio.to_thread(build_context, *args)
        if not over(ctx.chat_chars + extra, ratio, self.window):
            return
        history = _before_input(ctx.chat)
        if history > 1 and await self._summarize(ctx, ctx.chat[1:history], upto=ctx.input_message_id - 1):
            rest = [m for m in inputs.messages if m["id"] >= ctx.input_message_id]
            ctx.chat, ctx.chat_chars = await asyncio.to_thread(
                build_context, self.system_prompt, rest, ctx.input_message_id, self.window, inputs.anchor,
                self.summary, extra)
        if over(ctx.chat_chars + extra, ratio, self.window):  # still too big (or no summary): drop the oldest
            ctx.chat, ctx.chat_chars = await asyncio.to_thread(_drop_oldest, ctx.chat, self.window, extra, ratio)

    async def fit(self, ctx: TurnContext, ratio: float) -> None:
        """Before each request (mid-turn: after a step's tool results): trim old tool outputs, then summarize the
        history before this turn's input, then drop the oldest, until the whole request fits. The O(history)
        work runs in a worker thread, off the event loop."""
        extra = ctx.extra_chars()
        if not over(ctx.chat_chars + extra, ratio, self.window):
            return
        ctx.chat_chars -= await asyncio.to_thread(trim_old_tool_outputs, ctx.chat, _last_step(ctx.chat))
        history = _before_input(ctx.chat)
        if over(ctx.chat_chars + extra, ratio, self.window) and history > 1:
            if await self._summarize(ctx, ctx.chat[1:history], upto=ctx.input_message_id - 1):
                ctx.chat[:history] = [system_message(self.system_prompt, self.summary)]
                ctx.chat_chars = await asyncio.to_thread(chat_chars, ctx.chat)
        if over(ctx.chat_chars + extra, ratio, self.window):
            ctx.chat[:], ctx.chat_chars = await asyncio.to_thread(_drop_oldest, ctx.chat, self.window, extra, ratio)

    async def _summarize(self, ctx: TurnContext, history: list[dict], upto: int) -> bool:
        """Summarize `history` (with the current summary) into a new checkpoint; False when it failed."""
        text = transcript([m for m in history if m["role"] != "system"])
        limit = int(CHUNK * self.window * 4)
        summary = self.summary or ""
        try:
            for start in range(0, max(len(text), 1), limit):  # a history longer than a request: in pieces
                summary = await self._ask(ctx, summary, text[start:start + limit])
        except Exception as exc:  # a failing summary never fails the turn: the caller drops old messages
            log.warning("turn %s: could not summarize the older history: %s", ctx.turn_id, exc)
            return False
        if not summary.strip():
            return False
        self.summary = summary.strip()
        await self.storage.add_checkpoint(ctx.task_id, ctx.turn_id, upto, self.summary)
        ctx.warn(COMPACTED, code="compacted")
        ctx.parts.append({"type": "marker", "marker": "compacted", "step": ctx.step})
        ctx.dirty = True
        return True

    async def _ask(self, ctx: TurnContext, previous: str, piece: str) -> str:
        prompt = (f"Previous summary:\n{previous}\n\n" if previous else "") + f"Conversation:\n{piece}"
        request = ModelRequest(model=ctx.model_name, max_tokens=SUMMARY_TOKENS, temperature=0.0, messages=[
            {"role": "system", "content": SUMMARIZE}, {"role": "user", "content": prompt}])
        out = []
        assert ctx.provider is not None, "set in setup, before the turn's input is built"
        async for item in ctx.provider.stream(request):
            if item[0] == TEXT:
                out.append(item[1])
            elif item[0] == USAGE:
                ctx.usage = ctx.usage + item[1]
        return "".join(out)


def _drop_oldest(chat: list[dict], window: int, extra: int, ratio: float) -> tuple[list[dict], int]:
    """The chat with its oldest messages dropped so that it and `extra` fit THRESHOLD of the window, and its size."""
    fitted = compact(chat, int(THRESHOLD * window - extra / ratio), ratio)
    return fitted, chat_chars(fitted)


def _before_input(chat: list[dict]) -> int:
    """Index of the current input (the last user message): what lies before it is history."""
    return max((i for i, m in enumerate(chat) if m["role"] == "user"), default=0)


def _last_step(chat: list[dict]) -> int:
    """Index of the newest assistant message: its tool results are the ones the model is working with."""
    return max((i for i, m in enumerate(chat) if m["role"] == "assistant"), default=len(chat))
