"""The provider protocol: what the agent loop needs from a model server.

A provider streams one model step as plain tuples, the cheapest thing Python can build per chunk (the
stream is the hot path: 20,000 chunks a second from a fast server). Kinds:

    (TEXT, str)                         a text delta
    (REASONING, str)                    a reasoning delta
    (TOOL_START, index, call_id, name)  a tool call began (shown to the person as `pending`)
    (TOOL_CALLS, [ToolCallRequest])     the step's complete tool calls, once, at the end of the step
    (USAGE, Usage)                      token usage of the step
    (FINISH, reason)                    the model finished the step ("stop", "tool_calls", "length", ...)
    (STATUS, str)                       what the step waits for, in words for the person ("Loading model…",
                                        "Reading your message… 40%", "Waiting for the server…"), before its
                                        first token; the agent loop shows it as the turn's phase

A stream that ends without FINISH was truncated: providers raise `ProviderError` for it rather than
pretending the step finished. Cancelling the consuming task must close the underlying connection or stop
generation; providers do that in `finally`/`async with`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

TEXT = 0
REASONING = 1
TOOL_START = 2
TOOL_CALLS = 3
USAGE = 4
FINISH = 5
STATUS = 6


@dataclass(slots=True)
class ToolCallRequest:
    call_id: str
    name: str
    arguments: str  # raw JSON text as the model produced it
    args: dict[str, Any] | None = None  # parsed, or None when the JSON was invalid


@dataclass(slots=True)
class ModelRequest:
    model: str  # the model name on the provider (the part after "provider_id/")
    messages: list[dict[str, Any]]  # chat-completions shaped messages
    tools: list[dict[str, Any]] = field(default_factory=list)  # chat-completions "tools" entries
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    # None: the model decides. "required": the step must call a tool. {"type": "function", "function": {"name":
    # N}} (the chat-completions shape): it must call N (`forced_tool`), as a planning turn asks for its plan.
    tool_choice: str | dict[str, Any] | None = None
    # "turn": a step of a person's turn. Else a background job's side request, "title" or "memory" (extraction):
    # the bundled model serves turns first (providers/llama/queue.py), the scripted test model answers titles apart.
    purpose: str = "turn"


def named_choice(name: str) -> dict[str, Any]:
    """The `tool_choice` that makes a step call the tool `name`."""
    return {"type": "function", "function": {"name": name}}


def forced_tool(request: ModelRequest) -> str | None:
    """The tool the request's `tool_choice` names, or None."""
    choice = request.tool_choice
    return choice.get("function", {}).get("name") if isinstance(choice, dict) else None


def must_call(request: ModelRequest) -> bool:
    """The step must be a tool call: `tool_choice` is "required" or names a tool."""
    return request.tool_choice == "required" or forced_tool(request) is not None


# The instruction that asks to go on with an answer that was cut off (engine/agent/context.py puts it after the answer).
CONTINUE = "Continue your previous answer exactly where it stopped. Do not repeat what you already wrote."


def continuation(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str] | None:
    """(the messages before the cut-off answer, its text) when the request asks to go on with an answer that
    stopped in its text: the last message is the user's CONTINUE instruction right after an assistant message
    with text and no tool calls. A provider that can prefill (llama.cpp) renders those messages, opens the
    assistant's turn with that text and lets the model write on; others send the messages as they are."""
    if len(messages) < 2:
        return None
    answer, last = messages[-2], messages[-1]
    if last.get("role") != "user" or last.get("content") != CONTINUE:
        return None
    text = answer.get("content")
    if answer.get("role") != "assistant" or answer.get("tool_calls") or not isinstance(text, str) or not text:
        return None
    return messages[:-2], text


def outgoing_messages(messages: list[dict[str, Any]], *, empty_tool_call_content: bool) -> list[dict[str, Any]]:
    """The chat messages as a server with the `empty_tool_call_content` quirk accepts them: an assistant message
    that only calls tools carries `"content": ""` instead of null (llama.cpp's server rejects null). Only those
    messages are copied; without the quirk the list is returned as it is."""
    if not empty_tool_call_content:
        return messages
    return [
        dict(m, content="") if m.get("role") == "assistant" and m.get("content") is None and m.get("tool_calls")
        else m
        for m in messages
    ]


class Provider(Protocol):
    """`empty_tool_call_content` (optional attribute, default False): the agent loop sends tool-call-only
    assistant messages with "" content (`outgoing_messages`); set from the provider's settings entry."""

    id: str

    def stream(self, request: ModelRequest, *, on_queued: Callable[[str], None] | None = None
               ) -> AsyncGenerator[tuple, None]:
        """Stream one model step as the tuples above (an async generator: `aclose()` stops the step, as the loop
        does with one that repeats itself). A provider that must wait for a shared engine (the bundled model
        runs one generation at a time) calls `on_queued` with a sentence for the person."""
        ...

    async def list_models(self) -> list[str]:
        """Model names the server offers."""
        ...

    async def aclose(self) -> None: ...
