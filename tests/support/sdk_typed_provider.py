"""The previous way OpenAICompatProvider read a stream, on the `openai` SDK's typed iterator (one
`ChatCompletionChunk` object per chunk), kept as the reference the raw-SSE path must match: the parity tests
and benchmark (c) of issue 12 compare text, tuples and error texts side by side.

`SdkTypedProvider` is the real provider with `stream()` and the error mapping of that version (commit c7556c5)
put back; requests, auth, timeouts and the HTTP status messages are shared with the real provider.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from runtime.errors import ProviderError
from runtime.events import Usage
from runtime.providers.base import (
    FINISH,
    REASONING,
    STATUS,
    TEXT,
    TOOL_CALLS,
    TOOL_START,
    USAGE,
    ModelRequest,
    ToolCallRequest,
)
from runtime.providers.openai_compat import WAITING_FOR_SERVER, OpenAICompatProvider
from runtime.providers.openai_errors import server_text
from tests.support.openai_server import Reply

MSGS = [{"role": "user", "content": "hi"}]
# The cases both paths are compared on (with read_timeout=0.5 for the stall and the unanswered request).
FAULTS = {
    "text and usage": Reply(chunks=["Hel", "lo", "", " world"], usage=(12, 3)),
    "length, no usage": Reply(chunks=["a"], finish="length", usage=None),
    "malformed line": Reply(chunks=["a", "b", "c"], malformed_after=2),
    "malformed at the end": Reply(chunks=["a"], malformed_after=1),
    "error event": Reply(chunks=["partial"], error_event="the model crashed"),
    "closed early": Reply(chunks=["half an"], close_early=True),
    "closed early, connection close": Reply(chunks=["half an"], close_early=True, connection_close=True),
    "stall": Reply(chunks=["a", "b", "c"], stall_after=2),
    "no answer": Reply(hang=True),
    "html page": Reply(html=True),
    "no finish": Reply(chunks=["a"], finish=None),
    "tool calls": Reply(
        chunks=["x"],
        tool_calls=[("c1", "read_file", {"path": "a"}), ("c2", "now", ""), ("c3", "bad", '{"x')],
        finish="tool_calls",
        fragment=3,
    ),
    "tool calls without index": Reply(
        chunks=[], tool_calls=[("c1", "f", {"p": 1}), ("c2", "g", {"q": 2})], finish="tool_calls", omit_index=True
    ),
    "CRLF line ends, 6,000 events": Reply(chunks=["a", "bc"] * 3000, line_end="\r\n"),
    "CR line ends, 6,000 events": Reply(chunks=["a", "bc"] * 3000, line_end="\r"),
    "keep-alive comments": Reply(chunks=["a", "b"], comments=True),
    "reasoning_content": Reply(reasoning=["th", "ink"], chunks=["a"]),
    "reasoning": Reply(reasoning=["th", "ink"], chunks=["a"], reasoning_field="reasoning"),
    "HTTP 401": Reply(status=401),
    "HTTP 404": Reply(status=404, error_body="no such model"),
    "HTTP 500": Reply(status=500, error_body="CUDA out of memory"),
}


async def outcome(provider, server, reply: Reply):
    """(tuples, (error text, status, retryable) or None) of one stream."""
    server.script(reply)
    events, error = [], None
    try:
        async for ev in provider.stream(ModelRequest(model="m", messages=MSGS)):
            events.append(ev)
    except ProviderError as exc:
        error = (str(exc), exc.status_code, exc.retryable)
    return events, error


class SdkTypedProvider(OpenAICompatProvider):
    """OpenAICompatProvider reading the stream with the SDK's typed iterator, as it did before issue 12."""

    async def stream(self, request: ModelRequest, *, on_queued=None) -> AsyncIterator[tuple]:
        yield (STATUS, WAITING_FOR_SERVER)  # the same first item as the real provider's (not an SDK matter)
        client = await self._get_client()
        try:
            sdk_stream = await client.chat.completions.create(**self._request_kwargs(request))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._map_error(exc, request.model) from exc
        finish = None
        usage = None
        chunk = None
        calls: list[list[Any]] = []
        try:
            async with sdk_stream:
                async for chunk in sdk_stream:
                    choices = chunk.choices
                    if choices:
                        choice = choices[0]
                        delta = choice.delta
                        if delta.content:
                            yield (TEXT, delta.content)
                        extra = delta.model_extra
                        if extra:
                            r = extra.get("reasoning_content") or extra.get("reasoning")
                            if r and isinstance(r, str):
                                yield (REASONING, r)
                        for tc in delta.tool_calls or ():
                            started = _add_typed_fragment(calls, tc)
                            if started is not None:
                                yield started
                        if choice.finish_reason:
                            finish = choice.finish_reason
                    if chunk.usage is not None:
                        usage = chunk.usage
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._map_error(exc, request.model, streaming=True) from exc
        if finish is None:
            if chunk is None:
                raise self._not_streaming(request.model)
            raise ProviderError(
                f"The model server at {self.base_url} closed the stream before the answer was complete "
                f'(model "{request.model}").'
            )
        if calls:
            out = []
            for i, (call_id, name, parts, _started) in enumerate(calls):
                raw = "".join(parts)
                try:
                    args = json.loads(raw) if raw.strip() else {}
                except ValueError:
                    args = None
                out.append(
                    ToolCallRequest(call_id or f"call_{i}", name or "", raw, args if isinstance(args, dict) else None)
                )
            yield (TOOL_CALLS, out)
        if usage is not None:
            yield (USAGE, Usage(input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0))
        yield (FINISH, finish)

    def _map_error(self, exc: BaseException, model: str | None, *, streaming: bool = False) -> ProviderError:
        """That version's mapping of the SDK's wrapped stream errors; the rest is the real provider's."""
        openai = self._openai
        what = f'model "{model}"' if model else "the model list"
        url = self.base_url
        if streaming and isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
            cause = exc.__cause__
            detail = f": {cause}" if cause is not None and str(cause) else ""
            return ProviderError(
                f"The model server at {url} closed the stream before the answer was complete ({what}){detail}.",
                retryable=True,
            )
        if isinstance(exc, openai.APIError) and not isinstance(exc, openai.APIStatusError | openai.APIConnectionError):
            detail = server_text(exc.body, exc.message) or exc
            return ProviderError(f"The model server at {url} sent an error in the stream ({what}): {detail}")
        return super()._map_error(exc, model, streaming=streaming)


def _add_typed_fragment(calls: list[list[Any]], tc: Any) -> tuple | None:
    """That version's tool-call folding, on the SDK's typed `ChoiceDeltaToolCall`."""
    idx = tc.index
    if idx is None:
        new_call = not calls or (tc.id and calls[-1][0] and tc.id != calls[-1][0])
        idx = len(calls) if new_call else len(calls) - 1
    while len(calls) <= idx:
        calls.append([None, None, [], False])
    call = calls[idx]
    if tc.id and not call[0]:
        call[0] = tc.id
    if tc.function is not None:
        if tc.function.name and not call[1]:
            call[1] = tc.function.name
        if tc.function.arguments:
            call[2].append(tc.function.arguments)
    if not call[3] and call[1]:
        call[3] = True
        return (TOOL_START, idx, call[0] or f"call_{idx}", call[1])
    return None
