"""Chats: quick conversations beside tasks, on the same turn engine (`rt.chats`).

A chat is not a task: its rows are its own (store/chats.py), it has no workspace, no file or shell tools (only
memory and a read-only search of the knowledge library) and no plan, and its model may change between turns (a
marker in the conversation says so). What it can change is the person's memory: the model's saving, changing or
deleting a memory asks first (approval mode `ask`, with the global permission rules), and `answer` goes on.
Its turns run through a `host.TurnHost` on the core's shared lock, Stop registry and stream buffers, so they
have a task turn's guarantees: the input durable before `send` returns, one write per client message id, replay
and live events through `subscribe`, Stop ends the turn `aborted`, a crash leaves it `interrupted` (startup
recovery), and `continue_chat` carries on from there. "Turn into a task" (`to_task`) starts a task whose history
is the chat's messages.
"""

from __future__ import annotations

import builtins  # `Chats.list` hides the builtin in the annotations below it
import uuid
from collections.abc import AsyncGenerator, Iterable
from pathlib import Path
from typing import Any

from ..errors import ChatNotFound, ConfigError, RequestNotFound, TaskBusy
from ..events import Event
from ..infos import ChatInfo, MessageInfo, TaskInfo, TurnHandle
from ..kits.task import AgentKit, Prepared
from ..providers.base import Provider
from ..store.chats import ChatStore
from .core import Core
from .tasks import Tasks


class ChatKit:
    """A chat's agent port (ports.AgentPort): the task kit's providers, context windows and memory; of the tools
    only memory and knowledge search (kit.prepare_chat)."""

    def __init__(self, kit: AgentKit):
        self._kit = kit

    @property
    def max_steps(self) -> int:
        return self._kit.max_steps

    def provider(self, provider_id: str) -> Provider:
        return self._kit.provider(provider_id)

    async def prepare(self, chat: dict[str, Any], input_parts: list[dict]) -> Prepared:
        return await self._kit.prepare_chat(chat, input_parts)

    def mcp_sessions(self, chat: dict[str, Any], cwd: Path) -> None:
        return None

    async def context_window(self, provider: Provider, model: str) -> tuple[int, str | None]:
        return await self._kit.context_window(provider, model)

    def background_jobs(self, chat: dict[str, Any], reason: str) -> list[tuple[str, dict[str, Any]]]:
        return self._kit.background_jobs(chat, reason)  # what the person said about themselves, remembered

    async def run_job(self, kind: str, payload: dict[str, Any]) -> Any:
        return await self._kit.run_job(kind, payload)


class Chats:
    def __init__(self, core: Core, store: ChatStore, kit: AgentKit, tasks: Tasks):
        self._core = core
        self._store = store
        self._tasks = tasks  # "Turn into a task" makes one
        self._host = core.host(store, ChatKit(kit), self._row, noun="Chat")

    async def _row(self, chat_id: str) -> dict:
        """The chat as the turn engine reads an owner: no workspace; its one tool that changes something, the
        memory tool's writes, asks."""
        row = await self._store.get_chat(chat_id)
        if row is None:
            raise ChatNotFound(chat_id)
        return dict(row, workspace="", approval="ask", planning=False)

    # -- chats --

    async def create(self, model: str | None = None, title: str | None = None) -> ChatInfo:
        """A new chat on `model` (the default model when None); its title comes from the first message."""
        self._core.writable()
        model = self._core.check_model(model)
        row = await self._store.create_chat(uuid.uuid4().hex, model, (title or "").strip() or None)
        return ChatInfo.model_validate(row)

    async def get(self, chat_id: str) -> ChatInfo:
        return ChatInfo.model_validate(await self._row(chat_id))

    async def list(self) -> list[ChatInfo]:
        """Every chat, the most recently used first."""
        return [ChatInfo.model_validate(r) for r in await self._store.list_chats()]

    async def rename(self, chat_id: str, title: str) -> None:
        self._core.writable()
        await self._row(chat_id)
        await self._store.update_chat(chat_id, title=title.strip() or None, title_provisional=False)

    async def delete(self, chat_id: str) -> None:
        self._core.writable()
        if chat_id in self._core.aborts:
            await self.stop(chat_id)
        await self.wait_idle(chat_id)  # also an answer whose end is announced and whose cleanup goes on
        await self._store.delete_chat(chat_id)

    async def set_model(self, chat_id: str, model: str) -> ChatInfo:
        """Use `model` from the next turn on; the conversation shows where it changed. Not while a turn runs."""
        self._core.writable()
        row = await self._row(chat_id)
        model = self._core.check_model(model)
        if model != row["model"]:
            if chat_id in self._core.aborts:
                raise TaskBusy(chat_id, "Chat")
            await self._store.change_model(chat_id, row["model"], model)
        return await self.get(chat_id)

    async def messages(self, chat_id: str, *, before: int | None = None, after: int | None = None,
                       limit: int | None = None) -> builtins.list[MessageInfo]:
        """As `rt.tasks.messages`; a model change is a message with role "event"."""
        await self._row(chat_id)
        rows = await self._store.messages(chat_id, before=before, after=after, limit=limit)
        return [MessageInfo.model_validate(r) for r in rows]

    async def turns(self, chat_id: str, turn_ids: Iterable[str] | None = None) -> builtins.list[dict]:
        """As `rt.tasks.turns`: turn rows (reason, error, usage, times)."""
        await self._row(chat_id)
        return await self._store.turns(chat_id, None if turn_ids is None else list(turn_ids))

    async def turn_details(self, chat_id: str, turn_id: str) -> dict:
        """As `rt.tasks.turn_details`: the turn's model steps (a chat runs no helpers)."""
        await self._row(chat_id)
        return {"steps": await self._store.steps(chat_id, turn_id), "subagents": []}

    async def to_task(self, chat_id: str, title: str | None = None, approval: str = "ask") -> TaskInfo:
        """A new task on the chat's model whose history is the chat's messages (the chat stays as it is)."""
        chat = await self._row(chat_id)
        task = await self._tasks.create(title=title or chat["title"], model=chat["model"], approval=approval)
        await self._core.store.copy_messages(chat_id, task.id, source=self._store)
        return await self._tasks.get(task.id)

    # -- turns --

    async def send(self, chat_id: str, text: str, client_msg_id: str | None = None,
                   queue: bool = False) -> TurnHandle:
        if not text.strip():
            raise ConfigError("A message needs some text.")
        return await self._host.send(chat_id, [{"type": "text", "text": text}], client_msg_id, queue)

    async def continue_chat(self, chat_id: str, client_msg_id: str | None = None) -> TurnHandle:
        """Carry on the last answer where it stopped (a Stop, a crash, an error or the length limit)."""
        return await self._host.send(chat_id, [{"type": "continue"}], client_msg_id, False)

    async def retry(self, chat_id: str, client_msg_id: str | None = None) -> TurnHandle:
        """A new answer to the last message (with the chat's current model)."""
        last = await self._host.last_input(chat_id)
        return await self._host.send(chat_id, [{"type": "retry", "message_id": last}], client_msg_id, False)

    async def answer(self, chat_id: str, request_id: str, answer: str) -> TurnHandle:
        """Reply "approve" or "deny" to the approval the chat waits for (a memory write); the answer goes on."""
        self._core.writable()
        req = (await self._row(chat_id))["pending_request"]
        if not req or req["request_id"] != request_id:
            if seen := await self._store.find_client_message(chat_id, f"answer:{request_id}"):
                return self._host.duplicate(seen)  # answered already (a double click)
            raise RequestNotFound(chat_id, request_id, "Chat")
        if answer not in ("approve", "deny"):
            raise ConfigError(f"An approval is answered with 'approve' or 'deny', not {answer!r}.")
        parts = [{"type": "answer", "request": req, "answer": answer}]
        return await self._host.send(chat_id, parts, f"answer:{request_id}", False)

    async def run_queued(self, chat_id: str) -> TurnHandle | None:
        return await self._host.run_queued(chat_id)

    async def discard_queued(self, chat_id: str, message_id: int) -> bool:
        return await self._host.discard_queued(chat_id, message_id)

    async def stop(self, chat_id: str) -> None:
        await self._host.stop(chat_id)

    async def wait_idle(self, chat_id: str) -> None:
        await self._host.wait_idle(chat_id)

    def is_running(self, chat_id: str) -> bool:
        return chat_id in self._core.aborts

    def subscribe(self, chat_id: str, after_seq: int = 0, turn_id: str | None = None, follow: bool = False,
                  deltas: bool = True) -> AsyncGenerator[Event, None]:
        """As `rt.tasks.subscribe`; the events' `task_id` is the chat's id."""
        return self._host.subscribe(chat_id, after_seq, turn_id, follow, deltas)
