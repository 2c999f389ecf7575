"""The model input of a turn, rebuilt from raw saved messages (runtime/ARCHITECTURE.md, "Context").

Nothing but the messages table (plus the system prompt and the usage anchor) feeds the model, so a task
continued after a crash or a restart sees exactly what was confirmed. Rules:
- an assistant message is split by `step`: each step becomes an assistant message (text + tool_calls)
  followed by one `tool` message per call;
- a call's result is its own part's, or for a call that waited for the person, the part with its `call_id` in
  the answer's turn (an approval or an answer completes the call there); a call that never got a result is
  explained instead, so the model never sees a dangling tool call;
- each call goes by its `call_id` (Hearth's own, unique in the conversation: parts.hearth_call_id). Where a
  conversation saved before had servers' ids, which some servers repeat, only the last call of an id keeps it
  (an answer completes that one) and the earlier ones get ids made unique by their message and position, so
  every tool message pairs with its call;
- `tool_message()` is the one function that turns a tool part into the model's tool message, used both
  here and by the live loop: tool output is framed as data and capped the same way live and rebuilt (output
  of an MCP server's tool as untrusted data from a program outside Hearth);
- an interrupted side-effecting call tells the model to check the actual effect before retrying;
- queued inputs are left out until their turn starts; answers to questions/approvals are carried by the
  tool results, not repeated as user text;
- inputs that rewrite the conversation: `continue` (the previous, cut-off answer stays the assistant's last
  message and the instruction `providers.base.CONTINUE` asks to go on exactly there; a local model instead
  writes on from the answer's text, `providers.base.continuation`), `retry` of input X (everything after X is left out,
  so the model answers X afresh) and `edit` of input X (X and everything after it are replaced by the new
  text). The older attempts stay in the database and on screen.
Compaction: when the estimated size exceeds the budget, the oldest messages are dropped (never the current
input) and a note says how many. Each message is measured once, so the whole build is linear in the history;
the turn runs it in a worker thread, off the event loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ...parts import NEVER_RAN, OUTCOME_UNKNOWN, READ_ONLY_INTERRUPTED, WRITE_APPLIED, WRITE_NOT_APPLIED
from ...providers.base import CONTINUE
from ...tools.builtin import DEFAULT_WRAP_CAP, wrap_tool_output

CHARS_PER_TOKEN = 4.0
THRESHOLD = 0.8  # of the context window: a request above this is compacted (engine/agent/compaction.py)
TRIM_KEEP = 600  # characters kept at each end of an older step's tool output when the input is too big
DENIED = "The person denied this tool call. Do not retry it unless they ask."
STOPPED = "Not run: the person ended the wait for their answer without giving one. Do not retry it unless they ask."


def tool_cap(window: int) -> int:
    """The most characters one tool output may take in a model input: a quarter of the window, at most 64 KiB."""
    return min(DEFAULT_WRAP_CAP, int(window * CHARS_PER_TOKEN / 4))


def tool_message(part: Mapping[str, Any], cap: int = DEFAULT_WRAP_CAP, call_id: str | None = None
                 ) -> dict[str, Any]:
    """The chat message that carries a tool part's outcome to the model, for the call named `call_id` in the
    model input (default: the part's own id)."""
    return {"role": "tool", "tool_call_id": call_id or part["call_id"], "content": _tool_content(part, cap)}


class WireIds:
    """The ids tool calls go by in one live model input (a turn's, a helper's). A call keeps the id the server
    gave it unless that is empty or already taken there (some servers give every call `call_0`); then it goes by
    `own`, an id of Hearth's that is unique by construction, so every tool message still pairs with its call."""

    def __init__(self) -> None:
        self._taken: set[str] = set()
        self.of: dict[str, str] = {}  # own id -> the id used

    def name(self, own: str, given: str | None) -> str:
        wire = given if given and given not in self._taken else own
        self._taken.add(wire)
        self.of[own] = wire
        return wire


def _tool_content(part: Mapping[str, Any], cap: int) -> str:
    state = part.get("state")
    result = part.get("result")
    server = part.get("mcp_server")  # set for MCP tools: their results are an outside program's data
    if state == "done":
        return wrap_tool_output(part["name"], result or "", cap, server=server)
    if state == "error":
        return wrap_tool_output(part["name"], f"Error: {result}", cap, server=server)
    if state == "denied":
        return result or DENIED
    if state == "stopped":
        return STOPPED
    if state == "interrupted":
        note = part.get("note")
        if note == NEVER_RAN:
            return "Interrupted before it ran: it had no effect."
        if note == WRITE_APPLIED:
            return ("Interrupted, but the write was applied (checked on disk): the file holds the content this call "
                    "meant to write. Do not repeat it.")
        if note == WRITE_NOT_APPLIED:
            return ("Interrupted before the write was applied (checked on disk): the file does not hold the content "
                    "this call meant to write. Run it again if it is still needed.")
        reads_only = part.get("effect", "read_only") == "read_only"
        if note == READ_ONLY_INTERRUPTED or (note != OUTCOME_UNKNOWN and reads_only):
            return "Interrupted while running. It only reads, so it changed nothing; run it again if needed."
        return "Interrupted while running: outcome unknown. Check the actual effect before retrying."
    if part.get("awaiting"):
        return "Not run: the person has not answered yet."
    return "Not run."


def _user_content(parts: list[dict]) -> str | None:
    texts = [p["text"] for p in parts if p.get("type") == "text" and p.get("text")]
    files = [p for p in parts if p.get("type") == "attachment"]
    texts.extend(_attachment_text(p) for p in files if p.get("text"))
    others = [p["name"] for p in files if not p.get("text")]
    if others:
        texts.append("Attached files, now in the workspace: " + ", ".join(others))
    return "\n\n".join(texts) if texts else None


def _attachment_text(part: dict) -> str:
    """An attached file's text as the person's data, framed like tool output; a cut one says where the rest is."""
    name = part["name"]
    if part.get("chars") is None or part["chars"] > len(part["text"]):
        whole = f" of {part['chars']:,}" if part.get("chars") else ""
        note = (f"Attached file {name} (in the workspace). Only its first {len(part['text']):,}{whole} characters "
                f"are below; read the rest with read_file.")
    else:
        note = f"Attached file {name} (in the workspace):"
    safe = re.sub(r"</\s*attachment", "<\\/attachment", part["text"], flags=re.IGNORECASE)
    return f'{note}\n<attachment name="{name}">\n{safe}\n</attachment>'



def _rewind(parts: list[dict]) -> dict | None:
    return next((p for p in parts if p.get("type") in ("continue", "retry", "edit")), None)


class _Calls:
    """The tool calls of saved messages: which part holds each call's outcome when it is not the call's own (for
    a call that waited for the person, the part with its id in the answer's turn, which is no call of its own),
    and which call keeps an id that more than one call has (the last: an answer completes that one)."""

    def __init__(self, messages: list[dict]):
        self.outcome: dict[int, dict] = {}  # id() of a call's part -> the part holding its outcome
        self.completing: set[int] = set()  # id()s of parts that complete an earlier call
        self.last: dict[str, int] = {}  # call id -> id() of the last call's part with it
        waiting: dict[str, dict] = {}  # call id -> its part that waits for an answer
        for msg in messages:
            for part in msg["parts"]:
                if part.get("type") != "tool_call":
                    continue
                asked = waiting.pop(part["call_id"], None)
                if asked is not None:
                    self.outcome[id(asked)] = part
                    self.completing.add(id(part))
                    continue
                self.last[part["call_id"]] = id(part)
                if part.get("state") == "pending":  # saved pending: it waited for the person (finalize settles
                    waiting[part["call_id"]] = part     # every other unfinished call)

    def name(self, part: dict, message_id: int, position: int) -> str:
        own = part["call_id"]
        return own if self.last.get(own) == id(part) else f"{own}_{message_id}_{part.get('part_id', position)}"


def build_chat(system_prompt: str, messages: list[dict], current_input_id: int | None,
               cap: int = DEFAULT_WRAP_CAP) -> list[dict]:
    calls_of = _Calls(messages)
    chat: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    spans: dict[int, tuple[int, int]] = {}  # input message id -> chat length before and after it
    for msg in messages:
        if msg["status"] == "queued" and msg["id"] != current_input_id:
            continue
        if msg["role"] not in ("user", "assistant"):  # a chat's model-change marker: for the person only
            continue
        if msg["role"] == "user":
            start = len(chat)
            rewind = _rewind(msg["parts"])
            if rewind is not None and rewind["type"] == "continue":
                chat.append({"role": "user", "content": CONTINUE})
                continue
            if rewind is not None and rewind.get("message_id") in spans:
                before, after = spans[rewind["message_id"]]
                cut = after if rewind["type"] == "retry" else before
                del chat[cut:]
                spans = {mid: span for mid, span in spans.items() if span[1] <= cut}
                start = len(chat)
            if rewind is not None and rewind["type"] == "retry":
                continue
            content = _user_content(msg["parts"])
            if content is not None:
                chat.append({"role": "user", "content": content})
            spans[msg["id"]] = (start, len(chat))
            continue
        steps: dict[int, list[dict]] = {}
        for part in msg["parts"]:
            steps.setdefault(part.get("step", 0), []).append(part)
        for parts in steps.values():
            text = "".join(p.get("text", "") for p in parts if p.get("type") == "text")
            calls = [p for p in parts if p.get("type") == "tool_call" and id(p) not in calls_of.completing]
            if not text and not calls:
                continue
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            names = [calls_of.name(p, msg["id"], i) for i, p in enumerate(calls)]
            if calls:
                entry["tool_calls"] = [tool_call_entry(name, p["name"], json.dumps(p.get("args") or {}))
                                       for name, p in zip(names, calls, strict=True)]
            chat.append(entry)
            for name, p in zip(names, calls, strict=True):
                chat.append(tool_message(calls_of.outcome.get(id(p), p), cap, name))
    return chat


def tool_call_entry(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def message_chars(message: dict) -> int:
    return len(json.dumps(message))


def chat_chars(chat: list[dict]) -> int:
    """The sum of `message_chars` over `chat`, in one encoding of the list ("[" and "]", ", " between items):
    a call per message costs ~5 µs, which a 2,000-message task paid on every turn."""
    return len(json.dumps(chat)) - 2 * len(chat) if chat else 0


def estimate_tokens(chat: list[dict], chars_per_token: float = CHARS_PER_TOKEN) -> int:
    return int(chat_chars(chat) / chars_per_token)


def compact(chat: list[dict], budget_tokens: int, chars_per_token: float = CHARS_PER_TOKEN) -> list[dict]:
    """Drop the oldest messages after the system prompt until the estimate fits the budget.

    Tool messages are dropped together with the assistant message that called them, and the last user
    message (the current input) is always kept. Each message is measured once: O(n)."""
    sizes = [message_chars(m) for m in chat]
    budget_chars = budget_tokens * chars_per_token
    total = sum(sizes)
    if total <= budget_chars:
        return chat
    budget_chars -= message_chars(_dropped_note(10**9))  # room for the note itself
    last_user = max((i for i, m in enumerate(chat) if m["role"] == "user" and i > 0), default=len(chat))
    cut = 1
    while cut < last_user and total > budget_chars:
        total -= sizes[cut]
        cut += 1
        while cut < last_user and chat[cut]["role"] == "tool":  # results go with their call
            total -= sizes[cut]
            cut += 1
    dropped = cut - 1
    if not dropped:
        return chat
    return [chat[0], _dropped_note(dropped), *chat[cut:]]


def _dropped_note(n: int) -> dict:
    return {"role": "user", "content": f"[{n} earlier messages were left out to fit the context.]"}


def chars_per_token(anchor: dict | None) -> float:
    """The last request's real ratio of characters to input tokens, within sane bounds."""
    if not anchor or anchor.get("input_tokens", 0) <= 0 or not anchor.get("input_chars"):
        return CHARS_PER_TOKEN
    return max(1.0, min(8.0, anchor["input_chars"] / anchor["input_tokens"]))


def system_message(prompt: str, summary: str | None) -> dict:
    """The system message; a checkpoint's summary of the older history follows the instructions."""
    if not summary:
        return {"role": "system", "content": prompt}
    return {"role": "system", "content": f"{prompt}\n\nSummary of the earlier conversation (the messages it "
                                         f"replaces are no longer shown):\n{summary}"}


def over(chars: int, ratio: float, window: int) -> bool:
    """True when a request of `chars` characters would pass THRESHOLD of a `window`-token context."""
    return chars / ratio > THRESHOLD * window


def trim_old_tool_outputs(chat: list[dict], keep_from: int) -> int:
    """Cut the tool messages before index `keep_from` to their start and end; returns the characters saved.
    Deterministic: the same chat is always trimmed the same way."""
    saved = 0
    for i in range(1, min(keep_from, len(chat))):
        m = chat[i]
        content = m.get("content") or ""
        if m["role"] == "tool" and len(content) > 3 * TRIM_KEEP:
            cut = len(content) - 2 * TRIM_KEEP
            short = f"{content[:TRIM_KEEP]}\n[... {cut} characters of an older tool output left out ...]\n" \
                    f"{content[-TRIM_KEEP:]}"
            saved += message_chars(m)
            chat[i] = dict(m, content=short)
            saved -= message_chars(chat[i])
    return saved


def build_context(system_prompt: str, messages: list[dict], current_input_id: int | None, window: int,
                  anchor: dict | None, summary: str | None = None, extra: int = 0) -> tuple[list[dict], int]:
    """The turn's starting chat and its size in characters: parts decoded (the store may hand them over as
    JSON text), rebuilt after the checkpoint's `summary`, older tool outputs trimmed when it and the `extra`
    characters every request carries (tool schemas, notes) would not fit the `window`. Pure (the same saved
    state gives the same chat); the turn runs it in a worker thread."""
    for msg in messages:
        if isinstance(msg["parts"], str):
            msg["parts"] = json.loads(msg["parts"])
    chat = build_chat(system_prompt, messages, current_input_id, tool_cap(window))
    chat[0] = system_message(system_prompt, summary)
    chars = chat_chars(chat)
    if over(chars + extra, chars_per_token(anchor), window):
        last_step = max((i for i, m in enumerate(chat) if m["role"] == "assistant"), default=len(chat))
        chars -= trim_old_tool_outputs(chat, last_step)
    return chat, chars
