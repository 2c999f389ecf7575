"""One Hearth server's HTTP API (DESIGN.md §11) as the caller's token sees it: JSON requests, and event streams read
with httpx-sse that resume after a dropped connection.

An error answer becomes a typed error with the server's sentence (`TokenRefused` for 401, `QuotaExhausted` for 402,
`ServerRefused` for the rest); a server that cannot be reached is `ServerUnreachable` (also a proxy's 502-504), and
one that answers what no Hearth server does (a page, other JSON, a redirect) is a `ConfigError`: a wrong address. A
plain request fails at once; a stream is a state: it reconnects with backoff (`on_state("reconnecting")`, then
`"connected"`) and goes on from the last event it read (`Last-Event-ID`), so nothing is missed or repeated, until
`give_up` seconds of failing (None: never). A send that dropped before its first event is sent again: its
`client_msg_id` makes that the same input.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeVar

import httpx
from httpx_sse import aconnect_sse
from pydantic import TypeAdapter, ValidationError

from .. import redact
from ..errors import ConfigError, QuotaExhausted, ServerRefused, ServerUnreachable, TokenRefused
from ..events import Event, event_adapter

# The server pings an idle stream every 15 s: a read that waits longer than this is a dead connection.
TIMEOUT = httpx.Timeout(10.0, read=45.0)
FIRST_DELAY, MAX_DELAY = 0.25, 5.0  # between reconnection attempts, doubling
T = TypeVar("T")


class ServerClient:
    def __init__(self, url: str, token: str, *, give_up: float | None = 60.0,
                 on_state: Callable[[str], None] | None = None):
        redact.remember([token])
        self.url = url
        self.give_up = give_up
        self._on_state = on_state
        self._http = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(self, method: str, path: str, answer: TypeAdapter[T], body: dict[str, Any] | None = None) -> T:
        """What the server answers, as `answer` reads its JSON."""
        try:
            response = await self._http.request(method, path, json=body)
        except httpx.TransportError:
            raise ServerUnreachable(self.url) from None
        self._check(response)
        try:
            return answer.validate_json(response.content)
        except ValidationError:
            raise self.foreign() from None

    def foreign(self) -> ConfigError:
        """What an answer no Hearth server gives says: the address is another server's."""
        return ConfigError(f"{self.url} does not answer as a Hearth server does: check the address.")

    async def events(self, task_id: str, method: str, path: str, body: dict[str, Any] | None = None,
                     after: str | None = None) -> AsyncGenerator[Event, None]:
        """The events a request answers with (after the event whose id is `after`), to the turn's end
        (`turn_ended`), resumed from the task's stream after a drop. Ends without `turn_ended` when the server has
        nothing more buffered (204: a restarted single box; the task's messages and state hold how the turn
        ended) or nothing after `after` (an ended turn read to its end), and at once when a queued input was
        accepted (202)."""
        last_id = after
        backoff = _Backoff(self)
        while True:
            try:
                async with aconnect_sse(self._http, method, path, json=body,
                                        headers={"Last-Event-ID": last_id} if last_id else {}) as source:
                    backoff.answered()
                    response = source.response
                    if not response.headers.get("content-type", "").startswith("text/event-stream"):
                        await response.aread()
                        self._check(response)
                        if response.status_code not in (202, 204):
                            raise self.foreign()
                        return  # 204: nothing buffered; 202: queued
                    got = False
                    async for message in source.aiter_sse():
                        if not message.data:  # a keep-alive
                            continue
                        event = self._event(message.data)
                        last_id, got = message.id or last_id, True
                        yield event
                        if event.type == "turn_ended":
                            return
                    if not got:
                        return  # nothing after `after`: that turn has given all it had
            except httpx.TransportError:
                pass
            # Dropped, or ended before the turn did (the server shut down): go on from the last event seen.
            if last_id is not None:
                method, path, body = "GET", f"/api/tasks/{task_id}/stream", None
            await backoff.failed()

    async def feed(self) -> AsyncGenerator[Event, None]:
        """The caller's tasks' `turn_started`, `turn_ended` and `title` events (`GET /api/events`), for as long as it
        is read; reconnected after a drop. Events sent while it was down are not replayed: "connected" says when to
        read again what they would have changed."""
        backoff = _Backoff(self)
        while True:
            try:
                async with aconnect_sse(self._http, "GET", "/api/events") as source:
                    backoff.answered()
                    if not source.response.headers.get("content-type", "").startswith("text/event-stream"):
                        await source.response.aread()
                        self._check(source.response)
                    async for message in source.aiter_sse():
                        if message.data:
                            yield self._event(message.data)
            except httpx.TransportError:
                pass
            await backoff.failed()

    def _tell(self, state: str) -> None:
        if self._on_state is not None:
            self._on_state(state)

    def _event(self, data: str) -> Event:
        try:
            return event_adapter.validate_json(data)
        except ValidationError:
            raise self.foreign() from None

    def _check(self, response: httpx.Response) -> None:
        """Raise the typed error of an error answer (a Hearth server's says `{"error": sentence}`)."""
        status = response.status_code
        if status < 300:
            return
        try:
            said = response.json().get("error") if status >= 400 else None
        except (ValueError, AttributeError):
            said = None
        if not isinstance(said, str) or not said:
            if status in (502, 503, 504):  # a proxy in front of a server that is down
                raise ServerUnreachable(self.url)
            raise self.foreign()
        if status == 401:
            raise TokenRefused(self.url)
        if status == 402:
            raise QuotaExhausted()
        raise ServerRefused(said, status)


class _Backoff:
    """A stream's reconnection: "reconnecting" at the first failure, "connected" at the next answer, waits that
    double up to MAX_DELAY, and ServerUnreachable after the client's `give_up` seconds of failing."""

    def __init__(self, client: ServerClient):
        self._client = client
        self._down_since: float | None = None
        self._delay = FIRST_DELAY

    def answered(self) -> None:
        if self._down_since is not None:
            self._down_since, self._delay = None, FIRST_DELAY
            self._client._tell("connected")

    async def failed(self) -> None:
        give_up = self._client.give_up
        if self._down_since is None:
            self._down_since = time.monotonic()
            self._client._tell("reconnecting")
        elif give_up is not None and time.monotonic() - self._down_since > give_up:
            raise ServerUnreachable(self._client.url)
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, MAX_DELAY)
