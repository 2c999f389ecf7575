"""The `search_knowledge` tool: passages of only this task's documents, with their source and place.

The search itself (scope, BM25, vectors) is `runtime/knowledge/search.py`'s; the kit hands this tool a function
already bound to the task's documents, so nothing the model sends can widen the scope.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ToolError
from .base import Effect, ToolContext, ToolResult

MAX_RESULTS = 10


class SearchKnowledge:
    name = "search_knowledge"
    description = ("Search the documents the person attached to this task for passages about a question or "
                   "topic. Returns the best passages with their document and place; cite them as [n].")
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, in a few words or a question."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "description": "Passages (default 6)."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    effect = Effect.read_only
    touches = "It only searches the knowledge documents it was given; it changes nothing."

    def __init__(self, answer: Callable[[str, int], Awaitable[str]]):
        self._answer = answer

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("search_knowledge needs a 'query': what to look for.")
        limit = args.get("limit", 6)
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ToolError("'limit' must be a whole number of passages.")
        return ToolResult(await self._answer(query.strip(), max(1, min(MAX_RESULTS, limit))))
