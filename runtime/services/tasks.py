"""The task part of the Runtime facade: tasks, their messages and records, skills (runtime/api.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Settings, split_model_ref
from ..errors import ConfigError, TaskNotFound
from ..infos import MessageInfo, TaskInfo
from ..tools.approvals import APPROVAL_MODES
from ..tools.skills import add_skill, load_skills
from ..workspace import workspace_for
from .memory import real_paths

if TYPE_CHECKING:
    from ..engine.abort import AbortRegistry
    from ..kits.task import AgentKit
    from ..knowledge.library import Knowledge
    from ..providers.base import Provider
    from ..store.repo import Store


class TasksMixin:
    home: Path
    settings: Settings
    store: Store
    aborts: AbortRegistry
    kit: AgentKit
    knowledge: Knowledge
    _providers: dict[str, Provider]

    async def create_task(self, title: str | None = None, model: str | None = None, approval: str = "ask",
                          planning: bool = False, knowledge: Iterable[str] = (), memory: bool = True,
                          network: bool = False) -> TaskInfo:
        """A new task. Its settings are bound for its life: model, approval mode, planning, the documents and
        folders it works from (`knowledge`: added to the library, indexed in the background, the only ones its
        search_knowledge sees), `memory` (False: this task neither uses nor saves the person's memories) and
        `network` (its shell commands may use the network; off by default, see set_task_sandbox)."""
        self._writable()
        model = model or self.settings.default_model
        provider_id, _ = split_model_ref(model)
        if provider_id not in self._providers:
            self.settings.provider(provider_id)  # raises ConfigError naming the configured ones
        if approval not in APPROVAL_MODES:
            raise ConfigError(f"Approval mode must be one of {', '.join(APPROVAL_MODES)}, not {approval!r}.")
        bound = real_paths(knowledge)
        if bound:
            await self.knowledge.add(bound)  # ConfigError naming a path that is not there, before the task exists
        task_id = uuid.uuid4().hex
        row = await self.store.create_task(
            id=task_id, title=title, model=model, approval=approval, planning=planning, memory=bool(memory),
            knowledge=bound, workspace=str(workspace_for(self.home, task_id)), network=bool(network),
        )
        return TaskInfo.model_validate(row)

    async def _task_row(self, task_id: str) -> dict:
        row = await self.store.get_task(task_id)
        if row is None:
            raise TaskNotFound(task_id)
        return row

    async def get_task(self, task_id: str) -> TaskInfo:
        return TaskInfo.model_validate(await self._task_row(task_id))

    async def list_tasks(self) -> list[TaskInfo]:
        return [TaskInfo.model_validate(r) for r in await self.store.list_tasks()]

    async def messages(self, task_id: str, *, before: int | None = None, after: int | None = None,
                       limit: int | None = None) -> list[MessageInfo]:
        """The task's messages in order; a page with `limit`: the newest ones (before message id `before`), or
        the oldest ones after message id `after`. A long task opens at its last page at once."""
        await self._task_row(task_id)
        rows = await self.store.messages(task_id, before=before, after=after, limit=limit)
        return [MessageInfo.model_validate(r) for r in rows]

    async def turns(self, task_id: str, turn_ids: Iterable[str] | None = None) -> list[dict]:
        """Turn rows (reason, error, usage, times); only those in `turn_ids` when given."""
        await self._task_row(task_id)
        return await self.store.turns(task_id, None if turn_ids is None else list(turn_ids))

    async def skills(self) -> list[dict]:
        """The skills in the data folder's skills/: name, description, folder."""
        found = await asyncio.to_thread(load_skills, self.home)
        return [{"name": s.name, "description": s.description, "folder": str(s.folder)} for s in found]

    async def add_skill(self, folder: str | Path) -> dict:
        """Copy a skill folder (with its SKILL.md) into the data folder; ConfigError saying what is wrong."""
        skill = await asyncio.to_thread(add_skill, self.home, Path(folder).expanduser())
        return {"name": skill.name, "description": skill.description, "folder": str(skill.folder)}

    async def turn_details(self, task_id: str, turn_id: str) -> dict:
        """A turn's records: its model steps (times, tokens, finish reason, tool calls) and the helpers it ran."""
        await self._task_row(task_id)
        return {"steps": await self.store.steps(turn_id), "subagents": await self.store.subagents(turn_id)}

    async def rename_task(self, task_id: str, title: str) -> None:
        self._writable()
        await self._task_row(task_id)
        await self.store.update_task(task_id, title=title.strip() or None, title_provisional=False)

    async def delete_task(self, task_id: str) -> None:
        self._writable()
        if task_id in self.aborts:
            await self.stop(task_id)
        await self.wait_idle(task_id)  # also a turn whose end is announced and whose cleanup goes on
        await self.store.delete_task(task_id)

    def is_running(self, task_id: str) -> bool:
        return task_id in self.aborts

    def running_tasks(self) -> list[str]:
        """Ids of the tasks with a turn running (or about to start from the queue)."""
        return [slot.task_id for slot in self.aborts.slots()]

    def provider(self, provider_id: str) -> Provider:
        return self.kit.provider(provider_id)

    # -- turns --

    async def fork_task(self, task_id: str, model: str, title: str | None = None) -> TaskInfo:
        """A new task bound to `model` that starts with a copy of this task's conversation (its workspace files
        stay where they are). What "Continue in a new task with another model" does."""
        source = await self.get_task(task_id)
        task = await self.create_task(title=title or source.title, model=model, approval=source.approval,
                                      planning=source.planning, knowledge=source.knowledge, memory=source.memory,
                                      network=source.network)
        await self.store.copy_messages(task_id, task.id)
        return await self.get_task(task.id)
