"""`hearth serve` and `hearth worker` (runtime/cli/main.py): the server host's processes (runtime/server/).

    hearth serve  [--database URL] [--redis URL] [--data DIR] [--settings FILE] [--host H] [--port P]
    hearth worker  --database URL   --redis URL  [--data DIR] [--settings FILE] [--concurrency N]

The database is `--database` or `$HEARTH_DATABASE_URL`, Redis `--redis` or `$HEARTH_REDIS_URL`. `hearth serve` with
neither runs the HTTP API over the SQLite data folder `--data` (default: the usual data folder) and runs the turns
itself; with a database alone, one process on that database; with both, an API instance of any number, whose turns
run in `hearth worker`s (which need both). `--settings` is a settings.json (providers, default model, MCP servers)
shared by every instance and worker; without it, the data folder's. `--data` holds the workspaces, memory and
knowledge files: the same folder on every instance and worker.

Each process says on stderr when it is ready (`hearth serve: listening on http://H:P`, `hearth worker: ready`),
stops cleanly on SIGTERM or Ctrl-C (an API instance ends its open streams, which clients resume elsewhere; a worker
ends its running turns `interrupted`), and turns what it cannot do into one sentence: exit 2 for a usage or
configuration error, 8 when the database or Redis cannot be reached. `$HEARTH_LEASE_SECONDS` (default 20) is how
long a dead worker's turn holds its task; the lease is renewed every third of it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from ..errors import ConfigError, HearthError, StorageError
from ..paths import data_folder
from .exits import EXIT_OK, EXIT_STORAGE, EXIT_USAGE
from .server import DATABASE_ENV

if TYPE_CHECKING:
    from arq.worker import Worker

COMMANDS = ("serve", "worker")
REDIS_ENV = "HEARTH_REDIS_URL"
LEASE_ENV = "HEARTH_LEASE_SECONDS"
LEASE_SECONDS = 20.0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--database", metavar="URL", help=f"the server's database (default: ${DATABASE_ENV})")
    where.add_argument("--redis", metavar="URL", help=f"Redis, for turns run by workers (default: ${REDIS_ENV})")
    where.add_argument("--data", metavar="DIR", help="the data folder: workspaces, memory, knowledge files (the same "
                                                     "on every instance and worker; default: the usual data folder)")
    where.add_argument("--settings", metavar="FILE", help="settings.json: providers, default model, MCP servers "
                                                          "(default: the data folder's)")
    serve = sub.add_parser("serve", parents=[where], help="serve the HTTP API (the server host)")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8300, help="the port to listen on (default: 8300)")
    worker = sub.add_parser("worker", parents=[where], help="run a server's turns (with --database and --redis)")
    worker.add_argument("--concurrency", type=int, default=4, metavar="N", help="turns at once (default: 4)")


async def run(args: argparse.Namespace) -> int:
    logging.getLogger("runtime.server").setLevel(logging.INFO)  # a turn's start and end, a reaped turn
    try:
        if args.command == "serve":
            return await _serve(args)
        return await _work(args)
    except StorageError as error:
        print(f"hearth: {error}", file=sys.stderr)
        return EXIT_STORAGE
    except HearthError as error:
        from ..server.redis.common import RedisUnavailable

        print(f"hearth: {error}", file=sys.stderr)
        return EXIT_STORAGE if isinstance(error, RedisUnavailable) else EXIT_USAGE


def _where(args: argparse.Namespace) -> tuple[str | None, str | None, str]:
    database = args.database or os.environ.get(DATABASE_ENV) or None
    redis = args.redis or os.environ.get(REDIS_ENV) or None
    return database, redis, str(data_folder(args.data or args.home))


async def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ..server.app import create_app
    from ..server.backend import open_backend, settings_file

    database, redis, data = _where(args)
    backend = await open_backend(data, database, redis, settings_file(args.settings))
    config = uvicorn.Config(create_app(backend), host=args.host, port=args.port, log_level="warning",
                            timeout_graceful_shutdown=5, lifespan="on")
    server = uvicorn.Server(config)
    # uvicorn sends itself the stop signal again once it has shut down: handled here, the process then exits 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    serving = asyncio.ensure_future(server.serve())
    while not server.started and not serving.done():
        await asyncio.sleep(0.05)
    if server.started:
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        mode = ("turns run by workers" if redis else f"turns run here, database {database}" if database
                else f"turns run here, data folder {data}")
        print(f"hearth serve: listening on http://{host}:{port} ({mode})", file=sys.stderr, flush=True)
    await serving
    return EXIT_OK


async def _work(args: argparse.Namespace) -> int:
    from arq.worker import Worker

    from ..server.backend import open_backend, settings_file
    from ..server.host import QUEUE_NAME
    from ..server.redis.abort import AbortListener
    from ..server.redis.common import TRANSIENT
    from ..server.worker import TurnWorker

    database, redis, data = _where(args)
    if database is None or redis is None:
        raise ConfigError("hearth worker needs --database and --redis (or $HEARTH_DATABASE_URL and "
                          "$HEARTH_REDIS_URL): the API instances it serves use the same.")
    if args.concurrency < 1:
        raise ConfigError("--concurrency must be 1 or more.")
    lease = _lease_seconds()
    backend = await open_backend(data, database, redis, settings_file(args.settings), lease_seconds=lease)
    assert backend.parts is not None
    listener = AbortListener(backend.parts.client)
    try:
        await listener.start()
    except BaseException:
        await backend.aclose()
        raise
    turns = TurnWorker(backend.rt, backend.parts, listener)

    worker = Worker(turns.functions(), redis_pool=backend.parts.client, queue_name=QUEUE_NAME, handle_signals=False,
                    max_jobs=args.concurrency, poll_delay=0.05)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    working = asyncio.ensure_future(_keep_working(worker))
    print(f"hearth worker: ready ({args.concurrency} turns at once)", file=sys.stderr, flush=True)
    waiting = asyncio.ensure_future(stopping.wait())
    await asyncio.wait([working, waiting], return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    try:
        await worker.close()  # the running turns end interrupted (finalized), then the connection closes
    except TRANSIENT:
        pass  # Redis is away: the queue forgets this worker's heartbeat by itself
    finally:
        await listener.aclose()
        await backend.aclose()
    if working.done() and not working.cancelled():
        working.result()  # the worker stopped by itself: why
    return EXIT_OK


async def _keep_working(worker: Worker) -> None:
    """arq's poll loop, started again while Redis is away (it ends at the first failed call); the turns running
    meanwhile go on, their streams and leases riding out the outage themselves."""
    from ..server.redis.common import TRANSIENT, Outage

    outage = Outage("taking jobs")
    while True:
        try:
            await worker.async_run()
            return
        except TRANSIENT as error:
            await outage.wait(error)
            try:
                await worker.pool.ping()
            except TRANSIENT:
                continue
            outage.over()


def _lease_seconds() -> float:
    raw = os.environ.get(LEASE_ENV, "")
    try:
        seconds = float(raw) if raw else LEASE_SECONDS
    except ValueError:
        seconds = 0
    if seconds <= 0:
        raise ConfigError(f"${LEASE_ENV} must be a number of seconds, more than 0, not {raw!r}.")
    return seconds
