"""Skills in the Agent Skills layout: a folder with `SKILL.md` (front matter `name`, `description`, then the
instructions) and any files it refers to, under the data folder's `skills/`.

The model input lists each skill's name and description; the `skill` tool hands the model a skill's
instructions when it decides one applies, and with `file` one of the skill's own files (its folder is outside
the task's workspace, where read_file and the shell cannot go); an input starting with `/name` activates that
skill for its turn.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ToolError
from ..workspace import resolve_in_workspace
from .base import Effect, ToolContext, ToolResult
from .files import ReadFile

log = logging.getLogger(__name__)
SKILLS_DIR = "skills"
SKILL_FILE = "SKILL.md"
LISTED_FILES = 30  # a skill's files named with its instructions; more are there, just not listed
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    folder: Path
    instructions: str


def front_matter(text: str) -> tuple[dict[str, str], str]:
    """(`key: value` pairs of a leading `---` block, the rest). Values may be quoted; lists stay text."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    meta: dict[str, str] = {}
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return meta, "\n".join(lines[i + 1:]).strip()
        key, sep, value = line.partition(":")
        if sep and key.strip() and not line.startswith((" ", "\t")):
            meta[key.strip()] = value.strip().strip('"').strip("'")
    return {}, text


def load_skill(folder: Path) -> Skill:
    """The skill in `folder`; ConfigError saying what is missing."""
    path = folder / SKILL_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{folder} has no readable SKILL.md ({exc.strerror or exc}).") from None
    meta, body = front_matter(text)
    name, description = meta.get("name", ""), meta.get("description", "")
    if not _NAME.match(name):
        raise ConfigError(f"{path}: 'name' must be lowercase letters, digits and hyphens (got {name!r}).")
    if not description:
        raise ConfigError(f"{path}: 'description' is missing; it tells the model when the skill applies.")
    return Skill(name, description, folder, body)


def load_skills(home: Path) -> list[Skill]:
    """Every usable skill in the data folder, by name; a broken one is left out and logged."""
    root = home / SKILLS_DIR
    found: dict[str, Skill] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else ():
        try:
            skill = load_skill(folder)
        except ConfigError as exc:
            log.warning("skill left out: %s", exc)
            continue
        found.setdefault(skill.name, skill)
    return list(found.values())


def add_skill(home: Path, source: Path) -> Skill:
    """Copy a skill folder into the data folder (checked first); returns it."""
    skill = load_skill(source)
    target = home / SKILLS_DIR / skill.name
    if target.exists():
        raise ConfigError(f"A skill named {skill.name!r} exists already ({target}); remove it first.")
    shutil.copytree(source, target)
    return load_skill(target)


def skills_note(skills: list[Skill]) -> str | None:
    if not skills:
        return None
    lines = "\n".join(f"- {s.name}: {s.description}" for s in skills)
    return ("Skills you can load with the skill tool when one applies (the person may also start a message with "
            f"/name):\n{lines}")


def activated(skills: list[Skill], text: str) -> Skill | None:
    """The skill an input activates by starting with `/name`."""
    m = re.match(r"^/([a-z0-9][a-z0-9-]*)(\s|$)", text.strip())
    return next((s for s in skills if m and s.name == m.group(1)), None)


def instructions(skill: Skill) -> str:
    files = sorted(p.relative_to(skill.folder).as_posix() for p in skill.folder.rglob("*")
                   if p.is_file() and p.name != SKILL_FILE)
    listed = ", ".join(files[:LISTED_FILES]) + (f" and {len(files) - LISTED_FILES} more" if len(files) > LISTED_FILES
                                                 else "")
    where = (f" Its files, which you read with the skill tool's `file` argument: {listed}." if files else "")
    return f"Instructions of the skill {skill.name}.{where}\n{skill.instructions}"


class SkillTool:
    name = "skill"
    description = ("Load a skill's instructions by name (the list is in your instructions) when it applies; with "
                   "`file`, read one of the files its instructions name.")
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "file": {"type": "string", "description": "A file of the skill, relative to its folder."},
        },
        "required": ["name"],
    }
    effect = Effect.read_only
    touches = "It only reads a skill's instructions or files, from the skills folder in Hearth's data folder."

    def __init__(self, skills: list[Skill]):
        self._skills = {s.name: s for s in skills}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        skill = self._skills.get(str(args.get("name", "")).strip().lstrip("/"))
        if skill is None:
            raise ToolError(f"No skill named {args.get('name')!r}; known: {', '.join(self._skills) or 'none'}.")
        file = args.get("file")
        if not file:
            return ToolResult(instructions(skill))
        # Checked here first, so that a refusal names the skill's folder rather than the workspace.
        resolve_in_workspace(skill.folder, str(file), place=f"the folder of the skill {skill.name}")
        return await ReadFile().run({"path": str(file)}, dataclasses.replace(ctx, workspace=skill.folder))
