"""The `memory.extraction` background job: after an eligible completed turn, one model call with the task's model
proposes additions, updates and deletions of memories, as JSON against the current index; they are validated,
anything that looks like a secret is dropped, duplicates are skipped, and the rest is applied with provenance.

Eligibility is a cheap test first (`eligible`): the person's input says something about themselves, their
preferences or their projects ("I prefer…", "my project…", "call me…", "remember that…"), so most turns
cost nothing. The input goes to the model with credentials cut out (`memory.scrub`), and every proposal is checked
again (`looks_secret`) before anything is written. A failure (the server, an answer that is not the JSON
asked for) fails the job: the job queue logs it and records it in the job log; it never touches the turn.
Its request is a side request (`purpose` "memory"): on a local model the person's next turn goes first, and
preempts it if it is generating (providers/llama/queue.py), so the job never delays that turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..errors import ProviderError, ToolError
from ..providers.base import TEXT, ModelRequest, Provider
from .folder import MAX_MEMORY_CHARS, SUMMARY_CHARS, Memory, looks_secret, scrub, slug

MAX_CHANGES = 5
INPUT_CHARS = 4000
ANSWER_TOKENS = 700

_ABOUT_THEMSELVES = re.compile(
    r"\b(?:i|we)\s+(?:really\s+|usually\s+|always\s+|never\s+|don't\s+|do not\s+)?"
    r"(?:prefer|like|love|hate|dislike|enjoy|work|live|speak|avoid)\b"
    r"|\b(?:i'm|i am|we're|we are)\s+(?:a|an|working|building|writing|vegetarian|vegan|allergic|based|from|learning)\b"
    r"|\bmy\s+(?:name|job|work|role|team|company|project|projects|preference|preferences|wife|husband|partner|"
    r"kids?|son|daughter|family|dog|cat|birthday|timezone|time zone|city|home|language|editor|stack|boss)\b"
    r"|\bcall me\b|\bremember (?:that|this|me)\b|\bfrom now on\b|\bplease always\b|\bnever (?:use|call|send)\b",
    re.IGNORECASE,
)

PROMPT = (
    "You keep a person's long-term memory: small notes about them that help in later, unrelated tasks. Read what "
    "the person just said and decide whether it holds a lasting fact about them, their preferences or their "
    "projects. Ignore passing requests, questions and anything about this task only. Never keep secrets "
    "(passwords, keys, tokens, account or card numbers). Answer with JSON only, no prose:\n"
    '{"add": [{"name": "short-topic", "summary": "one line", "content": "one to three sentences"}], '
    '"update": [{"name": "existing-name.md", "summary": "...", "content": "the whole new text"}], '
    '"delete": ["name.md"]}\n'
    "Use update when a memory in the index covers the topic already, delete when the person takes one back, and "
    'answer {"add": [], "update": [], "delete": []} when there is nothing to keep.'
)


def eligible(text: str) -> bool:
    """Did the person say something about themselves worth a model call?"""
    return bool(text) and bool(_ABOUT_THEMSELVES.search(text))


@dataclass(frozen=True)
class Change:
    action: str  # add | update | delete
    name: str
    text: str = ""


async def extract(memory: Memory, provider: Provider, model: str, task_id: str, said: str) -> list[Change]:
    """The job: ask the model, validate, apply; returns what was applied."""
    turn_id = await memory.repo.last_ended_turn(task_id)
    entries = await memory.sync()
    index = "\n".join(f"- {e['name']}: {e['summary']}" for e in entries) or "(no memories yet)"
    clean = scrub(said)[:INPUT_CHARS]  # what scrub cuts out is never kept either (Memory.write's `seen`)
    request = ModelRequest(model=model, max_tokens=ANSWER_TOKENS, temperature=0.0, purpose="memory", messages=[
        {"role": "system", "content": PROMPT},
        {"role": "user", "content": f"Current memory index:\n{index}\n\nWhat the person said:\n{clean}"},
    ])
    answer = []
    async for item in provider.stream(request):
        if item[0] == TEXT:
            answer.append(item[1])
    existing = {e["name"]: e["summary"] for e in entries}
    applied = []
    for change in proposals("".join(answer), existing):
        try:
            if change.action == "delete":
                await memory.delete(change.name)
            else:
                await memory.write(change.name, change.text, origin="extraction", task_id=task_id, turn_id=turn_id,
                                   seen=said)
        except ToolError:
            continue  # one bad proposal (a hidden word, a name the gate refuses, a vanished file) costs no others
        applied.append(change)
    return applied


def proposals(answer: str, existing: dict[str, str]) -> list[Change]:
    """The model's JSON as checked changes: well-formed, no secrets, no duplicates, at most MAX_CHANGES.
    ProviderError when the answer is not the JSON asked for."""
    data = _json_object(answer)
    changes: list[Change] = []
    summaries = {_norm(s): n for n, s in existing.items()}
    for action in ("update", "add"):
        items = data.get(action) or []
        if not isinstance(items, list):
            raise ProviderError(f"the model's '{action}' is not a list")
        for item in items:
            if not isinstance(item, dict):
                continue
            summary = " ".join(str(item.get("summary") or "").split())[:SUMMARY_CHARS]
            content = str(item.get("content") or "").strip()
            if not summary or not content or looks_secret(summary + "\n" + content):
                continue
            name = slug(str(item.get("name") or summary))
            if action == "add" and name not in existing and _norm(summary) in summaries:
                continue  # the same memory under another name
            text = f"# {summary}\n\n{content}"[:MAX_MEMORY_CHARS]
            if name in existing and _norm(existing[name]) == _norm(summary) and action == "add":
                continue
            if any(c.name == name for c in changes):
                continue
            changes.append(Change("update" if name in existing else "add", name, text))
            summaries.setdefault(_norm(summary), name)  # so a later proposal of this answer cannot repeat it
    for raw in data.get("delete") or []:
        name = slug(str(raw))
        if name in existing and not any(c.name == name for c in changes):
            changes.append(Change("delete", name))
    return changes[:MAX_CHANGES]


def _json_object(answer: str) -> dict:
    start, end = answer.find("{"), answer.rfind("}")
    if start < 0 or end <= start:
        raise ProviderError("the model did not answer with the JSON object asked for")
    try:
        data = json.loads(answer[start:end + 1])
    except json.JSONDecodeError as exc:
        raise ProviderError(f"the model's answer is not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ProviderError("the model's answer is not a JSON object")
    return data


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))
