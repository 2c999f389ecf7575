"""Titles: a provisional one from the first input at once, the model's own after the first completed turn.

The provisional title is written with the first input (engine/host.py) and flagged `title_provisional`. After a
turn that completed while the title was still provisional, finalize enqueues the `title` job (`title_job`, its
payload the owner, the turn and the model):
it waits a moment and until the owner is idle (a person who sends again right away goes first, and a local
model is not taken from them), asks the owner's model for a short title, and writes it only if the title is
still provisional (a rename in the meantime wins). A model that gives no usable title leaves the provisional
one as the final title; a model that fails leaves it provisional, to be tried after the next completed turn.
A first input without words (attachments only) is titled with the files' names, final at the first job.
The change is announced as a `TitleChanged` event on the runtime's feed.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from typing import TYPE_CHECKING, Any

from ..config import split_model_ref
from ..events import TitleChanged
from ..parts import text_of
from ..providers.base import TEXT, ModelRequest, Provider

if TYPE_CHECKING:
    from .ports import TurnServices

TITLE_CHARS = 60
MAX_WORDS = 8
INPUT_CHARS = 1500  # what of the first input the model reads: enough to tell what it is about
ANSWER_TOKENS = 40
WAIT_SECONDS = 0.5  # before asking: a send right after the answer starts its turn first

PROMPT = ("Write a short title, two to six words, for a conversation that begins with the message below. "
          "Reply with the title only: no quotes, no full stop at the end.")


def provisional_title(parts: list[dict]) -> str | None:
    """The first input's opening words, given at once; for an input of attachments only, their names (the
    model is then not asked: a file's name says more than a title guessed from it)."""
    words = " ".join(text_of(parts).split())
    return shorten(words or ", ".join(p["name"] for p in parts if p.get("type") == "attachment"))


def shorten(line: str) -> str | None:
    return (line[:TITLE_CHARS] + ("…" if len(line) > TITLE_CHARS else "")) or None


def clean_title(answer: str) -> str | None:
    """The model's answer as a title: its first line, without quotes, a 'Title:' label, markdown or a full
    stop; None when nothing usable is left, or the model wrote a sentence instead (more than MAX_WORDS words
    or TITLE_CHARS characters): the first input's words serve better then."""
    line = next((ln for ln in answer.splitlines() if ln.strip()), "")
    line = "".join(ch for ch in line if unicodedata.category(ch)[0] != "C")
    line = re.sub(r"^\s*(?:title\s*:\s*)", "", line, flags=re.IGNORECASE)
    line = " ".join(line.strip(" \t*#_`\"'“”‘’").split()).rstrip(".")
    if len(line.split()) > MAX_WORDS or len(line) > TITLE_CHARS:
        return None
    return line or None


def wants_title(task: dict[str, Any]) -> bool:
    """The owner's title, as its turn began, was provisional (or still unset: the first input writes it). A
    team's assignments have no such column: the plan names them."""
    return "title_provisional" in task and (task["title_provisional"] or not task["title"])


async def ask_title(provider: Provider, model: str, said: str) -> str | None:
    request = ModelRequest(model=model, max_tokens=ANSWER_TOKENS, temperature=0.2, purpose="title", messages=[
        {"role": "system", "content": PROMPT},
        {"role": "user", "content": said[:INPUT_CHARS]},
    ])
    answer = []
    async for item in provider.stream(request):
        if item[0] == TEXT:
            answer.append(item[1])
    return clean_title("".join(answer))


def title_payload(owner_id: str, turn_id: str, model: str) -> dict[str, Any]:
    """What the `title` job is given: the owner, the turn that completed and the owner's model reference."""
    return {"owner_id": owner_id, "turn_id": turn_id, "model": model}


async def title_job(services: TurnServices, payload: dict[str, Any]) -> str | None:
    """The `title` job (engine/jobs.py): `retitle` with the provider of the payload's model."""
    provider_id, model = split_model_ref(payload["model"])
    return await retitle(services, payload["owner_id"], payload["turn_id"], services.agent.provider(provider_id),
                         model)


async def retitle(services: TurnServices, owner_id: str, turn_id: str, provider: Provider,
                  model: str) -> str | None:
    """The job; returns the title it wrote, if any."""
    await asyncio.sleep(WAIT_SECONDS)
    while (slot := services.aborts.get(owner_id)) is not None:
        await asyncio.shield(slot.done)
    first = next((m for m in await services.storage.messages(owner_id, after=0, limit=3) if m["role"] == "user"),
                 None)
    said = text_of(first["parts"]).strip() if first else ""
    title = await ask_title(provider, model, said) if said else None
    if not await services.storage.settle_title(owner_id, title):
        return None
    if title:
        services.streams.announce(TitleChanged(task_id=owner_id, turn_id=turn_id, title=title))
    return title
