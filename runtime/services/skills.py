"""Skills (`rt.skills`): the skill folders in the data folder's skills/, and adding one."""

from __future__ import annotations

import asyncio
import builtins  # `Skills.list` hides the builtin in the annotations below it
from pathlib import Path

from ..tools.skills import add_skill, load_skills
from .core import Core


class Skills:
    def __init__(self, core: Core):
        self._core = core

    async def list(self) -> builtins.list[dict]:
        """The skills in the data folder's skills/: name, description, folder."""
        found = await asyncio.to_thread(load_skills, self._core.home)
        return [{"name": s.name, "description": s.description, "folder": str(s.folder)} for s in found]

    async def add(self, folder: str | Path) -> dict:
        """Copy a skill folder (with its SKILL.md) into the data folder; ConfigError saying what is wrong."""
        skill = await asyncio.to_thread(add_skill, self._core.home, Path(folder).expanduser())
        return {"name": skill.name, "description": skill.description, "folder": str(skill.folder)}
