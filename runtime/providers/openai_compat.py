"""A provider for any OpenAI-compatible chat-completions server (Ollama, llama.cpp server, vLLM, LM Studio,
OpenAI itself). Chat completions go out on `httpx2` (the `openai` SDK's own transport) directly; the SDK's
`AsyncOpenAI` serves the model list and embeddings.

Decisions (the design contract is silent on them):
- The stream is read raw: the SDK's typed iterator builds a response object per chunk (~80 µs, most of a
  fast server's cost), so `sse.py` decodes the events (as httpx-sse, the maintained upstream of the SDK's
  private decoder, does) and `json.loads` turns each one into plain dicts that are read straight into the
  provider's tuples. Nothing is kept per chunk; tool-call fragments are collected in lists per call and joined
  once at the end.
- Since the stream is read raw, the request does not need the SDK either: importing `openai` costs ~0.6 s,
  most of a `hearth run` on a server model (tests/benchmarks/bench_first_token.py (b)), and building its request
  ~0.7 ms of every step. The request is the SDK's (the same JSON body, `Authorization: Bearer` with a dummy key
  for servers that need none, redirects followed, no retries) and an error status is said as the SDK's typed
  error was (`openai_errors.response_error`: the same body and message), before any line is read.
- `httpx2` (and `openai`, for the model list and embeddings) is imported on first use, in a worker thread, so
  neither startup nor the event loop (the Qt loop in the app) pays for it. Each client is built once per
  provider and reused; `aclose()` closes them.
- No automatic retries (the SDK's are off too, `max_retries=0`): the agent loop decides about retrying, and
  a person waiting on a dead server should hear about it at once. Timeouts are explicit: `connect_timeout`
  for connecting, `read_timeout` per gap between chunks (and for writes and the pool).
- The fault semantics are the SDK iterator's, made explicit: `data: {"error": ...}` is an error from the
  server, `[DONE]` ends the events (the rest of the body gets 0.1 s to arrive, so the connection can be
  reused), a data line that is not JSON or a chunk that is not shaped like a chat-completion chunk is a
  malformed stream, and a body that is not an event stream (an HTML page; httpx-sse, like the SSE spec,
  wants Content-Type text/event-stream) means the base URL is wrong.
- Order at the end of a step: (TOOL_CALLS, calls) if any, then (USAGE, usage) if the server sent usage (the
  last usage seen, so servers that repeat usage on every chunk are not counted twice), then
  (FINISH, reason).
- A tool call without `index` (old Ollama sends each call whole, without index) starts a new call when it
  carries an id different from the current call's, and otherwise continues the current call (index 0 at
  first). TOOL_START is yielded once per call, as soon as both its id and name are known. Arguments sent as
  a JSON object instead of a string are re-encoded.
- A stream without a finish_reason is truncated and raises `ProviderError`, also when the server sent
  `[DONE]`; a stream with no chunk at all means the server does not speak streaming chat completions.
- `temperature`, `max_tokens` and `seed` given to the constructor (settings.json's provider fields) are sent
  when a request has none of its own; unset, the server's defaults apply.
- A step starts with (STATUS, "Waiting for the server…"): what the person sees until the first token (a server
  may take seconds to load a model or read a long prompt before it sends anything).
- Errors are said in openai_errors.py: each names the server and the model and what to check.
- `asyncio.CancelledError` (and GeneratorExit) pass through untouched; `async with` on the SDK response
  closes the HTTP connection on cancellation (Stop), on an error and when the consumer stops early.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
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
from runtime.providers.openai_errors import (
    malformed,
    model_words,
    not_streaming,
    response_error,
    server_text,
    status_error,
    stream_error,
)
from runtime.providers.sse import NotEventStream, event_data

WAITING_FOR_SERVER = "Waiting for the server…"  # until its first token: it may be loading the model
_DUMMY_KEY = "not-needed"  # AsyncOpenAI refuses to construct without a key; local servers ignore it
_DRAIN_SECONDS = 0.1  # what follows [DONE] may take this long before the connection is dropped (as in the SDK)
# A chunk whose JSON is not shaped like a chat-completion chunk fails with one of these while being read.
_SHAPE_ERRORS = (AttributeError, KeyError, IndexError, TypeError)


_httpx2: Any = None  # once imported
_sdk: Any = None  # openai, once imported


def _import_http() -> Any:
    global _httpx2
    import httpx2

    _httpx2 = httpx2
    return httpx2


def _import_sdk() -> Any:
    global _sdk
    # Legacy httpx before openai: the SDK's error handlers look httpx up in sys.modules and fail if they find it
    # half-imported by this thread while an SDK call fails on the loop.
    import httpx  # noqa: F401

    _import_http()
    import openai

    _sdk = openai
    return openai


class OpenAICompatProvider:
    """Streams chat completions from an OpenAI-compatible server at `base_url` (usually ending in /v1)."""

    empty_tool_call_content = False  # the server's quirk (providers/base.py), from its settings entry

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
        context_window: int | dict[str, int] | None = None,
    ):
        self.id = id
        self._context_setting = context_window  # settings.json's figure(s) win over what a server says
        self._windows: dict[str, tuple[int, str] | None] = {}
        # Sampling defaults sent when a request has none of its own (None: the server's defaults).
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key or _DUMMY_KEY
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_retries = max_retries
        self._http: Any = None  # httpx2.AsyncClient: chat completions and the context window's questions
        self._http_lock = asyncio.Lock()
        self._client: Any = None  # openai.AsyncOpenAI: the model list and embeddings
        self._openai: Any = None
        self._timeouts: tuple[type[BaseException], ...] = ()
        self._transport_errors: tuple[type[BaseException], ...] = ()

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAICompatProvider(id={self.id!r}, base_url={self.base_url!r})"

    def _know_errors(self, httpx2: Any) -> None:
        self._timeouts = (httpx2.TimeoutException, *((self._openai.APITimeoutError,) if self._openai else ()))
        self._transport_errors = (httpx2.RequestError, OSError)

    async def _get_http(self) -> Any:
        """The client of the chat requests (and of the context window's questions), built once, in a worker
        thread: importing httpx2 and making its SSL context take tens of milliseconds."""
        if self._http is None:
            async with self._http_lock:
                if self._http is None:
                    self._http = await asyncio.to_thread(self._new_http)
        return self._http

    def _new_http(self) -> Any:
        """A client as the SDK would have built it: the same timeouts, redirects followed."""
        httpx2 = _httpx2 or _import_http()
        self._know_errors(httpx2)
        return httpx2.AsyncClient(
            timeout=httpx2.Timeout(self._read_timeout, connect=self._connect_timeout), follow_redirects=True,
            headers={"Authorization": f"Bearer {self._api_key}", "Accept": "application/json"})

    async def _get_client(self) -> Any:
        client = self._client
        if client is not None:
            return client
        openai = _sdk or await asyncio.to_thread(_import_sdk)
        if self._client is None:  # another caller may have built it while we imported
            self._openai = openai
            self._know_errors(_httpx2)
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key,
                max_retries=self._max_retries,
                timeout=openai.Timeout(self._read_timeout, connect=self._connect_timeout),
            )
        return self._client

    async def aclose(self) -> None:
        http, self._http = self._http, None
        client, self._client = self._client, None
        if http is not None:
            await http.aclose()
        if client is not None:
            await client.close()

    async def context_window(self, model: str) -> tuple[int, str] | None:
        """(tokens, where the figure came from) for `model`: settings.json, else the server (asked once per
        model, see context_window.py), else None."""
        setting = self._context_setting
        if isinstance(setting, dict) and model in setting:
            return setting[model], "settings"
        if isinstance(setting, int):
            return setting, "settings"
        if model not in self._windows:
            from .context_window import discover

            # On the chat requests' client: the turn asks this beside its setup, so the client is ready (and
            # connected) when the first request goes out.
            self._windows[model] = await discover(await self._get_http(), self.base_url, model)
        return self._windows[model]

    async def list_models(self) -> list[str]:
        client = await self._get_client()
        try:
            page = await client.models.list()
            return [m.id for m in page.data]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._map_error(exc, None) from exc

    async def embed(self, model: str, texts: list[str]) -> list[list[float]]:
        """Embedding vectors of `texts` (`/embeddings`), in order; floats on the wire, which every server speaks."""
        client = await self._get_client()
        try:
            result = await client.embeddings.create(model=model, input=texts, encoding_format="float")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._map_error(exc, model) from exc
        return [d.embedding for d in sorted(result.data, key=lambda d: d.index)]

    def _request_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = request.tools
            if request.tool_choice is not None:
                kwargs["tool_choice"] = request.tool_choice
        max_tokens = self.max_tokens if request.max_tokens is None else request.max_tokens
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        temperature = self.temperature if request.temperature is None else request.temperature
        if temperature is not None:
            kwargs["temperature"] = temperature
        seed = self.seed if request.seed is None else request.seed
        if seed is not None:
            kwargs["seed"] = seed
        return kwargs

    async def stream(self, request: ModelRequest, *, on_queued: Callable[[str], None] | None = None
                     ) -> AsyncGenerator[tuple[Any, ...], None]:
        # `on_queued` is unused: a server queues requests itself.
        yield (STATUS, WAITING_FOR_SERVER)
        http = await self._get_http()
        kwargs = self._request_kwargs(request)
        loads = json.loads
        finish = None
        usage = None
        seen = False  # a chunk arrived
        calls: list[list[Any]] = []  # per tool call: [call_id, name, [argument fragments], started]
        streaming = False  # set once the server has answered with a success status
        try:
            async with (
                http.stream("POST", f"{self.base_url}/chat/completions", json=kwargs) as response,
                contextlib.aclosing(self._events(response, request.model)) as events,
            ):
                streaming = True
                async for data in events:
                    if data.startswith("[DONE]"):
                        await _drain(events)
                        break
                    chunk = loads(data)
                    seen = True
                    try:
                        error = chunk.get("error")
                        if error:
                            raise self._stream_error(error, request.model)
                        choices = chunk.get("choices")
                        if choices:
                            choice = choices[0]
                            delta = choice.get("delta")
                            if delta:
                                text = delta.get("content")
                                if text:
                                    yield (TEXT, text)
                                r = delta.get("reasoning_content") or delta.get("reasoning")
                                if r and isinstance(r, str):
                                    yield (REASONING, r)
                                tool_calls = delta.get("tool_calls")
                                if tool_calls:
                                    for tc in tool_calls:
                                        started = _add_tool_fragment(calls, tc)
                                        if started is not None:
                                            yield started
                            if choice.get("finish_reason"):
                                finish = choice["finish_reason"]
                        u = chunk.get("usage")
                        if u is not None:
                            usage = u
                    except _SHAPE_ERRORS as exc:
                        raise self._malformed(
                            request.model, "a chunk is not shaped like a chat-completion chunk"
                        ) from exc
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._map_error(exc, request.model, streaming=streaming) from exc

        if finish is None:
            if not seen:
                raise self._not_streaming(request.model)
            raise ProviderError(
                f"The model server at {self.base_url} closed the stream before the answer was complete "
                f'(model "{request.model}").'
            )
        if calls:
            out = []
            for i, (call_id, name, parts, _started) in enumerate(calls):
                raw = "".join(parts)
                args: Any = None  # None: the arguments are not a JSON object
                if not raw.strip():
                    args = {}
                else:
                    with contextlib.suppress(ValueError):
                        args = json.loads(raw)
                    if not isinstance(args, dict):
                        args = None
                out.append(ToolCallRequest(call_id or f"call_{i}", name or "", raw, args))
            yield (TOOL_CALLS, out)
        step_usage = _usage(usage)
        if step_usage is not None:
            yield (USAGE, step_usage)
        yield (FINISH, finish)

    async def _events(self, response: Any, model: str) -> AsyncGenerator[str, None]:
        """The response's server-sent events; an error status is raised first, as the SDK raised its typed
        error before any line was read."""
        if response.status_code >= 400:
            await response.aread()
            raise response_error(self.base_url, response.status_code, response.text, model)
        async for data in event_data(response):
            yield data

    # -- errors --------------------------------------------------------------------------------------------

    def _map_error(self, exc: BaseException, model: str | None, *, streaming: bool = False) -> ProviderError:
        """A ProviderError a person understands, naming the server and the model. `streaming`: the response
        had begun, so a broken connection means a cut-off answer rather than an unreachable server."""
        openai = self._openai
        url = self.base_url
        what = model_words(model)
        if isinstance(exc, ProviderError):
            return exc
        if isinstance(exc, self._timeouts):
            return ProviderError(
                f"The model server at {url} timed out ({what}): no answer within {self._read_timeout:g} s.",
                retryable=True,
            )
        if isinstance(exc, json.JSONDecodeError):
            return self._malformed(model, f"a data line is not JSON ({exc})")
        if isinstance(exc, NotEventStream):
            return self._not_streaming(model)
        if streaming and isinstance(exc, self._transport_errors):
            detail = f": {exc}" if str(exc) else ""
            return ProviderError(
                f"The model server at {url} closed the stream before the answer was complete ({what}){detail}.",
                retryable=True,
            )
        if isinstance(exc, self._transport_errors) or (openai and isinstance(exc, openai.APIConnectionError)):
            return ProviderError(f"Cannot reach the model server at {url}. Is it running?", retryable=True)
        if openai and isinstance(exc, openai.APIStatusError):
            return status_error(url, exc.status_code, server_text(exc.body, exc.message), model)
        return ProviderError(f"The model server at {url} failed ({what}): {type(exc).__name__}: {exc}")

    def _stream_error(self, error: Any, model: str) -> ProviderError:
        return stream_error(self.base_url, error, model)

    def _malformed(self, model: str | None, reason: str) -> ProviderError:
        return malformed(self.base_url, model, reason)

    def _not_streaming(self, model: str | None) -> ProviderError:
        return not_streaming(self.base_url, model)


async def _drain(events: AsyncIterator[Any]) -> None:
    """Read what follows [DONE], normally only the end of the chunked body, so that the connection goes back to
    the pool; a server that keeps the body open gets `_DRAIN_SECONDS`, then the connection is dropped."""
    with contextlib.suppress(Exception):  # the answer is complete: a failure here must not turn it into an error
        async with asyncio.timeout(_DRAIN_SECONDS):
            async for _sse in events:
                pass


def _add_tool_fragment(calls: list[list[Any]], tc: dict[str, Any]) -> tuple[int, int, str, str] | None:
    """Fold one tool-call delta into `calls`; return a TOOL_START tuple when a call becomes known."""
    idx = tc.get("index")
    call_id = tc.get("id")
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
    fn = tc.get("function")
    if fn:
        name = fn.get("name")
        if name and not call[1]:
            call[1] = name
        arguments = fn.get("arguments")
        if arguments:
            call[2].append(arguments if isinstance(arguments, str) else json.dumps(arguments))
    if not call[3] and call[1]:
        call[3] = True
        return (TOOL_START, idx, call[0] or f"call_{idx}", call[1])
    return None


def _usage(raw: Any) -> Usage | None:
    """The step's token usage, or None when the server sent none (or something that is not usage)."""
    if not isinstance(raw, dict):
        return None
    prompt, completion = raw.get("prompt_tokens") or 0, raw.get("completion_tokens") or 0
    if not (isinstance(prompt, int) and isinstance(completion, int)):
        return None
    return Usage(input_tokens=prompt, output_tokens=completion)
