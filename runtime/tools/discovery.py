"""Many tools: when a turn's loadout passes `LIMIT` tools (built-ins plus every MCP server's), the model is offered
the built-ins and `find_tools`, which searches the other tools' names and descriptions; the tools it finds are
offered from the next step on. A loadout of 200 MCP tools then costs the prompt what one of 40 does.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ToolError
from .base import Effect, Tool, ToolContext, ToolResult

LIMIT = 40
FOUND = 8  # tools offered per search
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    words = set(_WORD.findall(text.lower()))
    return words | {w[:-1] for w in words if len(w) > 3 and w.endswith("s")}  # "files" finds "file"


class FindTools:
    name = "find_tools"
    description = ("Search the other tools available to you by what you need to do (e.g. 'create a calendar "
                   "event'); the tools it finds can be called from your next step on.")
    parameters: dict[str, Any] = {
        "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"],
    }
    effect = Effect.read_only
    touches = "It only looks up other tools by what they do."

    def __init__(self, hidden: dict[str, Tool]):
        self._hidden = hidden
        self._index = {name: _words(f"{name.replace('_', ' ')} {t.description}") for name, t in hidden.items()}

    def search(self, query: str) -> list[str]:
        wanted = _words(query)
        scored = []
        for name, words in self._index.items():
            score = len(wanted & words) + 2 * sum(w in name.lower() for w in wanted)
            if score:
                scored.append((-score, name))
        return [name for _, name in sorted(scored)[:FOUND]]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        query = str(args.get("query", "")).strip()
        if not query:
            raise ToolError("find_tools needs a 'query': what you want to do.")
        names = self.search(query)
        if not names:
            return ToolResult(f"No tool matches {query!r}. Try other words.")
        lines = "\n".join(f"- {n}: {self._hidden[n].description}" for n in names)
        return ToolResult(f"These tools can be called from your next step on:\n{lines}", state={"offer": names})


def offered(tools: dict[str, Tool], builtin: set[str]) -> tuple[list[str], FindTools | None]:
    """The names offered at the start of a turn, and the search tool when the rest is held back."""
    if len(tools) <= LIMIT:
        return list(tools), None
    hidden = {n: t for n, t in tools.items() if n not in builtin}
    return [n for n in tools if n in builtin], FindTools(hidden)
