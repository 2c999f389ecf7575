"""What a conversation panel reads, follows and asks of the conversation's owner: a task or a chat.

`ConversationFeed` reads pages, turn rows and live events through a source, so a task panel and a chat panel
share the paging, replay and live-turn logic. Actions that start or end a turn tell the bridge
(`task_changed`), which is how every open view learns of them (one completion path, no polling).
"""

from __future__ import annotations

from collections.abc import Iterable

from .bridge import RuntimeBridge, TaskObserver


class TaskSource:
    kind = "task"

    def __init__(self, bridge: RuntimeBridge, task_id: str):
        self.bridge, self.id = bridge, task_id

    async def info(self):
        return await self.bridge.get_task(self.id)

    async def messages(self, **page):
        return await self.bridge.messages(self.id, **page)

    async def turns(self, turn_ids: Iterable[str]) -> list[dict]:
        return await self.bridge.turns(self.id, turn_ids)

    async def turn_details(self, turn_id: str) -> dict:
        return await self.bridge.turn_details(self.id, turn_id)

    def observe(self) -> TaskObserver:
        return self.bridge.observe(self.id)

    async def wait_idle(self) -> None:
        await self.bridge.wait_idle(self.id)


class ChatSource:
    """A chat's reads and actions (`bridge.chats`): the same guarantees as a task's, on its own records."""

    kind = "chat"

    def __init__(self, bridge: RuntimeBridge, chat_id: str):
        self.bridge, self.id = bridge, chat_id
        self.chats = bridge.chats

    async def info(self):
        return await self.chats.get(self.id)

    async def messages(self, **page):
        return await self.chats.messages(self.id, **page)

    async def turns(self, turn_ids: Iterable[str]) -> list[dict]:
        return await self.chats.turns(self.id, turn_ids)

    async def turn_details(self, turn_id: str) -> dict:
        return await self.chats.turn_details(self.id, turn_id)

    def observe(self) -> TaskObserver:
        return TaskObserver(self.bridge, self.id, self.chats.subscribe)

    async def wait_idle(self) -> None:
        await self.chats.wait_idle(self.id)

    def is_running(self) -> bool:
        return self.chats.is_running(self.id)

    async def _changed(self, action):
        result = await action
        self.bridge.task_changed.emit(self.id)
        return result

    async def send(self, text: str, queue: bool = False):
        return await self._changed(self.chats.send(self.id, text, queue=queue))

    async def continue_chat(self):
        return await self._changed(self.chats.continue_chat(self.id))

    async def retry(self):
        return await self._changed(self.chats.retry(self.id))

    async def run_queued(self):
        return await self._changed(self.chats.run_queued(self.id))

    async def discard_queued(self, message_id: int) -> bool:
        return await self._changed(self.chats.discard_queued(self.id, message_id))

    async def set_model(self, model: str):
        return await self._changed(self.chats.set_model(self.id, model))

    async def answer(self, request_id: str, answer: str):
        return await self._changed(self.chats.answer(self.id, request_id, answer))

    async def stop(self) -> None:
        await self.chats.stop(self.id)

    async def to_task(self):
        info = await self.chats.to_task(self.id)
        self.bridge.tasks_changed.emit()
        return info


class AssignmentSource:
    """One assignment of a team (`bridge.teams`): its conversation as a read-only feed on the board."""

    kind = "assignment"

    def __init__(self, bridge: RuntimeBridge, team_id: str, assignment):
        self.bridge, self.team_id, self.key, self.id = bridge, team_id, assignment.key, assignment.id
        self.teams = bridge.teams

    async def info(self):
        team = await self.teams.get(self.team_id)
        return next(a for a in team.assignments if a.key == self.key)

    async def messages(self, **page):
        return await self.teams.messages(self.team_id, self.key, **page)

    async def turns(self, turn_ids: Iterable[str]) -> list[dict]:
        return await self.teams.turn_rows(self.team_id, self.key, turn_ids)

    async def turn_details(self, turn_id: str) -> dict:
        return await self.teams.turn_details(self.team_id, self.key, turn_id)

    def observe(self) -> TaskObserver:
        return TaskObserver(self.bridge, self.id,
                            lambda _id, follow: self.teams.subscribe(self.team_id, self.key, follow=follow))

    async def wait_idle(self) -> None:
        await self.teams.wait_assignment(self.team_id, self.key)
