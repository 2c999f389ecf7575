"""A server user's token quota, checked again when their turn runs (the send checked it first: 402).

`QuotaGate` is the task kit (ports.AgentPort) with one check added before the turn's setup: a turn whose owner has
used up their quota since the send ends `error` with a sentence saying so, through the one finalize path. The
tokens a turn used are counted by the post-turn `quota` job (engine/jobs.py), so one turn may overshoot.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Protocol

from ..engine.ports import AgentPort
from ..errors import QuotaExhausted
from ..providers.base import Provider
from ..store.users import quota_left


class Users(Protocol):
    async def user(self, user_id: str) -> dict[str, Any] | None: ...


async def check_quota(users: Users, user_id: str | None) -> None:
    """QuotaExhausted when the user (None: the local person, unlimited) has no tokens left."""
    if user_id is None:
        return
    user = await users.user(user_id)
    if user is not None and quota_left(user) == 0:
        raise QuotaExhausted()


class QuotaGate:
    def __init__(self, agent: AgentPort, users: Users):
        self._agent = agent
        self._users = users

    @property
    def max_steps(self) -> int:
        return self._agent.max_steps

    def provider(self, provider_id: str) -> Provider:
        return self._agent.provider(provider_id)

    async def prepare(self, task: dict[str, Any], input_parts: list[dict[str, Any]]) -> Any:
        await check_quota(self._users, task.get("owner_id"))
        return await self._agent.prepare(task, input_parts)

    def mcp_sessions(self, owner: dict[str, Any], cwd: Path) -> Any:
        return self._agent.mcp_sessions(owner, cwd)

    async def context_window(self, provider: Provider, model: str) -> tuple[int, str | None]:
        return await self._agent.context_window(provider, model)

    def background_jobs(self, task: dict[str, Any], reason: str) -> list[tuple[str, dict[str, Any]]]:
        return self._agent.background_jobs(task, reason)

    def run_job(self, kind: str, payload: dict[str, Any]) -> Awaitable[Any]:
        return self._agent.run_job(kind, payload)
