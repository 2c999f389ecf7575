"""A real OpenAI-compatible chat-completions server for tests and benchmarks, on plain asyncio streams.

It speaks enough HTTP/1.1 for the `openai` SDK (and curl): keep-alive, `Transfer-Encoding: chunked` (default)
or `Connection: close` bodies, `POST /v1/chat/completions` (streaming SSE, or a plain JSON completion when the
request has no `"stream": true`), `GET /v1/models`, `POST /v1/embeddings` when given an `embed` function
(`OpenAIServer(embed=trigram_vector)`: a vector per input, as floats or base64 as the request asks; without one
the route is unknown, as on a server that has no embeddings), and OpenAI-shaped JSON error bodies.

Each request pops the next scripted `Reply` (`server.script(...)`), or uses `server.default` (answers "ok").
It is fast: the whole SSE body is encoded up front and written in 64 KiB HTTP chunks, so 20,000 chunks go
out in a few tens of milliseconds; only replies with a per-chunk `delay` are written chunk by chunk.

Use it three ways:

    async with OpenAIServer() as server:          # on the test's own event loop
        server.script(Reply(chunks=["Hel", "lo"]))
        ... OpenAICompatProvider("t", server.base_url) ...

    with run_in_thread() as server: ...           # own loop in a background thread (sync tests, benchmarks)

    python -m tests.support.openai_server --port 0 --chunks 20000   # separate process; prints "READY <url>"
                                                                    # (a 4-character counter per chunk)

A title request (runtime/engine/titles.py's background job, told by its system prompt) is answered with `title`
(default "": no title) and kept in `title_requests` only, so it neither uses up the script nor shows in what
the server records about the conversation.

What it records: `requests` (the parsed JSON body of every request, None for bodiless ones such as
`GET /v1/models`, in order), `first_byte_times` (time.perf_counter() when each request line arrived),
`log` (a `Request` with method, path, headers, body per request), `disconnects` (indices of requests
whose client went away before the reply was complete: cancellation, timeouts) and `connections` (TCP
connections accepted).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import json
import math
import re
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from runtime.engine.titles import PROMPT as TITLE_PROMPT

_BATCH = 64 * 1024

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}

_ERRORS = {
    400: ("invalid_request_error", "Bad request."),
    401: ("invalid_request_error", "Incorrect API key provided."),
    403: ("invalid_request_error", "You are not allowed to use this model."),
    404: ("invalid_request_error", "The model does not exist or you do not have access to it."),
    429: ("rate_limit_error", "Rate limit reached. Please try again later."),
    500: ("server_error", "The server had an error while processing your request."),
}


@dataclass
class Reply:
    """One scripted response.

    chunks: text deltas; reasoning: reasoning deltas (sent first, as `delta.reasoning_content`, or as
    `delta.reasoning` when `reasoning_field="reasoning"`); tool_calls: (call_id, name, args) with args a
    dict, a raw JSON string, or a function of the request's JSON body giving one (a call that names what an
    earlier tool result said, such as a background command's id), its arguments sent in fragments of
    `fragment` characters (`omit_index` leaves out `index` like old Ollama); finish: the finish_reason of the
    last chunk (None: no finish chunk); usage: (prompt_tokens, completion_tokens) sent as a last `choices: []`
    chunk; delay: seconds before each chunk; status/error_body: a non-200 reply with an OpenAI-shaped (or the
    given) JSON error body; malformed_after: after that many chunks send a line that is not JSON; error_event:
    after the chunks send
    `data: {"error": {"message": error_event}}`; hang: never answer (until the client leaves); stall_after:
    send headers and that many chunks, then go silent; html: a 200 HTML page; close_early: close the
    connection after the chunks, without finish, [DONE] or the end of the chunked body;
    connection_close: send the body delimited by closing the connection instead of chunked encoding;
    ensure_ascii=False: non-ASCII text goes out as raw UTF-8 (as llama.cpp's server sends it), not as \\u escapes;
    line_end: what ends the event stream's lines ("\\r\\n" or "\\r" instead of "\\n": the SSE spec allows all three);
    comments: a `: keep-alive` comment before each event (as servers send to keep a connection open);
    wait: seconds before the first byte of the response, headers included (a server loading a model).
    """

    chunks: list[str] = field(default_factory=lambda: ["ok"])
    tool_calls: list[tuple[str, str, Any]] = field(default_factory=list)
    finish: str | None = "stop"
    usage: tuple[int, int] | None = (10, 5)
    delay: float = 0.0
    status: int = 200
    error_body: Any = None
    malformed_after: int | None = None
    error_event: str | None = None
    hang: bool = False
    stall_after: int | None = None
    html: bool = False
    close_early: bool = False
    connection_close: bool = False
    reasoning: list[str] = field(default_factory=list)
    reasoning_field: str = "reasoning_content"
    fragment: int = 7
    omit_index: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    ensure_ascii: bool = True
    line_end: str = "\n"
    comments: bool = False
    wait: float = 0.0

    @classmethod
    def many(cls, n: int, text: str = "tok ", **kw: Any) -> Reply:
        """A reply of `n` equal text chunks. In a turn, a model that writes the same thing again and again is cut
        off as repeating itself (runtime/engine/agent/repetition.py): a long answer is `counting`."""
        return cls(chunks=[text] * n, **kw)

    @classmethod
    def counting(cls, n: int, **kw: Any) -> Reply:
        """A long answer that never repeats itself: `n` chunks of 4 characters, a hex counter ("000 ", "001 ", …,
        which comes round again only after 16 KB) (benchmarks, and turns stopped while they stream)."""
        return cls(chunks=[f"{i % 4096:03x} " for i in range(n)], **kw)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    first_byte_time: float


class _Disconnected(Exception):
    pass


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class OpenAIServer:
    """An OpenAI-compatible streaming server on 127.0.0.1 (port 0: an ephemeral port)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        api_key: str | None = None,
        models: list[str] | None = None,
        default: Reply | None = None,
        model_fields: dict[str, dict] | None = None,
        routes: dict[tuple[str, str], Any] | None = None,
        embed: Callable[[str], list[float]] | None = None,
    ):
        self.host = host
        self.port = port
        self.api_key = api_key  # when set, requests without "Authorization: Bearer <api_key>" get 401
        self.models = models if models is not None else ["test-model", "other-model"]
        # Extra fields of a model's /v1/models entry (vLLM's max_model_len), and other JSON routes a server
        # kind answers ((method, path) -> body: Ollama's /api/show, llama.cpp's /props, LM Studio's models).
        self.model_fields = model_fields or {}
        self.routes = routes or {}
        self.embed = embed  # text -> vector: the server has an embeddings model
        self.default = default or Reply()
        self.title = ""
        self.title_requests: list[Any] = []
        self.requests: list[Any] = []
        self.first_byte_times: list[float] = []
        self.log: list[Request] = []
        self.disconnects: list[int] = []
        self.connections = 0  # TCP connections accepted (keep-alive reuse shows as fewer than requests)
        self._queue: deque[Reply] = deque()
        self._server: asyncio.AbstractServer | None = None
        self._handlers: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._pushback: dict[asyncio.StreamWriter, bytes] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def chat_requests(self) -> list[Any]:
        """The bodies of the chat-completion requests only (a turn also asks how long the model's context is)."""
        return [r.body for r in self.log if r.path.endswith("/chat/completions")]

    # -- lifecycle -------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> OpenAIServer:
        self.loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for w in list(self._writers):
            w.close()
        for t in list(self._handlers):
            t.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> OpenAIServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- scripting -------------------------------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one (thread-safe enough: deque appends are atomic)."""
        self._queue.extend(replies)

    def forget_script(self) -> None:
        """Drop the queued replies no request took (a turn killed before it asked)."""
        self._queue.clear()

    async def wait_for_disconnect(self, count: int = 1, timeout: float = 5.0) -> None:
        """Until `count` clients went away mid-reply (polls, so it works from any loop or thread's loop)."""
        deadline = time.monotonic() + timeout
        while len(self.disconnects) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"server saw {len(self.disconnects)} disconnects, expected {count}")
            await asyncio.sleep(0.005)

    # -- HTTP ------------------------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                line = self._pushback.pop(writer, b"") + await reader.readline()
                if not line:
                    return
                t0 = time.perf_counter()
                try:
                    method, target, _version = line.decode("latin-1").split(" ", 2)
                except ValueError:
                    await self._send_simple(writer, 400, {"error": {"message": "bad request line"}}, True)
                    return
                headers: dict[str, str] = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                raw = b""
                n = int(headers.get("content-length", "0") or 0)
                if n:
                    raw = await reader.readexactly(n)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                if _asks_title(body):
                    self.title_requests.append(body)
                    await self._answer_title(body, writer)
                    continue
                index = len(self.log)
                self.log.append(Request(method, target.split("?", 1)[0], headers, body, t0))
                self.requests.append(body)
                self.first_byte_times.append(t0)
                keep = await self._respond(index, reader, writer)
                if not keep or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, _Disconnected):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._handlers.discard(task)
            self._writers.discard(writer)
            self._pushback.pop(writer, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _send_simple(
        self, writer: asyncio.StreamWriter, status: int, obj: Any, close: bool, extra: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(obj).encode()
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
            "Content-Type: application/json",
            f"Content-Length: {len(data)}",
        ]
        if close:
            head.append("Connection: close")
        for k, v in (extra or {}).items():
            head.append(f"{k}: {v}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        await writer.drain()

    async def _respond(self, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        req = self.log[index]
        if req.path == "/_stats":  # for benchmarks with the server in another process (perf_counter is system-wide)
            await self._send_simple(writer, 200, {"first_byte_times": self.first_byte_times[:index],
                                                  "requests": [f"{r.method} {r.path}" for r in self.log[:index]]},
                                    False)
            return True
        if self.api_key is not None and req.headers.get("authorization") != f"Bearer {self.api_key}":
            await self._send_simple(writer, 401, _error_body(401, None), False)
            return True
        # A scripted fault (an error status, a hang) applies to the next request of any route; a scripted answer
        # is for chat completions only, so listing models never uses one up.
        fault = bool(self._queue) and (self._queue[0].status != 200 or self._queue[0].hang)
        if req.method == "GET" and req.path == "/v1/models" and not fault:
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "test", **self.model_fields.get(m, {})}
                    for m in self.models]
            await self._send_simple(writer, 200, {"object": "list", "data": data}, False)
            return True
        if req.method == "POST" and req.path == "/v1/embeddings" and self.embed is not None and not fault:
            await self._send_simple(writer, 200, _embeddings(self.embed, req.body), False)
            return True
        if (req.method, req.path) in self.routes:
            await self._send_simple(writer, 200, self.routes[(req.method, req.path)], False)
            return True
        if (req.method, req.path) not in (("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
            # Other servers' routes (Ollama's /api/show, llama.cpp's /props) are not this one's; no script used.
            await self._send_simple(writer, 404, _error_body(404, f"Unknown route {req.method} {req.path}"), False)
            return True
        reply = self._queue.popleft() if self._queue else self.default
        if reply.wait > 0:
            await asyncio.sleep(reply.wait)
        if reply.hang:
            await self._until_eof(index, reader)
            return False
        if reply.status != 200:
            extra = {"Retry-After": "0"} if reply.status == 429 else None
            await self._send_simple(
                writer, reply.status, _error_body(reply.status, reply.error_body), reply.connection_close, extra
            )
            return not reply.connection_close
        if req.method != "POST" or req.path != "/v1/chat/completions":
            await self._send_simple(writer, 404, _error_body(404, f"Unknown route {req.method} {req.path}"), False)
            return True
        body = req.body if isinstance(req.body, dict) else {}
        if any(callable(args) for _, _, args in reply.tool_calls):
            reply = dataclasses.replace(reply, tool_calls=[(c, n, a(body) if callable(a) else a)
                                                           for c, n, a in reply.tool_calls])
        model = str(body.get("model", "test-model"))
        if reply.html:
            page = b"<!doctype html><html><body><h1>Welcome</h1></body></html>"
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(page), page)
            )
            await writer.drain()
            return True
        if not body.get("stream"):
            await self._send_simple(writer, 200, _completion(reply, model), False)
            return True
        return await self._stream(index, reply, model, reader, writer)

    async def _until_eof(self, index: int, reader: asyncio.StreamReader) -> None:
        while await reader.read(65536):
            pass
        self.disconnects.append(index)

    async def _answer_title(self, body: dict, writer: asyncio.StreamWriter) -> None:
        reply, model = Reply(chunks=[self.title] if self.title else []), str(body.get("model", "test-model"))
        if not body.get("stream"):
            await self._send_simple(writer, 200, _completion(reply, model), False)
            return
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        writer.write(head.encode("latin-1") + _frame(b"".join(_events(reply, model))) + b"0\r\n\r\n")
        await writer.drain()

    async def _stream(
        self, index: int, reply: Reply, model: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        chunked = not reply.connection_close
        head = ["HTTP/1.1 200 OK", "Content-Type: text/event-stream", "Cache-Control: no-cache"]
        head.append("Transfer-Encoding: chunked" if chunked else "Connection: close")
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        events = _events(reply, model)
        complete = not (reply.close_early or reply.stall_after is not None)

        async def send() -> None:
            if reply.delay > 0:
                for ev in events:
                    await asyncio.sleep(reply.delay)
                    writer.write(_frame(ev) if chunked else ev)
                    await writer.drain()
            else:
                blob = b"".join(events)
                for i in range(0, len(blob), _BATCH):
                    part = blob[i : i + _BATCH]
                    writer.write(_frame(part) if chunked else part)
                    await writer.drain()
            if complete and chunked:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            if reply.stall_after is not None:
                await asyncio.Event().wait()

        sender = asyncio.ensure_future(send())
        watcher = asyncio.ensure_future(reader.read(1))
        try:
            done, _ = await asyncio.wait({sender, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if sender in done:
                exc = sender.exception()
                if exc is not None:
                    self.disconnects.append(index)
                    raise _Disconnected from exc
                if watcher.done() and watcher.result():
                    self._pushback[writer] = watcher.result()  # the first byte of a next request
                return complete and chunked  # else close: ends a Connection: close body, or close_early
            if watcher.result():
                # a client that sends its next request before reading this reply does not exist here
                raise _Disconnected
            self.disconnects.append(index)  # the client went away before the reply was complete
            raise _Disconnected
        finally:
            for t in (sender, watcher):
                if not t.done():
                    t.cancel()
            await asyncio.gather(sender, watcher, return_exceptions=True)


def _asks_title(body: Any) -> bool:
    messages = body.get("messages") if isinstance(body, dict) else None
    return bool(messages) and isinstance(messages[0], dict) and messages[0].get("content") == TITLE_PROMPT


def _error_body(status: int, given: Any) -> Any:
    if isinstance(given, dict):
        return given
    typ, msg = _ERRORS.get(status, ("server_error", f"Error {status}."))
    return {"error": {"message": given if isinstance(given, str) else msg, "type": typ, "param": None, "code": None}}


def _events(reply: Reply, model: str) -> list[bytes]:
    """The SSE events of a streaming reply, pre-encoded, framed as the reply says."""
    out = _plain_events(reply, model)
    if reply.comments:
        out = [b": keep-alive\n\n" + ev for ev in out]
    if reply.line_end != "\n":  # JSON holds no raw line break: every \n is the stream's own
        out = [ev.replace(b"\n", reply.line_end.encode()) for ev in out]
    return out


def _plain_events(reply: Reply, model: str) -> list[bytes]:
    pre = (
        b'data: {"id":"chatcmpl-test","object":"chat.completion.chunk","created":0,"model":'
        + json.dumps(model).encode()
        + b',"choices":[{"index":0,"delta":'
    )
    post_null = b',"logprobs":null,"finish_reason":null}]}\n\n'
    out = [pre + b'{"role":"assistant","content":""}' + post_null]
    sent = 0
    cache: dict[str, bytes] = {}

    def add(ev: bytes) -> bool:
        nonlocal sent
        if reply.malformed_after is not None and sent == reply.malformed_after:
            out.append(b'data: {"id": "chatcmpl-test", "choices": [{"delta": {"content": "x\n\n')
            return False
        if reply.stall_after is not None and sent == reply.stall_after:
            return False
        out.append(ev)
        sent += 1
        return True

    def text_json(text: str) -> bytes:
        return json.dumps(text, ensure_ascii=reply.ensure_ascii).encode()

    for text in reply.reasoning:
        if not add(pre + b'{"%s":%s}' % (reply.reasoning_field.encode(), text_json(text)) + post_null):
            return out
    for text in reply.chunks:
        ev = cache.get(text)
        if ev is None:
            ev = cache[text] = pre + b'{"content":%s}' % text_json(text) + post_null
        if not add(ev):
            return out
    for i, (call_id, name, args) in enumerate(reply.tool_calls):
        raw = args if isinstance(args, str) else json.dumps(args)
        idx = {} if reply.omit_index else {"index": i}
        first = {**idx, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        if not add(pre + json.dumps({"tool_calls": [first]}).encode() + post_null):
            return out
        step = max(1, reply.fragment)
        for j in range(0, len(raw), step):
            frag = {**idx, "function": {"arguments": raw[j : j + step]}}
            if not add(pre + json.dumps({"tool_calls": [frag]}).encode() + post_null):
                return out
    if reply.error_event is not None:
        out.append(
            b"data: %s\n\n" % json.dumps({"error": {"message": reply.error_event, "type": "server_error"}}).encode()
        )
        return out
    if reply.close_early or reply.stall_after is not None:
        return out  # (stall_after past the last chunk: stall before the finish chunk)
    if reply.malformed_after is not None and sent <= reply.malformed_after:
        add(b"")  # malformed right at the end
        return out
    if reply.finish is not None:
        out.append(pre + b"{}" + b',"logprobs":null,"finish_reason":%s}]}\n\n' % json.dumps(reply.finish).encode())
    if reply.usage is not None:
        p, c = reply.usage
        out.append(
            b'data: {"id":"chatcmpl-test","object":"chat.completion.chunk","created":0,"model":%s,'
            b'"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}\n\n'
            % (json.dumps(model).encode(), p, c, p + c)
        )
    out.append(b"data: [DONE]\n\n")
    return out


def _completion(reply: Reply, model: str) -> dict[str, Any]:
    """A non-streaming chat completion with the reply's text and tool calls."""
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(reply.chunks) or None}
    if reply.tool_calls:
        msg["tool_calls"] = [
            {
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": a if isinstance(a, str) else json.dumps(a)},
            }
            for cid, name, a in reply.tool_calls
        ]
    p, c = reply.usage or (0, 0)
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": msg, "finish_reason": reply.finish or "stop"}],
        "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
    }


def _embeddings(embed: Callable[[str], list[float]], body: Any) -> dict[str, Any]:
    body = body if isinstance(body, dict) else {}
    inputs = body.get("input", [])
    inputs = [inputs] if isinstance(inputs, str) else list(inputs)
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for i, text in enumerate(inputs):
        vector = embed(str(text))
        value: Any = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode() if as_base64 else vector
        data.append({"object": "embedding", "index": i, "embedding": value})
    tokens = sum(len(str(t).split()) for t in inputs)
    return {"object": "list", "data": data, "model": body.get("model", "embed-model"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def trigram_vector(text: str, dim: int = 256) -> list[float]:
    """A deterministic stand-in for an embeddings model: hashed character trigrams of the words, normalized.
    Texts that share words or spellings get close vectors (a misspelled word still lands near the right one);
    it knows nothing of meaning."""
    vector = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        padded = f" {word} "
        for i in range(len(padded) - 2):
            h = int.from_bytes(hashlib.blake2b(padded[i:i + 3].encode(), digest_size=4).digest(), "little")
            vector[h % dim] += 1.0 if h & 1 << 31 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


@contextlib.contextmanager
def run_in_thread(server: OpenAIServer | None = None) -> Iterator[OpenAIServer]:
    """Run a server on its own event loop in a daemon thread; stop it on exit."""
    server = server or OpenAIServer()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="openai-test-server", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        yield server
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="A scripted OpenAI-compatible streaming server for tests.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--chunks", type=int, default=1, help="text chunks per reply")
    p.add_argument("--text", help="the text of each chunk (default: a counter that does not repeat itself)")
    p.add_argument("--delay", type=float, default=0.0, help="seconds before each chunk")
    p.add_argument("--api-key", default=None)
    p.add_argument("--embed", action="store_true", help="answer /v1/embeddings with trigram_vector")
    args = p.parse_args(argv)

    async def serve() -> None:
        default = (Reply.many(args.chunks, args.text, delay=args.delay) if args.text is not None
                   else Reply.counting(args.chunks, delay=args.delay))
        server = await OpenAIServer(args.host, args.port, api_key=args.api_key, default=default,
                                    embed=trigram_vector if args.embed else None).start()
        print(f"READY {server.base_url}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main(sys.argv[1:])
