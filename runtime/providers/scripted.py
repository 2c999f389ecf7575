"""ScriptedModel: a provider that plays back scripted steps, shipped for tests and demos.

    model = ScriptedModel([
        ["Let me look.", Call("read_file", {"path": "a.txt"})],   # step 1: text, then a tool call
        ["Hel", "lo", Delay(0.1), "!"],                            # step 2: three text deltas
    ])

Each step is a list of items: `str` (a text delta), `Reasoning(text)`, `Call(name, args)`,
`Delay(seconds)`, `Fail(message)` (raises ProviderError mid-stream), `StepUsage(in, out)` or `Waiting(words)`
(what the step waits for, as a local model says "Reading your message… 40%").
When the script runs out it answers "Done.". Every request it receives is kept in `requests`.
`ScriptedModel(talk_only=True)` plays a model that cannot call tools (`calls_tools`), as the bundled one.

A background job's title request (`purpose="title"`) is not part of the script: it is answered with `title`
(default None: no title, so the provisional one stays) and kept in `title_requests`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProviderError
from ..events import Usage
from .base import FINISH, REASONING, STATUS, TEXT, TOOL_CALLS, TOOL_START, USAGE, ModelRequest, ToolCallRequest


@dataclass
class Reasoning:
    text: str


@dataclass
class Call:
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    raw: str | None = None  # raw argument text, to script invalid JSON


@dataclass
class Delay:
    seconds: float


@dataclass
class Fail:
    message: str


@dataclass
class StepUsage:
    input_tokens: int
    output_tokens: int


@dataclass
class Waiting:
    words: str


class ScriptedModel:
    context_tokens = 16_000  # its context window; tests set it smaller or larger

    def __init__(self, steps: list[list[Any]] | None = None, *, id: str = "scripted", chunk_delay: float = 0.0,
                 title: str | None = None, talk_only: bool = False):
        self.id = id
        self.talk_only = talk_only
        self.steps = list(steps or [])
        self.chunk_delay = chunk_delay
        self.title = title
        self.requests: list[ModelRequest] = []
        self.title_requests: list[ModelRequest] = []
        self._calls = 0

    def add_steps(self, *steps: list[Any]) -> None:
        self.steps.extend(steps)

    async def stream(self, request: ModelRequest, *, on_queued: Callable[[str], None] | None = None
                     ) -> AsyncGenerator[tuple[Any, ...], None]:
        if request.purpose == "title":
            self.title_requests.append(request)
            if self.title:
                yield (TEXT, self.title)
            yield (FINISH, "stop")
            return
        # A snapshot: the loop keeps appending to the same message list after this step.
        self.requests.append(dataclasses.replace(request, messages=list(request.messages)))
        step = self.steps.pop(0) if self.steps else ["Done."]
        calls: list[ToolCallRequest] = []
        usage = None
        for item in step:
            if isinstance(item, str):
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
                yield (TEXT, item)
            elif isinstance(item, Reasoning):
                yield (REASONING, item.text)
            elif isinstance(item, Call):
                self._calls += 1
                call_id = item.call_id or f"call_{self._calls}"
                raw = item.raw if item.raw is not None else json.dumps(item.args)
                yield (TOOL_START, len(calls), call_id, item.name)
                try:
                    parsed = json.loads(raw)
                except json.JSONDecodeError:
                    parsed = None
                calls.append(ToolCallRequest(call_id, item.name, raw, parsed))
            elif isinstance(item, Delay):
                await asyncio.sleep(item.seconds)
            elif isinstance(item, Fail):
                raise ProviderError(item.message)
            elif isinstance(item, StepUsage):
                usage = Usage(input_tokens=item.input_tokens, output_tokens=item.output_tokens)
            elif isinstance(item, Waiting):
                yield (STATUS, item.words)
        if calls:
            yield (TOOL_CALLS, calls)
        chars = sum(len(json.dumps(m.get("content") or "")) for m in request.messages)
        yield (USAGE, usage or Usage(input_tokens=chars // 4, output_tokens=len(step)))
        yield (FINISH, "tool_calls" if calls else "stop")

    def calls_tools(self, model: str) -> bool:
        return not self.talk_only

    async def list_models(self) -> list[str]:
        return ["scripted"]

    async def aclose(self) -> None:
        pass
