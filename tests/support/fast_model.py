"""A provider that streams many text deltas as fast as the event loop allows (one loop turn per delta, like
reads from a fast socket), for the app's streaming test and benchmark."""

from __future__ import annotations

import asyncio

from runtime.events import Usage
from runtime.providers.base import FINISH, TEXT, USAGE


class FastModel:
    id = "fast"

    def __init__(self, n: int = 20_000):
        self.n = n
        # Short words with a paragraph break every 50 deltas: Markdown with many blocks, like a long answer.
        self.chunks = [f"w{i % 97} " if i % 50 else "\n\n" for i in range(n)]

    async def stream(self, request, **_options):
        for chunk in self.chunks:
            yield (TEXT, chunk)
            await asyncio.sleep(0)
        yield (USAGE, Usage(input_tokens=10, output_tokens=self.n))
        yield (FINISH, "stop")

    async def list_models(self) -> list[str]:
        return ["x"]

    async def aclose(self) -> None:
        pass
