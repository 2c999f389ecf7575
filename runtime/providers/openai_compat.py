"""A provider for any OpenAI-compatible chat-completions server (Ollama, llama.cpp server, vLLM, LM Studio,
OpenAI itself), on the `openai` SDK's `AsyncOpenAI`.

Decisions (the design contract is silent on them):
- `openai` is imported on first use, in a worker thread, so neither startup nor the event loop (the Qt loop in
  the app) pays its 0.6 s import. The client is built once per provider and reused; `aclose()` closes it.
- The SDK's automatic retries are off by default (`max_retries=0`): the agent loop decides about retrying, and
  a person waiting on a dead server should hear about it at once. Timeouts are explicit: `connect_timeout`
  for connecting, `read_timeout` per gap between chunks (and for writes and the pool).
- The hot path is one `async for` over the SDK stream with a handful of attribute reads per chunk and one
  tuple per delta; nothing is kept per chunk. Tool-call fragments are collected in lists per call and joined
  once at the end.
- Order at the end of a step: (TOOL_CALLS, calls) if any, then (USAGE, usage) if the server sent usage (the
  last usage seen, so servers that repeat usage on every chunk are not counted twice), then
  (FINISH, reason).
- A tool call without `index` (old Ollama sends each call whole, without index) starts a new call when it
  carries an id different from the current call's, and otherwise continues the current call (index 0 at
  first). TOOL_START is yielded once per call, as soon as both its id and name are known.
- A stream without a finish_reason is truncated and raises `ProviderError`, also when the server sent
  `[DONE]`; a stream with no chunk at all means the server does not speak streaming chat completions.
- `temperature`, `max_tokens` and `seed` given to the constructor (settings.json's provider fields) are sent
  when a request has none of its own; unset, the server's defaults apply.
- `asyncio.CancelledError` (and GeneratorExit) pass through untouched; `async with` on the SDK stream closes
  the HTTP connection on cancellation, on an error and when the consumer stops early.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

from runtime.errors import ProviderError
from runtime.events import Usage
from runtime.providers.base import (
    FINISH,
    REASONING,
    TEXT,
    TOOL_CALLS,
    TOOL_START,
    USAGE,
    ModelRequest,
    ToolCallRequest,
)

_DUMMY_KEY = "not-needed"  # AsyncOpenAI refuses to construct without a key; local servers ignore it


def _import_openai() -> Any:
    import openai

    return openai


class OpenAICompatProvider:
    """Streams chat completions from an OpenAI-compatible server at `base_url` (usually ending in /v1)."""

    def __init__(
        self,
        id: str,
        base_url: str,
        api_key: str | None = None,
        *,
        connect_timeout: float = 5.0,
        read_timeout: float = 120.0,
        max_retries: int = 0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ):
        self.id = id
        # Sampling defaults sent when a request has none of its own (None: the server's defaults).
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or _DUMMY_KEY
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_retries = max_retries
        self._client: Any = None
        self._openai: Any = None

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAICompatProvider(id={self.id!r}, base_url={self.base_url!r})"

    async def _get_client(self) -> Any:
        client = self._client
        if client is not None:
            return client
        openai = sys.modules.get("openai")
        if openai is None or not hasattr(openai, "AsyncOpenAI"):  # absent, or still importing elsewhere
            openai = await asyncio.to_thread(_import_openai)
        if self._client is None:  # another caller may have built it while we imported
            self._openai = openai
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key,
                max_retries=self._max_retries,
                timeout=openai.Timeout(self._read_timeout, connect=self._connect_timeout),
            )
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def list_models(self) -> list[str]:
        client = await self._get_client()
        try:
            page = await client.models.list()
            return [m.id for m in page.data]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._map_error(exc, None) from exc

    async def stream(self, request: ModelRequest, *, on_queued=None) -> AsyncIterator[tuple]:
        # `on_queued` is unused: a server queues requests itself.
        client = await self._get_client()
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = request.tools
        max_tokens = self.max_tokens if request.max_tokens is None else request.max_tokens
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        temperature = self.temperature if request.temperature is None else request.temperature
        if temperature is not None:
            kwargs["temperature"] = temperature
        seed = self.seed if request.seed is None else request.seed
        if seed is not None:
            kwargs["seed"] = seed

        try:
            sdk_stream = await client.chat.completions.create(**kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._map_error(exc, request.model) from exc

        finish = None
        usage = None
        chunk = None
        calls: list[list[Any]] = []  # per tool call: [call_id, name, [argument fragments], started]
        try:
            async with sdk_stream:
                async for chunk in sdk_stream:
                    choices = chunk.choices
                    if choices:
                        choice = choices[0]
                        delta = choice.delta
                        text = delta.content
                        if text:
                            yield (TEXT, text)
                        extra = delta.model_extra
                        if extra:
                            r = extra.get("reasoning_content") or extra.get("reasoning")
                            if r and isinstance(r, str):
                                yield (REASONING, r)
                        if delta.tool_calls:
                            for tc in delta.tool_calls:
                                started = _add_tool_fragment(calls, tc)
                                if started is not None:
                                    yield started
                        if choice.finish_reason:
                            finish = choice.finish_reason
                    u = chunk.usage
                    if u is not None:
                        usage = u
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._map_error(exc, request.model, streaming=True) from exc

        if finish is None:
            if chunk is None:
                raise ProviderError(
                    f"The server at {self.base_url} did not answer in the streaming chat-completions "
                    f'protocol (it sent no chunks for model "{request.model}"). Check the base URL: '
                    "for OpenAI-compatible servers it usually ends in /v1."
                )
            raise ProviderError(
                f"The model server at {self.base_url} closed the stream before the answer was complete "
                f'(model "{request.model}").'
            )
        if calls:
            out = []
            for i, (call_id, name, parts, _started) in enumerate(calls):
                raw = "".join(parts)
                args: dict[str, Any] | None
                if raw.strip():
                    try:
                        args = json.loads(raw)
                    except ValueError:
                        args = None
                    else:
                        if not isinstance(args, dict):
                            args = None
                else:
                    args = {}
                out.append(ToolCallRequest(call_id or f"call_{i}", name or "", raw, args))
            yield (TOOL_CALLS, out)
        if usage is not None:
            yield (
                USAGE,
                Usage(input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0),
            )
        yield (FINISH, finish)

    # -- errors --------------------------------------------------------------------------------------------

    def _map_error(self, exc: BaseException, model: str | None, *, streaming: bool = False) -> ProviderError:
        """A ProviderError a person understands, naming the server and the model."""
        openai = self._openai
        url = self.base_url
        what = f'model "{model}"' if model else "the model list"
        if isinstance(exc, ProviderError):
            return exc
        if openai is not None:
            if isinstance(exc, openai.APITimeoutError):
                return ProviderError(
                    f"The model server at {url} timed out ({what}): no answer within {self._read_timeout:g} s.",
                    retryable=True,
                )
            if isinstance(exc, openai.APIConnectionError):
                if streaming:  # the SDK wraps transport errors while reading the body too
                    cause = exc.__cause__
                    detail = f": {cause}" if cause is not None and str(cause) else ""
                    return ProviderError(
                        f"The model server at {url} closed the stream before the answer was complete ({what}){detail}.",
                        retryable=True,
                    )
                return ProviderError(f"Cannot reach the model server at {url}. Is it running?", retryable=True)
            if isinstance(exc, openai.APIStatusError):
                return self._status_error(exc.status_code, _server_message(exc), model)
            if isinstance(exc, openai.APIError):  # `data: {"error": ...}` inside a stream
                return ProviderError(
                    f"The model server at {url} sent an error in the stream ({what}): {_server_message(exc) or exc}"
                )
        if isinstance(exc, json.JSONDecodeError):
            return ProviderError(
                f"The model server at {url} sent a malformed stream ({what}): a data line is not JSON ({exc})."
            )
        name = type(exc).__name__
        if "Timeout" in name:  # a transport timeout the SDK did not wrap (mid-stream)
            return ProviderError(
                f"The model server at {url} timed out ({what}): no data within {self._read_timeout:g} s.",
                retryable=True,
            )
        if streaming and ("Protocol" in name or isinstance(exc, ConnectionError) or "Read" in name):
            return ProviderError(
                f"The model server at {url} closed the stream before the answer was complete ({what}): {exc or name}.",
                retryable=True,
            )
        return ProviderError(f"The model server at {url} failed ({what}): {name}: {exc}")

    def _status_error(self, status: int, detail: str, model: str | None) -> ProviderError:
        url = self.base_url
        tail = f" The server said: {detail}" if detail else ""
        if status in (401, 403):
            msg = f"The model server at {url} rejected the API key (HTTP {status}). Check the key in Settings."
            return ProviderError(msg + tail, status_code=status)
        if status == 404:
            if model:
                msg = (
                    f'Model "{model}" was not found on the server at {url} (HTTP 404). Check the model name, '
                    "or whether the base URL is right (it usually ends in /v1)."
                )
            else:
                msg = f"The server at {url} has no model list (HTTP 404). Check the base URL (it usually ends in /v1)."
            return ProviderError(msg + tail, status_code=status)
        if status == 429:
            return ProviderError(
                f"The model server at {url} is rate limiting requests (HTTP 429). Wait a moment and try again." + tail,
                status_code=status,
                retryable=True,
            )
        if status >= 500:
            return ProviderError(
                f"The model server at {url} had a server error (HTTP {status}).{tail}",
                status_code=status,
                retryable=True,
            )
        return ProviderError(
            f"The model server at {url} refused the request (HTTP {status}).{tail}", status_code=status
        )


def _add_tool_fragment(calls: list[list[Any]], tc: Any) -> tuple | None:
    """Fold one tool-call delta into `calls`; return a TOOL_START tuple when a call becomes known."""
    idx = tc.index
    call_id = tc.id
    if idx is None:  # old Ollama: no index; a new id starts a new call, otherwise continue the last one
        if not calls or (call_id and calls[-1][0] and call_id != calls[-1][0]):
            idx = len(calls)
        else:
            idx = len(calls) - 1
    while len(calls) <= idx:
        calls.append([None, None, [], False])
    call = calls[idx]
    if call_id and not call[0]:
        call[0] = call_id
    fn = tc.function
    if fn is not None:
        if fn.name and not call[1]:
            call[1] = fn.name
        if fn.arguments:
            call[2].append(fn.arguments)
    if not call[3] and call[1]:
        call[3] = True
        return (TOOL_START, idx, call[0] or f"call_{idx}", call[1])
    return None


def _server_message(exc: Any) -> str:
    """The server's own error text, short, if it sent one."""
    body = getattr(exc, "body", None)
    msg = None
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg is None and isinstance(body.get("message"), str):
            msg = body["message"]
    elif isinstance(body, str):
        msg = body
    if msg is None:
        msg = getattr(exc, "message", None)
    if not msg:
        return ""
    msg = " ".join(str(msg).split())
    return msg[:300] + ("…" if len(msg) > 300 else "")
