"""Each user's event feed for `GET /api/events`: the `turn_started`, `turn_ended` and `title` events of their tasks,
over Redis pub/sub (channel `hearth:<db>:feed:<user>`). Pub/sub keeps nothing: a follower gets what is published
while it is subscribed, and a client that reconnects re-reads its tasks for what it missed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio

from ...events import event_adapter
from .common import TRANSIENT, RedisUnavailable, channel, require_bytes, subscribe


class RedisFeed:
    """`publish(user_id, event)`; `follow(user_id)`: the events published for the user once it has subscribed (when
    first iterated, and Redis confirmed it), in order, until it is cancelled or closed. When the connection to Redis
    drops it raises `RedisUnavailable` rather than go on with a gap (the client reconnects and re-reads its tasks).
    `publish` raises `RedisUnavailable` too."""

    def __init__(self, client: redis.asyncio.Redis):
        require_bytes(client)
        self._client = client

    async def publish(self, user_id: str, event: Any) -> int:
        """Send the event to the user's followers; how many there were."""
        try:
            return await self._client.publish(channel(self._client, "feed", user_id), event.model_dump_json())
        except TRANSIENT as error:
            raise RedisUnavailable("sending a task event") from error

    async def follow(self, user_id: str) -> AsyncIterator[Any]:
        pubsub = await subscribe(self._client, channel(self._client, "feed", user_id), "following task events")
        try:
            while True:
                try:
                    message = await pubsub.get_message(timeout=None)
                except TRANSIENT as error:
                    raise RedisUnavailable("following task events") from error
                if message is not None and message["type"] == "message":
                    yield event_adapter.validate_json(message["data"])
        finally:
            await pubsub.aclose()
