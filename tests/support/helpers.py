"""Shared helpers for runtime tests."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.api import Runtime
from runtime.providers.scripted import ScriptedModel
from runtime.tools.base import Effect, FunctionTool

MODEL = "scripted/test"


async def open_runtime(home: Path, model: ScriptedModel | None = None, tools=()) -> Runtime:
    return await Runtime.open(home, providers={"scripted": model or ScriptedModel()}, tools=tools)


def write_settings(home: Path, base_url: str, **extra) -> None:
    settings = {
        "providers": [{"id": "local", "kind": "openai", "base_url": base_url}],
        "default_model": "local/test-model",
        **extra,
    }
    (home / "settings.json").write_text(json.dumps(settings))


async def collect(rt: Runtime, task_id: str, after_seq: int = 0, turn_id: str | None = None) -> list:
    return [ev async for ev in rt.subscribe(task_id, after_seq, turn_id=turn_id)]


def text_from(events) -> str:
    return "".join(ev.text for ev in events if ev.type == "text_delta")


async def _echo(args, ctx):
    return f"echo: {args.get('text', '')}"


ECHO = FunctionTool(
    name="echo",
    description="Echo the text back.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    effect=Effect.read_only,
    fn=_echo,
)
