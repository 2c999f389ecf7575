"""Rebuild a turn's model input from raw saved messages.

Nothing but the messages table (plus the system prompt and the usage anchor) feeds the model, so a task
continued after a crash or a restart sees exactly what was confirmed. Rules:
- an assistant message is split by `step`: each step becomes an assistant message (text + tool_calls)
  followed by one `tool` message per call;
- a call's result comes from the latest part with its `call_id` (an approval or an answer given in a later
  turn completes the call there); a call that never got a result is explained instead, so the model never
  sees a dangling tool call;
- an interrupted side-effecting call tells the model to check the actual effect before retrying;
- queued inputs are left out until their turn starts; answers to questions/approvals are carried by the
  tool results, not repeated as user text.
Compaction: when the estimated size exceeds the budget, the oldest messages are dropped (never the
current input) and a note says how many. The estimate is chars/4, calibrated by the last turn's real
input token count (the usage anchor) when there is one.
"""

from __future__ import annotations

import json
from typing import Any

from ..parts import OUTCOME_UNKNOWN

CHARS_PER_TOKEN = 4.0


def _tool_result(part: dict) -> str:
    state = part.get("state")
    result = part.get("result")
    if state == "done":
        return result if result is not None else ""
    if state == "error":
        return f"Error: {result}"
    if state == "denied":
        return result or "The person denied this tool call."
    if state == "interrupted":
        if part.get("note") == OUTCOME_UNKNOWN:
            return "Interrupted while running: outcome unknown. Check the actual effect before retrying."
        return "Interrupted before it ran: it had no effect."
    if part.get("awaiting"):
        return "Not run: the person has not answered yet."
    return "Not run."


def _user_content(parts: list[dict]) -> str | None:
    texts = [p["text"] for p in parts if p.get("type") == "text" and p.get("text")]
    files = [p["name"] for p in parts if p.get("type") == "attachment"]
    if files:
        texts.append("Attached files, now in the workspace: " + ", ".join(files))
    return "\n\n".join(texts) if texts else None


def build_chat(system_prompt: str, messages: list[dict], current_input_id: int | None) -> list[dict]:
    latest: dict[str, dict] = {}
    for msg in messages:
        for part in msg["parts"]:
            if part.get("type") == "tool_call":
                latest[part["call_id"]] = part

    chat: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    emitted: set[str] = set()
    for msg in messages:
        if msg["status"] == "queued" and msg["id"] != current_input_id:
            continue
        if msg["role"] == "user":
            content = _user_content(msg["parts"])
            if content is not None:
                chat.append({"role": "user", "content": content})
            continue
        steps: dict[int, list[dict]] = {}
        for part in msg["parts"]:
            steps.setdefault(part.get("step", 0), []).append(part)
        for parts in steps.values():
            text = "".join(p.get("text", "") for p in parts if p.get("type") == "text")
            calls = [p for p in parts if p.get("type") == "tool_call" and p["call_id"] not in emitted]
            if not text and not calls:
                continue
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = [
                    {
                        "id": p["call_id"],
                        "type": "function",
                        "function": {"name": p["name"], "arguments": json.dumps(p.get("args") or {})},
                    }
                    for p in calls
                ]
            chat.append(entry)
            for p in calls:
                emitted.add(p["call_id"])
                result = _tool_result(latest[p["call_id"]])
                chat.append({"role": "tool", "tool_call_id": p["call_id"], "content": result})
    return chat


def estimate_tokens(chat: list[dict], chars_per_token: float = CHARS_PER_TOKEN) -> int:
    return int(sum(len(json.dumps(m)) for m in chat) / chars_per_token)


def compact(chat: list[dict], budget_tokens: int, chars_per_token: float = CHARS_PER_TOKEN) -> list[dict]:
    """Drop the oldest messages after the system prompt until the estimate fits the budget.

    Tool messages are dropped together with the assistant message that called them, and the last user
    message (the current input) is always kept."""
    if estimate_tokens(chat, chars_per_token) <= budget_tokens:
        return chat
    head, body = chat[:1], chat[1:]
    last_user = max((i for i, m in enumerate(body) if m["role"] == "user"), default=len(body))
    dropped = 0
    while body and last_user > 0 and estimate_tokens(head + body, chars_per_token) > budget_tokens:
        body.pop(0)
        dropped += 1
        last_user -= 1
        while body and body[0]["role"] == "tool" and last_user > 0:
            body.pop(0)
            dropped += 1
            last_user -= 1
    note = {"role": "user", "content": f"[{dropped} earlier messages were left out to fit the context.]"}
    return [*head, note, *body] if dropped else head + body


def chars_per_token(anchor: dict | None) -> float:
    """The last turn's real ratio of request characters to input tokens, within sane bounds."""
    if not anchor or anchor.get("input_tokens", 0) <= 0 or not anchor.get("input_chars"):
        return CHARS_PER_TOKEN
    return max(1.0, min(8.0, anchor["input_chars"] / anchor["input_tokens"]))
