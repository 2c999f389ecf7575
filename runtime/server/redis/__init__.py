"""The server's ports on Redis, through redis-py's asyncio client (`redis.asyncio.Redis`, bytes replies: arq's pool
is one). Every key and channel starts with `hearth:`.

- `stream`: `RedisStreamWriter` (what a turn produces into) and `RedisStreamReader` (replay-then-live, any instance).
- `lease`: `TaskLeases`, the task's lock with a TTL and a heartbeat (`lock:{task}`).
- `abort`: `AbortBus` (Stop: a flag and a publish) and `AbortListener` (one per worker process).
- `feed`: `RedisFeed`, each user's turn_started / turn_ended / title events for `GET /api/events`.
- `common`: key names, the error a caller turns into a 503, and how an outage is waited out.
"""
