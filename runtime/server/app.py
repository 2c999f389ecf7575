"""The HTTP API of `hearth serve` (the design's §11): Starlette routes over `rt.tasks`, events as Server-Sent Events.

Every route but `/healthz` wants `Authorization: Bearer TOKEN` (401 without one, or for a revoked one) and sees only
the caller's tasks: another user's task is 404, as one that does not exist. A send (a message, an answer) checks in
this order: the token, the task and its owner, the body (400), then clears the task's stale Stop (a Stop arriving
after this is honoured by the run), the quota (402), and `rt.tasks.send` does the rest (409 busy, or 202 queued;
the input stored; the turn started). It answers by reading the turn's stream with the same reader a reconnect
(`GET …/stream` with `Last-Event-ID` or `?after_seq=N`) uses: an SSE message is `id: <turn_id>:<seq>` and `data:`
the event as JSON. Errors are `{"error": "<one plain sentence>"}`: 400, 401, 402, 404, 409, and 503 when the
database or Redis cannot be reached.

Beyond the design's table, for `hearth --server … show` and `answer --always`: `GET …/turns` (the turns' rows:
reason, error, tokens, times), `GET …/turns/{turn_id}` (its model steps and helpers), and an answer's optional
`remember` (keep the approval as a rule of the task) and `rule_command` (for commands starting with it).

Decisions where the design is silent: a task's `goal` is its title; `memory` (false unless asked) because one memory
folder would be shared by every user of the server; a repeated send of a queued input answers 202 again; an
answer to a request the task does not wait for is 404; `POST …/abort` answers 202 `{}`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import (
    ConfigError,
    HearthError,
    QuotaExhausted,
    RequestNotFound,
    StorageError,
    TaskBusy,
    TaskNotFound,
)
from ..events import Event
from ..store.users import quota_left
from .backend import Backend
from .redis.common import RedisUnavailable

log = logging.getLogger(__name__)

PING_SECONDS = 15  # a comment line keeps idle streams open through proxies and the client's read timeout
SEND_TIMEOUT = 30  # a client that stops reading for this long is let go
MAX_BODY = 8 * 1024 * 1024

Handler = Callable[[Request], Awaitable[Response]]


class Problem(Exception):
    def __init__(self, status: int, sentence: str):
        super().__init__(sentence)
        self.status = status


def _status(error: HearthError) -> int:
    if isinstance(error, (TaskNotFound, RequestNotFound)):
        return 404
    if isinstance(error, TaskBusy):
        return 409
    if isinstance(error, QuotaExhausted):
        return 402
    if isinstance(error, ConfigError):
        return 400
    if isinstance(error, (StorageError, RedisUnavailable)):
        return 503
    return 500


def _error(status: int, sentence: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": sentence}, status_code=status, headers=headers)


def route(handler: Handler) -> Handler:
    """Errors become `{"error": sentence}` with their status; an unexpected one is logged and says only that."""
    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except Problem as problem:
            return _error(problem.status, str(problem))
        except HearthError as error:
            status = _status(error)
            if status == 500:
                log.error("%s %s failed: %s", request.method, request.url.path, error)
            return _error(status, str(error))
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return _error(500, "Something went wrong on the server; it is logged there.")
    return answer


def _backend(request: Request) -> Backend:
    backend: Backend = request.app.state.backend
    return backend


async def _caller(request: Request) -> dict[str, Any]:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Problem(401, "Send your API token as 'Authorization: Bearer TOKEN'.")
    user = await _backend(request).users.user_for_token(token.strip())
    if user is None:
        raise Problem(401, "This API token is not valid (it was revoked, or never issued).")
    return user


async def _owned(request: Request) -> tuple[dict[str, Any], str]:
    """The caller and the id of a task of theirs (404 for another's, as for none)."""
    user = await _caller(request)
    task_id = request.path_params["task_id"]
    await _backend(request).rt.tasks.get(task_id, owner_id=user["id"])
    return user, task_id


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise Problem(400, "The request body must be a JSON object.")
    return body


def _text(body: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise Problem(400, f"'{name}' must be a string with some text in it.")
    return value


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise Problem(400, f"'{name}' must be true or false.")
    return value


def _fresh_turn(user: dict[str, Any]) -> None:
    """The quota lets the caller start a turn (checked again when it runs)."""
    if quota_left(user) == 0:
        raise QuotaExhausted()


def _stream(events: AsyncGenerator[Event, None], turn_id: str | None = None) -> EventSourceResponse:
    """The events as SSE messages; with `turn_id`, only that turn's (a send's stream ends where another begins)."""
    async def messages() -> AsyncIterator[ServerSentEvent]:
        async with contextlib.aclosing(events):
            try:
                async for event in events:
                    if turn_id is not None and event.turn_id != turn_id:
                        return
                    yield ServerSentEvent(data=event.model_dump_json(), id=f"{event.turn_id}:{event.seq}")
            except HearthError as error:  # Redis or the database gone mid-stream: the client resumes elsewhere
                log.warning("A stream ended early: %s", error)
    return EventSourceResponse(messages(), ping=PING_SECONDS, send_timeout=SEND_TIMEOUT)


def _resume_point(request: Request) -> tuple[int, str | None]:
    """(after_seq, turn_id) from `Last-Event-ID: <turn_id>:<seq>` (what an SSE client resends), or `?after_seq=N`."""
    last = request.headers.get("last-event-id")
    if last:
        turn_id, _, seq = last.strip().rpartition(":")
        if turn_id and seq.isdigit():
            return int(seq), turn_id
        raise Problem(400, "Last-Event-ID must be the id of an event this server sent: '<turn_id>:<seq>'.")
    after = request.query_params.get("after_seq", "0")
    if not after.isdigit():
        raise Problem(400, "after_seq must be a whole number, 0 or more.")
    return int(after), None


# -- the routes --

@route
async def create_task(request: Request) -> Response:
    user = await _caller(request)
    body = await _body(request)
    goal = _text(body, "goal", required=True)
    task = await _backend(request).rt.tasks.create(
        title=goal.strip() if goal else None, model=_text(body, "model"), approval=_text(body, "approval") or "ask",
        memory=_flag(body, "memory"), owner_id=user["id"])
    return JSONResponse(task.model_dump(mode="json"), status_code=201)


@route
async def list_tasks(request: Request) -> Response:
    user = await _caller(request)
    tasks = await _backend(request).rt.tasks.list(owner_id=user["id"])
    return JSONResponse([t.model_dump(mode="json") for t in tasks])


@route
async def get_task(request: Request) -> Response:
    user = await _caller(request)
    task = await _backend(request).rt.tasks.get(request.path_params["task_id"], owner_id=user["id"])
    return JSONResponse(task.model_dump(mode="json"))


@route
async def messages(request: Request) -> Response:
    _, task_id = await _owned(request)
    found = await _backend(request).rt.tasks.messages(task_id)
    return JSONResponse([m.model_dump(mode="json") for m in found])


@route
async def send(request: Request) -> Response:
    user, task_id = await _owned(request)
    body = await _body(request)
    text, client_msg_id, queue = _text(body, "text", required=True), _text(body, "client_msg_id"), _flag(body, "queue")
    tasks = _backend(request).rt.tasks
    await tasks.clear_stop(task_id)
    _fresh_turn(user)
    handle = await tasks.send(task_id, text or "", client_msg_id=client_msg_id, queue=queue)
    if handle.queued:
        return JSONResponse({"queued": True, "message_id": handle.message_id, "duplicate": handle.duplicate},
                            status_code=202)
    return _stream(tasks.subscribe(task_id, 0, handle.turn_id), handle.turn_id)


@route
async def answer(request: Request) -> Response:
    user, task_id = await _owned(request)
    body = await _body(request)
    request_id, said = _text(body, "request_id", required=True), _text(body, "answer", required=True)
    remember, rule_command = _flag(body, "remember"), _text(body, "rule_command")
    tasks = _backend(request).rt.tasks
    await tasks.clear_stop(task_id)
    _fresh_turn(user)
    handle = await tasks.answer(task_id, request_id or "", said or "", remember, rule_command=rule_command)
    return _stream(tasks.subscribe(task_id, 0, handle.turn_id), handle.turn_id)


@route
async def turns(request: Request) -> Response:
    _, task_id = await _owned(request)
    return JSONResponse(await _backend(request).rt.tasks.turns(task_id))


@route
async def turn_details(request: Request) -> Response:
    _, task_id = await _owned(request)
    turn_id = request.path_params["turn_id"]
    tasks = _backend(request).rt.tasks
    if not await tasks.turns(task_id, [turn_id]):
        raise Problem(404, f"Task {task_id!r} has no turn {turn_id!r}.")
    return JSONResponse(await tasks.turn_details(task_id, turn_id))


@route
async def stream(request: Request) -> Response:
    _, task_id = await _owned(request)
    after_seq, turn_id = _resume_point(request)
    tasks = _backend(request).rt.tasks
    if await tasks.stream_state(task_id) == "missing":
        return Response(status_code=204)  # nothing buffered: the messages hold everything confirmed
    return _stream(tasks.subscribe(task_id, after_seq, turn_id))


@route
async def abort(request: Request) -> Response:
    _, task_id = await _owned(request)
    await _backend(request).rt.tasks.stop(task_id)
    return JSONResponse({}, status_code=202)


@route
async def events(request: Request) -> Response:
    user = await _caller(request)
    return _stream(_backend(request).events(user["id"]))


@route
async def healthz(request: Request) -> Response:
    await _backend(request).health()
    return JSONResponse({"ok": True})


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    if status == 405:
        return _error(405, f"{request.method} is not allowed on {request.url.path}.")
    return _error(status, f"There is no {request.url.path} here.")


ROUTES = [
    Route("/api/tasks", create_task, methods=["POST"]),
    Route("/api/tasks", list_tasks, methods=["GET"]),
    Route("/api/tasks/{task_id}", get_task, methods=["GET"]),
    Route("/api/tasks/{task_id}/messages", messages, methods=["GET"]),
    Route("/api/tasks/{task_id}/messages", send, methods=["POST"]),
    Route("/api/tasks/{task_id}/turns", turns, methods=["GET"]),
    Route("/api/tasks/{task_id}/turns/{turn_id}", turn_details, methods=["GET"]),
    Route("/api/tasks/{task_id}/stream", stream, methods=["GET"]),
    Route("/api/tasks/{task_id}/abort", abort, methods=["POST"]),
    Route("/api/tasks/{task_id}/answer", answer, methods=["POST"]),
    Route("/api/events", events, methods=["GET"]),
    Route("/healthz", healthz, methods=["GET"]),
]


def create_app(backend: Backend) -> Starlette:
    """The API over `backend`, which it closes at shutdown."""
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.backend = backend
        # What start-up allocated never needs collecting: a full collection of it would stall every reader.
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            await backend.aclose()

    return Starlette(routes=ROUTES, lifespan=lifespan, max_body_size=MAX_BODY,
                     exception_handlers={404: _not_found, 405: _not_found})
